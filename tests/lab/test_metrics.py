"""Evaluation arithmetic on hand-computed cases, and the dump/chunks line shapes."""

from __future__ import annotations

import pytest

from lab.evaluation import metrics, runner
from lab.evaluation.runner import EvaluationError


def test_needle_matching_normalises_whitespace_but_is_otherwise_exact() -> None:
    needle = "The Export button opens it."
    assert metrics.first_hit_rank(["nothing here", "The  Export\nbutton opens\tit."], needle) == 2
    assert metrics.first_hit_rank(["the export button opens it."], needle) is None  # case counts
    assert metrics.first_hit_rank(["The Export button"], needle) is None  # half a needle is no hit
    assert metrics.first_hit_rank(["a ﬁle"], "a file") == 1  # NFKC folds the PDF ligature, as the shared scorer does
    assert metrics.first_hit_rank(["x"] * 20 + ["needle"], "needle") is None  # rank 21 is beyond the top 20
    assert metrics.first_hit_rank(["x"] * 19 + ["needle"], "needle") == 20


def test_recall_at_k_and_mrr() -> None:
    ranks = [1, 2, None, 4, 9, 20]
    assert [metrics.hits_at(ranks, k) for k in metrics.KS] == [1, 3, 3, 5]  # ranks <= 1, 4, 8, 20
    assert metrics.recall_at(ranks, 4) == pytest.approx(3 / 6)
    assert metrics.recall_at([], 4) == 0.0
    # (1 + 1/2 + 0 + 1/4 + 1/9 + 1/20) / 6
    assert metrics.mrr(ranks) == pytest.approx((1 + 0.5 + 0.25 + 1 / 9 + 0.05) / 6)
    assert metrics.mrr([None, None]) == 0.0


def test_wilson_interval_matches_known_values() -> None:
    low, high = metrics.wilson(8, 10)
    assert (round(low, 4), round(high, 4)) == (0.4902, 0.9433)
    low, high = metrics.wilson(0, 10)
    assert low == 0.0 and round(high, 4) == 0.2775
    low, high = metrics.wilson(10, 10)
    assert round(low, 4) == 0.7225 and high == 1.0
    assert metrics.wilson(0, 0) == (0.0, 0.0)


def test_exact_two_sided_sign_test() -> None:
    assert metrics.sign_test(8, 2) == pytest.approx(0.109375)  # 2 * (1 + 10 + 45) / 1024
    assert metrics.sign_test(2, 8) == pytest.approx(0.109375)
    assert metrics.sign_test(10, 0) == pytest.approx(2 / 1024)
    assert metrics.sign_test(5, 5) == 1.0
    assert metrics.sign_test(0, 0) == 1.0


def test_percentile_interpolates_like_numpy() -> None:
    assert metrics.percentile([10.0, 20.0, 30.0, 40.0], 50) == 25.0
    assert metrics.percentile([10.0, 20.0, 30.0, 40.0], 95) == pytest.approx(38.5)
    assert metrics.percentile([], 50) == 0.0


def test_leaks_count_every_hit_from_a_group_the_user_does_not_read() -> None:
    doc_groups = {"everyone/a.md": "everyone", "finance/b.md": "finance", "hr/c.md": "hr"}
    users = {"bob": ["finance"], "carol": []}
    bob = metrics.readable_groups("bob", users=users, evaluator="evaluator", all_groups=["finance", "hr"])
    carol = metrics.readable_groups("carol", users=users, evaluator="evaluator", all_groups=["finance", "hr"])
    everybody = metrics.readable_groups("evaluator", users=users, evaluator="evaluator", all_groups=["finance", "hr"])
    docs = ["everyone/a.md", "finance/b.md", "hr/c.md", "hr/c.md", "unlisted.md"]
    assert metrics.count_leaks(docs, readable=bob, doc_groups=doc_groups) == 2  # hr twice
    assert metrics.count_leaks(docs, readable=carol, doc_groups=doc_groups) == 3
    assert metrics.count_leaks(docs, readable=everybody, doc_groups=doc_groups) == 0
    assert metrics.forbidden_hits(docs, ["hr/c.md"]) == 2


