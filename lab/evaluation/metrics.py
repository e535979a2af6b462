"""Retrieval arithmetic: hits, recall@k, MRR, Wilson intervals, the sign test, leaks.

Pure Python on plain data (no Django), so an evaluation run can be re-scored from its
dump alone and every number here can be checked by hand in a unit test. Matching
follows docs/EVALUATION.md ("What the numbers mean"): a chunk is a hit when it contains the whole needle
after whitespace normalisation (NFKC first, as the shared scorer does, so a PDF's
compatibility characters compare equal to the plain text of the needle); a needle in a
script written without spaces (Chinese, Japanese, Thai) also matches with every space
removed, since a line break inside its sentence becomes a space that carries no meaning.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any

KS = (1, 4, 8, 20)
DEPTH = 20  # ranks beyond this never count as a hit
Z95 = 1.96  # the shared scorer's z; 1.959964 would move the third decimal on some intervals
EVERYONE = "everyone"
WINDOW = 256  # the embedding model's window, [CLS] and [SEP] included


# Matching ------------------------------------------------------------------------


def normalize(text: str) -> str:
    """Every run of whitespace becomes one space; compatibility forms fold (NFKC)."""
    return " ".join(unicodedata.normalize("NFKC", text or "").split())


# Han, kana and Thai: scripts that put no space between words.
_SPACELESS = re.compile("[\u0e00-\u0e7f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def spaceless_script(text: str) -> bool:
    """Whether `text` holds characters of a script written without spaces between words."""
    return bool(_SPACELESS.search(text))


def holds(content: str, needle: str) -> bool:
    """Whether `content` holds the whole needle: normalised, and for spaceless scripts also with spaces removed."""
    wanted, text = normalize(needle), normalize(content)
    if wanted in text:
        return True
    return spaceless_script(wanted) and "".join(wanted.split()) in "".join(text.split())


def first_hit_rank(contents: Iterable[str], needle: str, *, depth: int = DEPTH) -> int | None:
    """1-based rank of the first text that holds the whole needle, or None."""
    for rank, content in enumerate(contents, 1):
        if rank > depth:
            break
        if holds(content, needle):
            return rank
    return None


def destroyed_needles(needles: Mapping[str, str], contents: Iterable[str]) -> list[str]:
    """Ground-truth ids whose needle no single chunk holds whole: recall for them is capped at 0."""
    texts = [normalize(c) for c in contents]
    return sorted(gt for gt, needle in needles.items() if not any(holds(t, needle) for t in texts))


def truncated_chunks(token_counts: Iterable[int], *, window: int = WINDOW) -> int:
    """Chunks longer than the model window: the encoder silently drops their tail."""
    return sum(1 for tokens in token_counts if (tokens or 0) > window)


# Rates and intervals ---------------------------------------------------------------


def hits_at(ranks: Sequence[int | None], k: int) -> int:
    return sum(1 for rank in ranks if rank is not None and rank <= k)


def recall_at(ranks: Sequence[int | None], k: int) -> float:
    """Share of queries with a hit at rank <= k (0 for no queries)."""
    return hits_at(ranks, k) / len(ranks) if ranks else 0.0


def reciprocal_rank(rank: int | None) -> float:
    return 1.0 / rank if rank else 0.0


def mrr(ranks: Sequence[int | None]) -> float:
    """Mean reciprocal rank of the first hit; a query without one counts 0."""
    return sum(reciprocal_rank(r) for r in ranks) / len(ranks) if ranks else 0.0


def wilson(successes: int, n: int, *, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval: honest near 0 and 1, where p ± z·se leaves [0, 1]."""
    if n == 0:
        return (0.0, 0.0)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


