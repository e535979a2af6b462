"""Per-language reporting of `evaluate` on a tiny multilingual set, checked by hand; sets without the keys unchanged."""

from __future__ import annotations

from typing import Any

from lab.evaluation import metrics, runner


def _q(gt: str, phrasing: str, needle: str, doc: str, **langs: str) -> dict[str, Any]:
    return {"id": f"{gt}-{phrasing}", "gt": gt, "query": "q", "phrasing": phrasing, "needle": needle, "doc": doc,
            "intent": "concept", "identifier": False, **langs}


QUESTIONS = [
    _q("fr01", "doc", "Le fichier est sauvegardé.", "everyone/fr.html", lang="fr", doc_lang="fr"),
    _q("fr01", "ticket", "Le fichier est sauvegardé.", "everyone/fr.html", lang="fr", doc_lang="fr"),
    _q("ja01", "doc", "鍵の一覧は鍵輪ファイルに格納されています。", "everyone/ja.html", lang="ja", doc_lang="ja"),
    _q("ja02", "doc", "鍵の一覧は鍵輪ファイルに格納されています。", "everyone/ja.html", lang="en", doc_lang="ja"),
    _q("xx01", "doc", "No language given here.", "everyone/en.md"),  # keys missing: the unknown language
]
OOD = [
    {"id": "ood01", "query": "q", "kind": "far", "lang": "fr"},
    {"id": "ood02", "query": "q", "kind": "far", "lang": "fr"},
    {"id": "ood03", "query": "q", "kind": "near", "lang": "ru"},  # a language only the OOD questions use
]


def _record(qid: str, contents: list[str], *, refused: bool = False, kind: str = "questions") -> dict[str, Any]:
    hits = [{"doc": "everyone/x.html", "content": c, "distance": 0.3} for c in contents]
    return {"id": qid, "set": kind, "user": "ev", "intent": "concept", "refused": refused, "hits": hits}


RECORDS = [
    _record("fr01-doc", ["Le fichier\u00a0est  sauvegardé."]),  # NBSP and double space: a hit at rank 1
    _record("fr01-ticket", ["rien", "rien", "Le fichier est sauvegardé."], refused=True),  # rank 3
    _record("ja01-doc", ["鍵の一覧は鍵輪\nファイルに格納されています。"]),  # a line break inside Japanese: still a hit
    _record("ja02-doc", ["別の文です。"]),  # cross-language miss
    _record("xx01-doc", ["No language given here."]),
    _record("ood01", [], refused=True, kind="ood"),
    _record("ood02", ["x"], kind="ood"),
    _record("ood03", [], refused=True, kind="ood"),
]


def _figures(questions: list[dict[str, Any]], ood: list[dict[str, Any]]) -> dict[str, Any]:
    return metrics.score_run(questions=questions, ood=ood, acl={"groups": {}, "users": {}, "cases": []},
                             records=RECORDS, chunks=[], evaluator="ev", threshold=0.5)


def test_spaceless_scripts_match_across_a_line_break_and_others_do_not() -> None:
    assert metrics.holds("鍵の一覧は鍵輪\nファイル", "鍵の一覧は鍵輪ファイル")
    assert metrics.holds("鍵の一覧は 鍵輪ファイル", "鍵の一覧は鍵輪ファイル")
    assert not metrics.holds("Le fi chier", "Le fichier")  # a space inside a French word is another text
    assert not metrics.holds("鍵の一覧", "鍵の一覧は鍵輪ファイル")  # half a needle is still no hit


def test_recall_and_refusals_per_question_language_document_language_and_cross_language() -> None:
    figures = _figures(QUESTIONS, OOD)
    retrieval = figures["retrieval"]
    assert [retrieval["lang=fr"][f"R@{k}"]["count"] for k in metrics.KS] == [1, 2, 2, 2]
    assert retrieval["lang=ja"]["R@1"]["count"] == 1
    assert retrieval["lang=en"]["R@20"]["count"] == 0
    assert retrieval["lang=?"]["n"] == 1 and retrieval["doc_lang=?"]["n"] == 1  # missing keys: unknown, no error
    assert retrieval["doc_lang=ja"]["n"] == 2 and retrieval["doc_lang=ja"]["R@1"]["count"] == 1
    assert retrieval["cross-language"]["n"] == 1 and retrieval["cross-language"]["R@20"]["count"] == 0
    assert retrieval["same-language"]["n"] == 3  # the question without languages is neither
    rows = {row["slice"]: row for row in figures["languages"]}
    assert rows["lang=fr"]["in_domain_refused"]["count"] == 1
    assert (rows["lang=fr"]["ood_refused"]["count"], rows["lang=fr"]["ood_refused"]["n"]) == (1, 2)
    assert rows["lang=ru"]["n"] == 0 and rows["lang=ru"]["ood_refused"]["count"] == 1
    assert "ood_refused" not in rows["doc_lang=fr"]
    table = runner._language_lines(figures["languages"])
    assert any(line.startswith("cross-language") and line.split()[1:3] == ["1", "0.000"] for line in table)


def test_a_set_without_language_keys_reports_as_before() -> None:
    plain = [{k: v for k, v in q.items() if k not in ("lang", "doc_lang")} for q in QUESTIONS]
    figures = _figures(plain, [{k: v for k, v in o.items() if k != "lang"} for o in OOD])
    assert "languages" not in figures
    assert not any(name.startswith(("lang=", "doc_lang=", "cross-", "same-")) for name in figures["retrieval"])