def test_destroyed_needles_and_truncated_chunks() -> None:
    needles = {"gt01": "one whole sentence.", "gt02": "split across two chunks."}
    contents = ["it is one  whole\nsentence. more", "split across", "two chunks."]
    assert metrics.destroyed_needles(needles, contents) == ["gt02"]
    assert metrics.truncated_chunks([10, 256, 257, 0]) == 1


def test_threshold_sweep_follows_the_gate_rule() -> None:
    rows = metrics.threshold_sweep([0.2, 0.5, None], [0.4, 0.8], [0.3, 0.5])
    assert rows == [
        {"threshold": 0.3, "in_domain_refused": pytest.approx(2 / 3), "ood_answered": 0.0},
        {"threshold": 0.5, "in_domain_refused": pytest.approx(1 / 3), "ood_answered": 0.5},
    ]


SET_QUESTIONS = [
    {"id": "gt01-doc", "gt": "gt01", "query": "q1", "phrasing": "doc", "needle": "Alpha beta.",
     "doc": "everyone/a.md", "intent": "screen", "identifier": True},
    {"id": "gt01-ticket", "gt": "gt01", "query": "q2", "phrasing": "ticket", "needle": "Alpha beta.",
     "doc": "everyone/a.md", "intent": "screen", "identifier": True},
    {"id": "gt02-doc", "gt": "gt02", "query": "q3", "phrasing": "doc", "needle": "Gamma delta.",
     "doc": "hr/b.pdf", "intent": "concept", "identifier": False},
]
SET_OOD = [{"id": "ood01", "query": "q4", "kind": "far"}, {"id": "ood02", "query": "q5", "kind": "near"}]
SET_ACL = {
    "groups": {"everyone/a.md": "everyone", "hr/b.pdf": "hr"},
    "users": {"carol": []},
    "cases": [{"user": "carol", "query": "q6", "must_not_include": ["hr/b.pdf"], "must_find": None}],
}


def _hit(doc: str, content: str, distance: float, passed: bool = False) -> dict[str, object]:
    return {"doc": doc, "content": content, "distance": distance, "passed": passed}


def test_score_run_on_a_hand_built_run() -> None:
    records = [
        {"id": "gt01-doc", "set": "questions", "user": "ev", "intent": "screen", "refused": False,
         "hits": [_hit("everyone/a.md", "Alpha  beta.", 0.2, True)]},
        {"id": "gt01-ticket", "set": "questions", "user": "ev", "intent": "concept", "refused": False,
         "hits": [_hit("hr/b.pdf", "Gamma", 0.3, True), _hit("everyone/a.md", "x Alpha beta. y", 0.4)]},
        {"id": "gt02-doc", "set": "questions", "user": "ev", "intent": "concept", "refused": True,
         "hits": [_hit("hr/b.pdf", "Gamma", 0.7)]},
        {"id": "ood01", "set": "ood", "user": "ev", "intent": "concept", "refused": True, "hits": []},
        {"id": "ood02", "set": "ood", "user": "ev", "intent": "concept", "refused": False,
         "hits": [_hit("everyone/a.md", "z", 0.5, True)]},
        {"id": "acl01", "set": "acl", "user": "carol", "intent": "concept", "refused": False,
         "hits": [_hit("everyone/a.md", "z", 0.5, True), _hit("hr/b.pdf", "leaked", 0.6)]},
    ]
    chunks = [{"doc": "everyone/a.md", "content": "Alpha beta.", "tokens": 12},
              {"doc": "hr/b.pdf", "content": "Gamma", "tokens": 300}]
    figures = metrics.score_run(questions=SET_QUESTIONS, ood=SET_OOD, acl=SET_ACL, records=records,
                                chunks=chunks, evaluator="ev", threshold=0.55)
    overall = figures["retrieval"]["all"]
    assert figures["ranks"] == {"gt01-doc": 1, "gt01-ticket": 2, "gt02-doc": None}
    assert [overall[f"R@{k}"]["count"] for k in metrics.KS] == [1, 2, 2, 2]
    assert overall["MRR"] == pytest.approx((1 + 0.5) / 3)
    assert figures["retrieval"]["phrasing=ticket"]["MRR"] == 0.5
    assert figures["retrieval"]["format=.pdf"]["R@20"]["count"] == 0
    assert figures["retrieval"]["identifier=true"]["n"] == 2
    assert figures["destroyed"] == {"count": 1, "of": 2, "gts": ["gt02"]}
    assert figures["truncated"]["count"] == 1
    assert (figures["intent"]["count"], figures["intent"]["n"]) == (2, 3)
    assert figures["refusal"]["ood_refused"]["count"] == 1
    assert figures["refusal"]["ood_by_kind"]["far"]["count"] == 1
    assert figures["refusal"]["in_domain_refused"]["count"] == 1
    case = figures["acl"]["cases"][0]
    assert (case["id"], case["leaks"], case["found"], case["refused"]) == ("acl01", 1, None, False)
    assert figures["acl"]["refused_when_null"] == {"count": 0, "n": 1}
    assert figures["leaks"]["total"] == 1 and figures["leaks"]["by_set"] == {"questions": 0, "ood": 0, "acl": 1}
    assert figures["leaks"]["acl_users"] == {"leaks": 1, "hits_checked": 2}


