"""`evaluate --answers`: answer each query the way /api/ask does, and score what a reader got.

`answer_record` runs chat.answering on the query's search result; the arithmetic below is pure
Python on the run's records, like lab.evaluation.metrics. Definitions:

- *needle in answer*: the answer text, with its [n] markers removed and whitespace
  normalised, contains the whole needle sentence. The extractive answer cites before the
  closing full stop ("… balance sheet [2]."), so the markers must go before matching.
- *needle's passage cited*: one of the answer's citations quotes a passage holding the needle.
- *cited sentences supported*: chat.claim_support's rule over every sentence carrying [n]
  (pooled over all answers).
- *refusal*: the share of answerable (in-domain) and out-of-domain questions refused.
- *time to first token*: from the start of retrieval to the first piece of answer text.
- *mean length*: characters of the answers given (refusals left out), markers included.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chat.answering import answer_events
from chat.backends import Backend, get_backend
from chat.claim_support import cited_sentences
from chat.match import CLOSEST
from lab.evaluation.metrics import normalize, percentile, rate
from search.retrieval import SearchResult

MARKERS = re.compile(r"\s*\[\d{1,3}\]")


def answer_record(*, backend: Backend, user: Any, query: str, result: SearchResult, started: float,
                  paths: Mapping[int, str]) -> dict[str, Any]:
    """The answer /api/ask would give from this search result (chat.answering), as the dump records it.

    `quotes` (the cited sources' text) and the support counts are for scoring; the dump leaves them out.
    """
    answer: dict[str, Any] = {"text": "", "refused": False, "citations": [], "first_token_ms": None}
    quotes: list[str] = []
    for event in answer_events(user=user, question=query, result=result, started=started, backend=backend):
        if event["type"] == "refused":
            answer.update(text=event["text"], refused=True, reason=event["reason"])
        elif event["type"] == "citations":
            answer["citations"] = [{"n": c["number"], "doc": paths[c["document_id"]], "start": c["start"],
                                    "end": c["end"]} for c in event["citations"]]
            quotes = [c["quote"] for c in event["citations"]]
        elif event["type"] == "done":
            answer.update(text=event["text"], first_token_ms=event["timings"]["first_token_ms"],
                          match=event.get("match"), match_signals=event.get("match_signals"),
                          cited_sentences=len(cited_sentences(event["text"])),
                          unsupported=[c["sentence"] for c in event["unsupported"]])
        elif event["type"] == "error":
            answer.update(error=event["error"])
    answer["quotes"] = quotes
    answer["ms"] = (time.perf_counter() - started) * 1000
    return answer


@dataclass
class Answerer:
    """Answers one evaluated query from its search result with one backend."""

    backend_impl: Backend

    @property
    def backend(self) -> str:
        return self.backend_impl.name

    def answer(self, *, user: Any, query: str, result: SearchResult, started: float,
               paths: Mapping[int, str]) -> dict[str, Any]:
        return answer_record(backend=self.backend_impl, user=user, query=query, result=result, started=started,
                             paths=paths)


def answerer(backend: str | None) -> Answerer:
    """The answerer for `backend` (default: the configured KB_ANSWER_BACKEND)."""
    return Answerer(get_backend(backend))


def answer_plain(text: str) -> str:
    """The answer as a reader reads it for matching: markers out, whitespace normalised."""
    return normalize(MARKERS.sub("", text))


def holds_needle(text: str, needle: str) -> bool:
    return normalize(needle) in answer_plain(text)


def passage_cited(quotes: Sequence[str], needle: str) -> bool:
    wanted = normalize(needle)
    return any(wanted in normalize(q) for q in quotes)


def _slice(flags: Sequence[bool]) -> dict[str, Any]:
    return rate(sum(flags), len(flags))


def score_answers(*, questions: Sequence[Mapping[str, Any]], ood: Sequence[Mapping[str, Any]],
                  records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The --answers figures; `records` are the run's records carrying `answer`."""
    by_id = {r["id"]: r for r in records if r["set"] in ("questions", "ood") and "answer" in r}
    per_question: dict[str, dict[str, bool]] = {}
    for q in questions:
        answer = by_id[q["id"]]["answer"]
        per_question[q["id"]] = {
            "needle": not answer["refused"] and holds_needle(answer["text"], q["needle"]),
            "cited": passage_cited(answer.get("quotes", []), q["needle"]),
            "refused": answer["refused"],
            "weak": not answer["refused"] and answer.get("match") == CLOSEST,
        }
    slices: dict[str, list[Mapping[str, Any]]] = {"all": list(questions)}
    for key in ("phrasing", "intent"):
        for q in questions:
            slices.setdefault(f"{key}={q[key]}", []).append(q)
    answered = [r["answer"] for r in by_id.values() if not r["answer"]["refused"] and r["answer"]["text"]]
    # The match label's worth: how often "closest" lands on a wrong answer (the needle missing, or any
    # answer to an out-of-domain query) and on a right one.
    given = [q for q in questions if not per_question[q["id"]]["refused"]]
    right = [per_question[q["id"]]["weak"] for q in given if per_question[q["id"]]["needle"]]
    wrong = [per_question[q["id"]]["weak"] for q in given if not per_question[q["id"]]["needle"]] + [
        by_id[q["id"]]["answer"].get("match") == CLOSEST for q in ood if not by_id[q["id"]]["answer"]["refused"]]
    ttft = [a["first_token_ms"] for a in answered if a.get("first_token_ms") is not None]
    cited_sentences = sum(a.get("cited_sentences", 0) for a in answered)
    unsupported = sum(len(a.get("unsupported", [])) for a in answered)
    return {
        "slices": {
            name: {
                "n": len(qs),
                "needle": _slice([per_question[q["id"]]["needle"] for q in qs]),
                "cited": _slice([per_question[q["id"]]["cited"] for q in qs]),
            }
            for name, qs in slices.items()
        },
        "supported": rate(cited_sentences - unsupported, cited_sentences),
        "in_domain_refused": _slice([per_question[q["id"]]["refused"] for q in questions]),
        "ood_refused": _slice([by_id[q["id"]]["answer"]["refused"] for q in ood]),
        "weak_on_wrong": _slice(wrong),
        "weak_on_right": _slice(right),
        "errors": sum(1 for r in by_id.values() if r["answer"].get("error")),
        "mean_chars": sum(len(a["text"]) for a in answered) / len(answered) if answered else 0.0,
        "first_token_p50_ms": percentile(ttft, 50) if ttft else None,
        "first_token_p95_ms": percentile(ttft, 95) if ttft else None,
        "per_question": per_question,
    }


def render_answers(figures: Mapping[str, Any], *, backend: str) -> list[str]:
    """The answer block of the printed report."""
    def cell(r: Mapping[str, Any]) -> str:
        return f"{r['count']:>3}/{r['n']:<3} {r['rate']:.3f} [{r['ci'][0]:.2f},{r['ci'][1]:.2f}]"

    lines = ["", f"Answers ({backend} backend): needle = the answer text holds the whole needle sentence; "
                 "cited = a citation quotes the needle's passage",
             f"{'slice':<20}{'n':>5}  {'needle in answer':<28}passage cited"]
    for name, block in figures["slices"].items():
        lines.append(f"{name:<20}{block['n']:>5}  {cell(block['needle']):<28}{cell(block['cited'])}")
    s = figures["supported"]
    p50, p95 = figures["first_token_p50_ms"], figures["first_token_p95_ms"]
    lines += [
        f"cited sentences supported by their quote: {cell(s)}",
        f"in-domain refused {cell(figures['in_domain_refused'])} · out-of-domain refused "
        f"{cell(figures['ood_refused'])} · errors {figures['errors']}",
        f"labelled \"closest passage\": on wrong answers {cell(figures['weak_on_wrong'])} · on right answers "
        f"{cell(figures['weak_on_right'])}",
        f"mean answer length {figures['mean_chars']:.0f} characters · time to first token "
        + (f"p50 {p50:.0f} ms / p95 {p95:.0f} ms" if p50 is not None else "n/a"),
    ]
    return lines
