"""Answer or refuse, end to end: the configured answerability model on a real index."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kb.library.models import Document
from search.retrieval import SearchOptions, hybrid_search
from tests.conftest import manage, service_env
from tests.factories import ingested_document

LEAVE = (
    "# Leave policy\n\n## Sick leave\n\n"
    "Employees earn four hours of sick leave every pay period, and unused sick leave carries over to the next "
    "year without limit. A doctor's note is needed only for absences longer than three working days.\n\n"
    "## Annual leave\n\nAnnual leave must be requested in the time-off tool at least two weeks ahead.\n"
)
DEPOT = (
    "# Depot operations\n\n## Opening hours\n\n"
    "The Oslo depot opens at seven in the morning on weekdays and at nine on Saturdays. "
    "It is closed on Sundays and public holidays; deliveries wait at the gate.\n\n"
    "## Forklifts\n\nOnly staff with a forklift certificate may drive the forklifts in the loading bay.\n"
)


@pytest.fixture
def corpus(people: dict[str, Any]) -> list[Document]:
    return [ingested_document(LEAVE, "leave.md"), ingested_document(DEPOT, "depot.md")]


def test_a_question_whose_words_the_corpus_never_uses_is_refused_with_the_reason(
        corpus: list[Document], people: dict[str, Any]) -> None:
    result = hybrid_search(user=people["carol"], query="What is a good recipe for a sourdough starter?")
    assert result.probability is not None and result.cutoff is not None, "the configured model decides"
    assert not result.answerable and not result.passed
    reason = result.refusal_reason or ""
    assert reason.startswith("NO ANSWER: the documents you can read do not seem to answer this")
    assert "the nearest passage is at cosine distance" in reason and "above the threshold" in reason
    assert "ask with the words your documents use" in reason


def test_a_clearly_in_domain_question_is_answered(corpus: list[Document], people: dict[str, Any]) -> None:
    result = hybrid_search(user=people["carol"], query="How many hours of sick leave do employees earn per pay period?")
    assert result.answerable and result.refusal_reason is None
    assert result.probability is not None and result.cutoff is not None and result.probability >= result.cutoff
    assert "four hours of sick leave" in result.passed[0].content


def test_the_late_signals_are_read_even_with_the_late_stage_off(corpus: list[Document], people: dict[str, Any]) -> None:
    query = "How many hours of sick leave do employees earn per pay period?"
    result = hybrid_search(user=people["carol"], query=query, options=SearchOptions(late_depth=0))
    assert "sql" in result.timings_ms and "late" not in result.timings_ms and all(h.late_score is None for h in result.hits)
    assert result.signals is not None and result.signals.late_best > 0 and result.signals.weakest > 0
    assert result.answerable


def test_without_the_model_the_distance_threshold_decides(corpus: list[Document], people: dict[str, Any]) -> None:
    result = hybrid_search(user=people["carol"], query="What is a good recipe for a sourdough starter?",
                           options=SearchOptions(answerability=False, threshold=0.3))
    assert not result.answerable and result.probability is None
    assert (result.refusal_reason or "").startswith("NO ANSWER: the nearest passage is at cosine distance")
    assert "above the threshold 0.300" in (result.refusal_reason or "")


def test_a_broken_answerability_file_stops_start_up_with_the_reason(tmp_path: Path) -> None:
    broken = tmp_path / "model.json"
    broken.write_text(json.dumps({"model": {"features": ["nearest", "colour"], "mean": [0, 0], "scale": [1, 1],
                                            "coefficients": [1, 1], "bias": 0, "cutoff": 0.5}}), encoding="utf-8")
    run = manage("check", env=service_env(KB_ANSWERABILITY_FILE=str(broken)))
    assert run.returncode != 0 and "KB_ANSWERABILITY: unknown answerability signals ['colour']" in run.stderr
    broken.write_text("{not json", encoding="utf-8")
    run = manage("check", env=service_env(KB_ANSWERABILITY_FILE=str(broken)))
    assert run.returncode != 0 and f"KB_ANSWERABILITY_FILE: cannot read {broken}" in run.stderr
    assert manage("check", env=service_env(KB_ANSWERABILITY_FILE="off")).returncode == 0
