"""`manage.py calibrate` on a tiny set: real scratch database, real pipeline and model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import manage, service_env
from tests.search.test_answerability import DEPOT, LEAVE

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
