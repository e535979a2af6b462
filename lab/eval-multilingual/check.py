#!/usr/bin/env python3
"""Validate the multilingual evaluation set against the knowledge base's own text extraction.

    python lab/eval-multilingual/fetch.py            # once: the documents are not in the repository
    .venv/bin/python lab/eval-multilingual/check.py  # prints "OK: all checks passed", exit 0

Checks: the record formats of questions.jsonl (with `lang` and `doc_lang`), ood.jsonl (with
`lang`) and acl.json; that every needle occurs exactly once in the whole corpus, in its `doc`,
and not in a heading, both in the knowledge base's extraction (kb.library.ingest.extract: what
`manage.py evaluate` indexes) and in the reference extraction of docs/EVALUATION.md
(BeautifulSoup get_text; HTML only, see reference_texts), so an outside scorer agrees; that each document has one
`doc_lang`. Matching follows lab/evaluation/metrics.py: NFKC, whitespace collapsed, and for
needles in a script written without spaces (Japanese here) whitespace removed altogether.
"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CORPUS = HERE / "corpus"
KEYS = {"id", "gt", "query", "phrasing", "needle", "doc", "intent", "identifier", "lang", "doc_lang"}
LANGS = {"en", "fr", "es", "ru", "ja"}

sys.path.insert(0, str(ROOT))
from lab.evaluation.metrics import holds, normalize, spaceless_script  # noqa: E402  (after the path is set)


def kb_texts() -> tuple[dict[str, str], dict[str, list[str]]]:
    from kb.library.ingest.extract import detect_mime, extract

    texts, headings = {}, {}
    for path in sorted(p for p in CORPUS.rglob("*") if p.is_file()):
        data = path.read_bytes()
        rel = path.relative_to(CORPUS).as_posix()
        extracted = extract(data=data, mime=detect_mime(filename=path.name, head=data[:8192]), filename=path.name)
        texts[rel] = extracted.text
        headings[rel] = [h.title for h in extracted.headings]
    return texts, headings


def reference_texts() -> dict[str, str]:
    """HTML as the reference extraction reads it (docs/EVALUATION.md). The PDF is left out: pypdf runs the words of this
    LaTeX-made PDF together (no spaces at all), so no sentence of it survives that extraction."""
    from bs4 import BeautifulSoup

    texts = {}
    for path in sorted(p for p in CORPUS.rglob("*.html") if p.is_file()):
        rel = path.relative_to(CORPUS).as_posix()
        texts[rel] = BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser").get_text()
    return texts


def occurrences(needle: str, texts: dict[str, str]) -> dict[str, int]:
    """Where the needle occurs, counted as the scorer matches it (see lab/evaluation/metrics.py)."""
    wanted = normalize(needle)
    if spaceless_script(wanted):
        wanted = "".join(wanted.split())
        counts = {doc: "".join(normalize(text).split()).count(wanted) for doc, text in texts.items()}
    else:
        counts = {doc: normalize(text).count(wanted) for doc, text in texts.items()}
    return {doc: n for doc, n in counts.items() if n}


def check() -> list[str]:
    if not CORPUS.is_dir():
        return ["corpus/ is missing: run python lab/eval-multilingual/fetch.py first"]
    problems: list[str] = []
    texts, headings = kb_texts()
    reference = reference_texts()
    questions = [json.loads(line) for line in (HERE / "questions.jsonl").read_text(encoding="utf-8").splitlines()]
    ood = [json.loads(line) for line in (HERE / "ood.jsonl").read_text(encoding="utf-8").splitlines()]
    acl = json.loads((HERE / "acl.json").read_text(encoding="utf-8"))

    by_gt: dict[str, list[dict[str, object]]] = defaultdict(list)
    doc_langs: dict[str, set[str]] = defaultdict(set)
    for n, q in enumerate(questions, 1):
        if set(q) != KEYS:
            problems.append(f"questions.jsonl line {n}: keys {sorted(q)}, expected {sorted(KEYS)}")
            continue
        by_gt[q["gt"]].append(q)
        doc_langs[q["doc"]].add(q["doc_lang"])
        if q["id"] != f"{q['gt']}-{q['phrasing']}" or q["phrasing"] not in ("doc", "ticket"):
            problems.append(f"{q['id']}: id must be <gt>-<phrasing>, phrasing doc or ticket")
        if q["intent"] not in ("screen", "concept") or not isinstance(q["identifier"], bool):
            problems.append(f"{q['id']}: intent screen/concept, identifier true/false")
        if q["lang"] not in LANGS or q["doc_lang"] not in LANGS:
            problems.append(f"{q['id']}: lang/doc_lang outside {sorted(LANGS)}")
        if holds(q["query"], q["needle"]):
            problems.append(f"{q['id']}: the query quotes the needle")
    for gt, pair in by_gt.items():
        if sorted(str(q["phrasing"]) for q in pair) != ["doc", "ticket"]:
            problems.append(f"{gt}: needs one doc and one ticket phrasing")
        if len({json.dumps([q[k] for k in ("needle", "doc", "intent", "identifier", "lang", "doc_lang")])
                for q in pair}) != 1:
            problems.append(f"{gt}: its phrasings differ in needle, doc, intent, identifier, lang or doc_lang")
        needle, doc = str(pair[0]["needle"]), str(pair[0]["doc"])
        if needle != " ".join(needle.split()):
            problems.append(f"{gt}: needle not whitespace-normalised")
        low, high = (15, 120) if spaceless_script(needle) else (40, 250)
        if not low <= len(needle) <= high:
            problems.append(f"{gt}: needle length {len(needle)} outside {low}-{high}")
        for name, corpus in (("kb", texts), ("reference", reference)):
            found = occurrences(needle, corpus)
            if found != {doc: 1} and not (name == "reference" and doc not in corpus and not found):
                problems.append(f"{gt}: {name} extraction finds the needle {found or 'nowhere'}, wanted once in {doc}")
        if any(holds(h, needle) for h in headings.get(doc, [])):
            problems.append(f"{gt}: the needle is (in) a heading")
    for doc, langs in doc_langs.items():
        if len(langs) != 1:
            problems.append(f"{doc}: questions give it several doc_lang values {sorted(langs)}")

    ids = Counter(o.get("id") for o in ood)
    problems += [f"ood.jsonl: duplicate id {i}" for i, c in ids.items() if c > 1]
    for o in ood:
        if set(o) != {"id", "query", "kind", "lang"} or o["kind"] not in ("near", "far", "literal-trap") \
                or o["lang"] not in LANGS:
            problems.append(f"ood {o.get('id')}: keys id, query, kind (near/far/literal-trap), lang")

    groups, users = acl["groups"], acl["users"]
    if set(groups) != set(texts):
        problems.append("acl.json groups must list exactly the corpus documents")
    problems += [f"acl.json: {d} is in corpus/{d.split('/')[0]} but group {g}" for d, g in groups.items()
                 if d.split("/")[0] != g]
    for n, case in enumerate(acl["cases"], 1):
        readable = set(users[case["user"]]) | {"everyone"}
        hidden = sorted(d for d, g in groups.items() if g not in readable)
        if sorted(case["must_not_include"]) != hidden:
            problems.append(f"acl case {n}: must_not_include must list every document {case['user']} cannot read")
        if case["must_find"] is not None and groups.get(case["must_find"]) not in readable:
            problems.append(f"acl case {n}: must_find {case['must_find']} is not readable by {case['user']}")
    return problems


def main() -> int:
    problems = check()
    for problem in problems:
        print(problem)
    print("OK: all checks passed" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