def sign_test(wins: int, losses: int) -> float:
    """Exact two-sided sign test on the discordant pairs (ties carry no information)."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1))
    return min(1.0, 2 * tail / (1 << n))


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def rate(count: int, n: int) -> dict[str, Any]:
    """A share with its count and Wilson 95% interval, as reported everywhere."""
    low, high = wilson(count, n)
    return {"count": count, "n": n, "rate": count / n if n else 0.0, "ci": [low, high]}


def paired(a: Mapping[str, float], b: Mapping[str, float]) -> tuple[int, int, int]:
    """(wins, losses, ties) of A over B on the keys both have."""
    shared = a.keys() & b.keys()
    wins = sum(1 for key in shared if a[key] > b[key])
    losses = sum(1 for key in shared if a[key] < b[key])
    return wins, losses, len(shared) - wins - losses


# Permissions -----------------------------------------------------------------------


def readable_groups(
    user: str, *, users: Mapping[str, Sequence[str]], evaluator: str, all_groups: Iterable[str]
) -> set[str]:
    """Groups `user` may read: their own plus everyone; the evaluator is in every group."""
    own = set(all_groups) if user == evaluator else set(users.get(user, ()))
    return own | {EVERYONE}


def count_leaks(docs: Iterable[str], *, readable: set[str], doc_groups: Mapping[str, str]) -> int:
    """Hits (at any rank) from a document whose group the user may not read; unlisted documents are public."""
    return sum(1 for doc in docs if doc_groups.get(doc, EVERYONE) not in readable)


def forbidden_hits(docs: Iterable[str], must_not_include: Iterable[str]) -> int:
    """An ACL case's own leak count: hits from the documents it names as forbidden."""
    forbidden = set(must_not_include)
    return sum(1 for doc in docs if doc in forbidden)


# Threshold sweep -------------------------------------------------------------------


def refused_at(nearest: float | None, threshold: float) -> bool:
    """The gate's rule: refuse when no candidate is within the threshold."""
    return nearest is None or nearest > threshold


def threshold_sweep(
    in_domain: Sequence[float | None], ood: Sequence[float | None], thresholds: Iterable[float]
) -> list[dict[str, float]]:
    """For each threshold, the share of in-domain queries refused and of OOD queries answered ("bluffs")."""
    rows = []
    for t in thresholds:
        refused = sum(1 for d in in_domain if refused_at(d, t))
        answered = sum(1 for d in ood if not refused_at(d, t))
        rows.append({
            "threshold": round(t, 4),
            "in_domain_refused": refused / len(in_domain) if in_domain else 0.0,
            "ood_answered": answered / len(ood) if ood else 0.0,
        })
    return rows


def sweep_grid(step: float = 0.005) -> list[float]:
    return [round(i * step, 4) for i in range(int(round(1.0 / step)) + 1)]


# Scoring a run ---------------------------------------------------------------------


def doc_format(doc: str) -> str:
    return PurePosixPath(doc).suffix.lower() or "(none)"


def splits(questions: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[Mapping[str, Any]]]]:
    """The report's slices of the answerable queries, in print order: all, phrasing, intent, identifier, format."""
    out: list[tuple[str, list[Mapping[str, Any]]]] = [("all", list(questions))]
    for key, values in (("phrasing", ("doc", "ticket")), ("intent", ("screen", "concept"))):
        out += [(f"{key}={v}", [q for q in questions if q.get(key) == v]) for v in values]
    for flag in (True, False):
        out.append((f"identifier={str(flag).lower()}", [q for q in questions if bool(q.get("identifier")) is flag]))
    formats = sorted({doc_format(q["doc"]) for q in questions})
    out += [(f"format={f}", [q for q in questions if doc_format(q["doc"]) == f]) for f in formats]
    out += language_splits(questions)
    return [(name, qs) for name, qs in out if qs]


UNKNOWN_LANG = "?"


def language(record: Mapping[str, Any], key: str = "lang") -> str:
    """A question's `lang` or `doc_lang`; a missing or empty one is the unknown language `?`."""
    return str(record.get(key) or UNKNOWN_LANG)


