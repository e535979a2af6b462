"""The relevance model: its training pairs, its int8 weights, and what the shipped model ranks."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kb.models import Chunk
from search import answerability
from search.relevance import mine, model, train
from search.retrieval import hybrid_search
from tests.factories import ingested_document

PAGE = """<html><head><title>Planner Guide — Handbook</title></head><body>
<div class="sphinxsidebar"><h3>Navigation</h3><p>Back to the index of every page in this handbook</p></div>
<h1>Planner Guide</h1>
<p>The planner keeps the shift rota for the depot and mails it every Friday.</p>
<h2>1.2 Swapping a shift</h2>
<p>Open the rota, pick your shift and choose Offer swap. A colleague who accepts takes the shift once
the team lead approves it; until then the rota shows the shift as pending and both names appear.</p>
<h2>See also</h2>
<p>The leave policy, the overtime rules and the depot contact list, all kept on the intranet for staff.</p>
<h2>Printing the rota</h2>
<p>Choose File, then Print. The rota prints one week per page in landscape, with night shifts shaded
grey and public holidays marked with a star so the depot can pin it next to the clock.</p>
<h3>Printing in colour</h3>
<ul><li>Colour printing is off by default because the depot printer only prints black and white pages,
so turn it on under Preferences when you print at the head office, which has a colour printer.</li></ul>
</body></html>"""


PLANNER = """# Planner Guide

## Swapping a shift

Open the rota, pick your shift and choose Offer swap. A colleague who accepts takes the shift once the team
lead approves it.

## Printing the rota

Choose File, then Print. The rota prints one week per page, with night shifts shaded grey.
"""


def _page(tmp_path: Path) -> list[mine.Section]:
    path = tmp_path / "planner.html"
    path.write_text(PAGE, encoding="utf-8")
    return mine.sections(path)


def test_a_page_splits_into_its_headed_sections_without_navigation_or_numbering(tmp_path: Path) -> None:
    found = {s.heading: s for s in _page(tmp_path)}
    assert "Navigation" not in found  # the sidebar is dropped with its heading
    assert {"Swapping a shift", "Printing the rota", "Printing in colour"} <= set(found)  # "1.2" is gone
    assert found["Swapping a shift"].body.startswith("Open the rota, pick your shift")
    assert found["Printing in colour"].parent == "Printing the rota"
    assert found["Printing the rota"].title == "Planner Guide"


def test_pairs_ask_a_heading_of_its_own_section_against_sibling_sections(tmp_path: Path) -> None:
    page = _page(tmp_path)
    usable = [s.heading for s in page if mine.usable(s)]
    assert "See also" not in usable and "Swapping a shift" in usable  # a generic heading asks nothing
    other = [mine.Section("Other", "", "Unrelated topic", "words " * 40)]
    groups = list(mine.pairs([page, other], random.Random(1)))
    assert len([g for g in groups if g["page"] == 0]) == len(usable)
    assert list(mine.pairs([page], random.Random(1))) == []  # no other page to draw negatives from
    swap = next(g for g in groups if "Offer swap" in str(g["positive"]))
    # The passage never carries its own heading, so the pair cannot be solved by matching it.
    assert "Swapping a shift" not in str(swap["positive"])
    assert str(swap["positive"]).startswith("[Planner Guide]")
    negatives = [str(n) for n in swap["negatives"]]  # type: ignore[attr-defined]
    assert len(negatives) == 4 and "Offer swap" not in " ".join(negatives)
    assert sum("Print" in n or "olour" in n for n in negatives) >= 1  # a sibling of the same page


def test_int8_weights_stay_within_half_a_step_of_the_originals() -> None:
    import torch

    rng = np.random.default_rng(0)
    state = {"w": torch.from_numpy(rng.normal(size=(5, 7)).astype(np.float32)),
             "b": torch.from_numpy(rng.normal(size=7).astype(np.float32))}
    packed = model.quantize(state)
    assert packed["w.q"].dtype == np.int8 and "b" in packed

    class Arrays(dict[str, np.ndarray]):  # what np.load returns, as far as dequantize reads it
        files = property(lambda self: list(self))

    back = model.dequantize(Arrays(packed))
    step = np.abs(state["w"].numpy()).max(axis=1, keepdims=True) / 127
    assert (np.abs(back["w"].numpy() - state["w"].numpy()) <= step / 2 + 1e-7).all()
    assert torch.equal(back["b"], state["b"])


def test_a_trained_model_is_written_as_int8_and_feeds_the_answerability_signal(
        tmp_path: Path, people: dict[str, Any], settings: Any) -> None:
    page = _page(tmp_path)
    pairs = tmp_path / "pairs.jsonl"
    with pairs.open("w") as out:  # page 0 is held out for scoring, page 1 trains
        for group in mine.pairs([page, list(page)], random.Random(2)):
            out.write(json.dumps(group) + "\n")
    weights = tmp_path / "relevance.npz"
    assert train.main([str(pairs), "--out", str(weights), "--steps", "2", "--batch", "2"]) == 0
    with np.load(weights) as arrays:
        assert arrays["encoder.embeddings.word_embeddings.weight.q"].dtype == np.int8
        assert not any(name.startswith("encoder.encoder.layer.3.") for name in arrays.files)  # three layers

    ingested_document(PLANNER, "planner.md")
    question = "How do I swap a shift with a colleague?"
    assert hybrid_search(user=people["carol"], query=question).signals.relevance == 0.0  # off by default

    settings.KB_RELEVANCE_WEIGHTS = str(weights)
    result = hybrid_search(user=people["carol"], query=question)
    top = [Chunk.objects.get(pk=h.chunk_id).text for h in result.hits[: answerability.RELEVANCE_DEPTH]]
    assert result.signals is not None and result.signals.relevance != 0.0
    assert result.signals.relevance == pytest.approx(max(model.scores(question, top)), abs=1e-4)


def test_an_answerability_model_that_weighs_relevance_needs_the_relevance_weights(tmp_path: Path) -> None:
    calibrated = tmp_path / "answerability.json"
    calibrated.write_text(json.dumps({"model": {"features": ["nearest", "relevance"], "mean": [0, 0],
                                                "scale": [1, 1], "coefficients": [-1, 1], "bias": 0,
                                                "cutoff": 0.5}}))
    env = {**os.environ, "KB_SETTINGS_ONLY": "1", "KB_ANSWERABILITY_FILE": str(calibrated), "KB_RELEVANCE_WEIGHTS": ""}
    run = subprocess.run([sys.executable, "-c", "import kb.settings"], env=env, capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[2], check=False)
    assert run.returncode != 0
    assert "weighs the relevance signal; set KB_RELEVANCE_WEIGHTS" in run.stderr
