"""Answer or refuse, end to end: the configured answerability model on a real index, and
`manage.py calibrate` on a tiny set (real scratch database, real pipeline and model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kb.models import Document
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
    assert "late" not in result.timings_ms and all(h.late_score is None for h in result.hits)
    assert result.signals is not None and result.signals.late_best > 0 and result.signals.weakest > 0
    assert result.answerable


def test_without_the_model_the_distance_threshold_decides(corpus: list[Document], people: dict[str, Any]) -> None:
    result = hybrid_search(user=people["carol"], query="What is a good recipe for a sourdough starter?",
                           options=SearchOptions(answerability=False, threshold=0.3))
    assert not result.answerable and result.probability is None
    assert (result.refusal_reason or "").startswith("NO ANSWER: the nearest passage is at cosine distance")
    assert "above the threshold 0.300" in (result.refusal_reason or "")


# manage.py calibrate on a tiny set ------------------------------------------------------------

TINY_QUESTIONS = [
    ("q1", "leave.md", "How much sick leave do employees earn each pay period?",
     "Employees earn four hours of sick leave every pay period"),
    ("q2", "leave.md", "Does unused sick leave carry over to next year?",
     "Employees earn four hours of sick leave every pay period"),
    ("q3", "leave.md", "How far ahead must annual leave be requested?",
     "Annual leave must be requested in the time-off tool at least two weeks ahead."),
    ("q4", "depot.md", "When does the Oslo depot open on Saturdays?",
     "The Oslo depot opens at seven in the morning on weekdays and at nine on Saturdays."),
    ("q5", "depot.md", "Who may drive the forklifts in the loading bay?",
     "Only staff with a forklift certificate may drive the forklifts in the loading bay."),
    ("q6", "depot.md", "Is the depot open on public holidays?",
     "The Oslo depot opens at seven in the morning on weekdays and at nine on Saturdays."),
]
TINY_OOD = ["Who won the 2014 FIFA World Cup final?", "How far is the Moon from the Earth on average?",
            "How do I get red wine stains out of a white carpet?", "What is the capital of Australia?"]


def _tiny_set(root: Path) -> Path:
    (root / "corpus" / "everyone").mkdir(parents=True)
    (root / "corpus" / "everyone" / "leave.md").write_text(LEAVE, encoding="utf-8")
    (root / "corpus" / "everyone" / "depot.md").write_text(DEPOT, encoding="utf-8")
    with (root / "questions.jsonl").open("w", encoding="utf-8") as out:
        for qid, doc, query, needle in TINY_QUESTIONS:
            out.write(json.dumps({"id": qid, "gt": qid, "query": query, "phrasing": "doc", "needle": needle,
                                  "doc": f"everyone/{doc}", "intent": "concept", "identifier": False}) + "\n")
    with (root / "ood.jsonl").open("w", encoding="utf-8") as out:
        for i, query in enumerate(TINY_OOD, 1):
            out.write(json.dumps({"id": f"ood{i}", "query": query, "kind": "far"}) + "\n")
    groups = {"everyone/leave.md": "everyone", "everyone/depot.md": "everyone"}
    (root / "acl.json").write_text(json.dumps({"groups": groups, "users": {}, "cases": []}), encoding="utf-8")
    return root


@pytest.mark.slow
@pytest.mark.django_db
def test_calibrate_writes_a_model_and_a_cross_validated_frontier_deterministically(tmp_path: Path) -> None:
    tiny = _tiny_set(tmp_path / "set")
    out, plot = tmp_path / "answerability.json", tmp_path / "frontier.png"
    run = manage("calibrate", str(tiny), "--folds", "2", "--out", str(out), "--plot", str(plot),
                 env=service_env(), timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Cross-validated, each fold's model and cutoff fitted on the other folds" in run.stdout
    assert "6 answerable and 4 unanswerable questions · 2 folds" in run.stdout
    report = json.loads(out.read_text(encoding="utf-8"))
    model = report["model"]
    assert len(model["coefficients"]) == len(model["features"]) == 5 and 0 < model["cutoff"] < 1
    assert [row["target"] for row in report["frontier"]] == [0.02, 0.05, 0.08, 0.10, 0.15, 0.20]
    assert {s["id"] for s in report["samples"]} == {f"q{i}" for i in range(1, 7)} | {f"ood{i}" for i in range(1, 5)}
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # A far-off question is less answerable than an in-domain one under the fitted model.
    far = next(s for s in report["samples"] if s["id"] == "ood1")["signals"]
    near = next(s for s in report["samples"] if s["id"] == "q4")["signals"]
    assert far["nearest"] > near["nearest"] and "FIFA" in far["unknown_words"]

    # Refitting from the saved signals gives the same model and frontier, byte for byte.
    again = [tmp_path / "again1.json", tmp_path / "again2.json"]
    for path in again:
        refit = manage("calibrate", str(tiny), "--folds", "2", "--samples", str(out), "--out", str(path),
                       env=service_env())
        assert refit.returncode == 0, refit.stderr[-3000:]
    first, second = (json.loads(p.read_text(encoding="utf-8")) for p in again)
    assert first["model"] == second["model"] == model
    assert first["frontier"] == second["frontier"] == report["frontier"]

    bad = manage("calibrate", str(tiny), "--features", "nearest,colour", env=service_env())
    assert bad.returncode != 0 and "--features: unknown ['colour']" in bad.stderr


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