def test_compare_runs_pairs_queries_by_id() -> None:
    a = [{"id": f"q{i}", "set": "questions", "rank": 1} for i in range(8)] + [
        {"id": "q8", "set": "questions", "rank": None}, {"id": "q9", "set": "questions", "rank": None}]
    b = [{"id": f"q{i}", "set": "questions", "rank": None} for i in range(8)] + [
        {"id": "q8", "set": "questions", "rank": 1}, {"id": "q9", "set": "questions", "rank": 3},
        {"id": "extra", "set": "questions", "rank": 1}]
    result = metrics.compare_runs(a, b)
    hit1 = result["metrics"]["hit@1"]
    assert (hit1["wins"], hit1["losses"], hit1["ties"]) == (8, 1, 1)
    hit4 = result["metrics"]["hit@4"]
    assert (hit4["wins"], hit4["losses"], hit4["p"]) == (8, 2, pytest.approx(0.109375))
    assert (result["paired_questions"], result["only_in_b"]) == (10, 1)


def test_overrides_parse_to_the_option_types() -> None:
    assert runner.parse_overrides(["threshold=0.5", "k=10", "rerank=false", "lexical=1"]) == {
        "threshold": 0.5, "k": 10, "rerank": False, "lexical": True}
    with pytest.raises(EvaluationError, match="valid keys: .*threshold"):
        runner.parse_overrides(["treshold=0.5"])
    with pytest.raises(EvaluationError, match="not a valid int"):
        runner.parse_overrides(["k=many"])
    with pytest.raises(EvaluationError, match="not a valid bool"):
        runner.parse_overrides(["dense=maybe"])


def test_dump_and_chunk_lines_have_exactly_the_design_keys(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    record = {"id": "gt01-doc", "set": "questions", "user": "evaluator", "query": "q", "intent": "screen",
              "refused": False, "nearest": 0.2, "ms": 3.0, "hits": [
                  {"rank": 1, "doc": "everyone/a.md", "content": "c", "start": 0, "end": 1, "distance": 0.2,
                   "kind": "section", "passed": True},
                  {"rank": 2, "doc": "everyone/a.md", "content": "d", "start": 1, "end": 2, "distance": 0.6,
                   "kind": "note"}]}
    runner.write_dump(tmp_path / "raw.jsonl", [record])
    runner.write_chunks(tmp_path / "chunks.jsonl", [{"doc": "everyone/a.md", "start": 0, "end": 1, "kind": "note",
                                                      "tokens": 5, "content": "c", "extra": 1}])
    line = json.loads((tmp_path / "raw.jsonl").read_text())
    assert list(line) == ["id", "set", "user", "query", "intent", "refused", "hits"]
    assert list(line["hits"][0]) == ["rank", "doc", "content", "start", "end", "distance", "kind", "passed"]
    assert line["hits"][0]["passed"] is True and "passed" not in line["hits"][1]
    chunk = json.loads((tmp_path / "chunks.jsonl").read_text())
    assert list(chunk) == ["doc", "start", "end", "kind", "tokens", "content"]
