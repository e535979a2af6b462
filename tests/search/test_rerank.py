"""The optional cross-encoder stage, with a real CrossEncoder built from the local MiniLM weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from search import rerank
from search.retrieval import SearchOptions, hybrid_search
from tests.factories import ingested_document

TEXT = "# Depot\n\n" + "".join(
    f"## Bay {n}\n\nBay {n} of the Oslo depot stores pallets for carrier {n} and opens at {n} in the morning.\n\n"
    for n in range(1, 7)
)


@pytest.fixture(scope="module")
def cross_encoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from sentence_transformers import CrossEncoder

    from kb.text.embedding import model_path

    torch.manual_seed(0)  # the classification head is new: make it the same every run
    model = CrossEncoder(str(model_path()), num_labels=1, device="cpu")
    target = tmp_path_factory.mktemp("cross-encoder")
    model.save(str(target))
    return target


def test_reranker_orders_the_gated_hits(
    people: dict[str, Any], settings: Any, cross_encoder_dir: Path
) -> None:
    ingested_document(TEXT, "bays.md")
    query = "When does bay 3 of the Oslo depot open?"
    assert hybrid_search(user=people["carol"], query=query).hits[0].rerank_score is None  # off by default

    settings.KB_RERANKER_PATH = str(cross_encoder_dir)
    assert rerank.status() == f"on ({cross_encoder_dir})"
    result = hybrid_search(user=people["carol"], query=query, options=SearchOptions(threshold=1.0, cap=3, answerability=False))
    passed = result.passed
    assert len(passed) == 3 and "rerank" in result.timings_ms
    scores = [h.rerank_score for h in passed]
    assert all(s is not None for s in scores)
    assert scores == sorted(scores, reverse=True)
    expected = rerank.scores(query, [h.content for h in passed])
    assert [round(s, 5) for s in scores] == [round(s, 5) for s in expected]