def has_languages(records: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a multilingual set: some record carries `lang` or `doc_lang` (docs/EVALUATION.md)."""
    return any("lang" in r or "doc_lang" in r for r in records)


def cross_language(question: Mapping[str, Any]) -> bool | None:
    """True when the question's language differs from its document's; None when either is unknown."""
    asked, written = language(question), language(question, "doc_lang")
    return None if UNKNOWN_LANG in (asked, written) else asked != written


def language_splits(questions: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[Mapping[str, Any]]]]:
    """Slices by question language, document language and cross- vs same-language; none for a set without the keys."""
    if not has_languages(questions):
        return []
    out: list[tuple[str, list[Mapping[str, Any]]]] = []
    for key in ("lang", "doc_lang"):
        values = sorted({language(q, key) for q in questions})
        out += [(f"{key}={v}", [q for q in questions if language(q, key) == v]) for v in values]
    out.append(("cross-language", [q for q in questions if cross_language(q) is True]))
    out.append(("same-language", [q for q in questions if cross_language(q) is False]))
    return out


def retrieval_block(ranks: Sequence[int | None]) -> dict[str, Any]:
    block: dict[str, Any] = {"n": len(ranks)}
    for k in KS:
        block[f"R@{k}"] = rate(hits_at(ranks, k), len(ranks))
    block["MRR"] = mrr(ranks)
    return block


def score_run(
    *,
    questions: Sequence[Mapping[str, Any]],
    ood: Sequence[Mapping[str, Any]],
    acl: Mapping[str, Any],
    records: Sequence[Mapping[str, Any]],
    chunks: Sequence[Mapping[str, Any]],
    evaluator: str,
    threshold: float,
) -> dict[str, Any]:
    """Every figure of the report from the set's files, the dump records and the chunk list.

    `records` are dump lines (docs/DESIGN.md#dump-format); an optional `nearest` key (nearest candidate
    distance, hits or not) feeds the threshold sweep.
    """
    by_key = {(r["set"], r["id"]): r for r in records}
    ranks = {q["id"]: _rank(by_key.get(("questions", q["id"])), q["needle"]) for q in questions}
    retrieval = {name: retrieval_block([ranks[q["id"]] for q in qs]) for name, qs in splits(questions)}

    needles = {q["gt"]: q["needle"] for q in questions}
    destroyed = destroyed_needles(needles, (c["content"] for c in chunks))

    answered_in = [by_key.get(("questions", q["id"])) for q in questions]
    intent_ok = sum(1 for q, r in zip(questions, answered_in, strict=True) if r and r.get("intent") == q.get("intent"))
    confusion: dict[str, int] = {}
    for q, r in zip(questions, answered_in, strict=True):
        key = f"{q.get('intent')}->{r.get('intent') if r else None}"
        confusion[key] = confusion.get(key, 0) + 1

    ood_records = [(o, by_key.get(("ood", o["id"]))) for o in ood]
    ood_by_kind: dict[str, dict[str, Any]] = {}
    for kind in sorted({str(o.get("kind", "")) for o in ood}):
        of_kind = [r for o, r in ood_records if o.get("kind", "") == kind]
        ood_by_kind[kind] = rate(sum(1 for r in of_kind if r and r.get("refused")), len(of_kind))
    refusal = {
        "threshold": threshold,
        "ood_refused": rate(sum(1 for _, r in ood_records if r and r.get("refused")), len(ood)),
        "ood_by_kind": ood_by_kind,
        "in_domain_refused": rate(sum(1 for r in answered_in if r and r.get("refused")), len(questions)),
    }
    languages = (
        language_rows(questions, answered_in, ood_records, retrieval)
        if has_languages([*questions, *ood]) else None
    )

    acl_cases = _acl_cases(acl, by_key)
    leaks = _leaks(acl, records, evaluator)
    sweep_in = [_nearest(r) for r in answered_in]
    sweep_ood = [_nearest(r) for _, r in ood_records]
    return {
        "counts": {
            "questions": len(questions),
            "ground_truths": len(needles),
            "ood": len(ood),
            "acl_cases": len(acl_cases),
            "chunks": len(chunks),
            "documents": len({c["doc"] for c in chunks}),
            "missing_records": sum(1 for r in answered_in if r is None) + sum(1 for _, r in ood_records if r is None),
        },
        "retrieval": retrieval,
        "destroyed": {"count": len(destroyed), "of": len(needles), "gts": destroyed},
        "truncated": {
            "count": truncated_chunks(c.get("tokens") or 0 for c in chunks), "of": len(chunks), "window": WINDOW,
        },
        "intent": {**rate(intent_ok, len(questions)), "confusion": confusion},
        "refusal": refusal,
        "acl": {
            "cases": acl_cases,
            "leaks": sum(c["leaks"] for c in acl_cases),
            "must_find": _tally(c["found"] for c in acl_cases),
            "refused_when_null": _tally(c["refused"] for c in acl_cases if c["must_find"] is None),
        },
        "leaks": leaks,
        "sweep": threshold_sweep(sweep_in, sweep_ood, sweep_grid()),
        "ranks": ranks,
    } | ({"languages": languages} if languages is not None else {})


def language_rows(
    questions: Sequence[Mapping[str, Any]],
    answered: Sequence[Mapping[str, Any] | None],
    ood_records: Sequence[tuple[Mapping[str, Any], Mapping[str, Any] | None]],
    retrieval: Mapping[str, Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """One row per language slice: its retrieval block, the share of its answerable questions refused
    and, for question languages, the share of that language's out-of-domain questions refused."""
    refused_by_id = {q["id"]: bool(r and r.get("refused")) for q, r in zip(questions, answered, strict=True)}
    rows = []
    for name, qs in language_splits(questions):
        if not qs:
            continue
        row: dict[str, Any] = {
            "slice": name, **retrieval[name],
            "in_domain_refused": rate(sum(refused_by_id[q["id"]] for q in qs), len(qs)),
        }
        if name.startswith("lang="):
            of_lang = [r for o, r in ood_records if language(o) == name.removeprefix("lang=")]
            row["ood_refused"] = rate(sum(1 for r in of_lang if r and r.get("refused")), len(of_lang))
        rows.append(row)
    asked = {language(q) for q in questions}
    for lang in sorted({language(o) for o, _ in ood_records} - asked):  # OOD-only languages
        of_lang = [r for o, r in ood_records if language(o) == lang]
        rows.append({"slice": f"lang={lang}", "n": 0,
                     "ood_refused": rate(sum(1 for r in of_lang if r and r.get("refused")), len(of_lang))})
    return rows


def _rank(record: Mapping[str, Any] | None, needle: str) -> int | None:
    if record is None:
        return None
    return first_hit_rank((h.get("content", "") for h in record.get("hits", [])), needle)


def _nearest(record: Mapping[str, Any] | None) -> float | None:
    if record is None:
        return None
    if "nearest" in record:
        nearest: float | None = record["nearest"]
        return nearest
    return min((h["distance"] for h in record.get("hits", [])), default=None)


def _tally(flags: Iterable[bool | None]) -> dict[str, int]:
    values = [f for f in flags if f is not None]
    return {"count": sum(1 for f in values if f), "n": len(values)}


def _acl_cases(acl: Mapping[str, Any], by_key: Mapping[tuple[str, str], Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for case_id, case in acl_case_ids(acl):
        record = by_key.get(("acl", case_id))
        docs = [h["doc"] for h in record.get("hits", [])] if record else []
        must_find = case.get("must_find")
        out.append({
            "id": case_id,
            "user": case["user"],
            "query": case["query"],
            "leaks": forbidden_hits(docs, case.get("must_not_include", [])),
            "must_find": must_find,
            "found": (must_find in docs[:DEPTH]) if must_find else None,
            "refused": bool(record and record.get("refused")),
        })
    return out


def acl_case_ids(acl: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """ACL cases in file order with their ids: an explicit `id`, else acl01, acl02, ..."""
    return [(str(case.get("id") or f"acl{i:02d}"), case) for i, case in enumerate(acl.get("cases", []), 1)]


def restricted_groups(acl: Mapping[str, Any]) -> list[str]:
    """Every group named by acl.json except `everyone`: the evaluator's memberships."""
    names = set(acl.get("groups", {}).values())
    for groups in acl.get("users", {}).values():
        names.update(groups)
    return sorted(names - {EVERYONE})


def _leaks(acl: Mapping[str, Any], records: Sequence[Mapping[str, Any]], evaluator: str) -> dict[str, Any]:
    users, doc_groups = acl.get("users", {}), acl.get("groups", {})
    all_groups = restricted_groups(acl)
    by_set: dict[str, int] = {}
    checked = checked_named = leaks_named = 0
    for record in records:
        readable = readable_groups(record["user"], users=users, evaluator=evaluator, all_groups=all_groups)
        docs = [h["doc"] for h in record.get("hits", [])]
        found = count_leaks(docs, readable=readable, doc_groups=doc_groups)
        by_set[record["set"]] = by_set.get(record["set"], 0) + found
        checked += len(docs)
        if record["user"] in users:
            checked_named += len(docs)
            leaks_named += found
    return {
        "total": sum(by_set.values()),
        "by_set": by_set,
        "hits_checked": checked,
        "acl_users": {"leaks": leaks_named, "hits_checked": checked_named},
    }


# Comparing two runs --------------------------------------------------------------


def compare_runs(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Paired wins/losses of run A over run B per metric, on the queries both answered.

    `a` and `b` are the per-query records of two `--json` files; answerable queries are
    paired by id on hit@k and reciprocal rank, and every query on whether it refused
    correctly (OOD and must-find-nothing refused, the rest answered).
    """
    qa, qb = _by_id(a, "questions"), _by_id(b, "questions")
    metrics: dict[str, dict[str, Any]] = {}
    for k in KS:
        metrics[f"hit@{k}"] = _pair(
            {i: float(_hit(r, k)) for i, r in qa.items()}, {i: float(_hit(r, k)) for i, r in qb.items()}
        )
    metrics["reciprocal rank"] = _pair(
        {i: reciprocal_rank(r.get("rank")) for i, r in qa.items()},
        {i: reciprocal_rank(r.get("rank")) for i, r in qb.items()},
    )
    ra, rb = _by_id(a, None), _by_id(b, None)
    metrics["refusal correct"] = _pair(
        {i: float(r.get("refusal_correct", False)) for i, r in ra.items() if "refusal_correct" in r},
        {i: float(r.get("refusal_correct", False)) for i, r in rb.items() if "refusal_correct" in r},
    )
    return {
        "paired_questions": len(qa.keys() & qb.keys()),
        "only_in_a": len(qa.keys() - qb.keys()),
        "only_in_b": len(qb.keys() - qa.keys()),
        "metrics": metrics,
    }


def _by_id(records: Sequence[Mapping[str, Any]], wanted: str | None) -> dict[str, Mapping[str, Any]]:
    return {f"{r['set']}:{r['id']}": r for r in records if wanted is None or r["set"] == wanted}


def _hit(record: Mapping[str, Any], k: int) -> bool:
    rank = record.get("rank")
    return rank is not None and rank <= k


def _pair(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, Any]:
    wins, losses, ties = paired(a, b)
    shared = a.keys() & b.keys()
    n = len(shared)
    return {
        "wins": wins,
        "losses": losses,
        "ties": ties,
        "p": sign_test(wins, losses),
        "a": sum(a[k] for k in shared) / n if n else 0.0,
        "b": sum(b[k] for k in shared) / n if n else 0.0,
    }
