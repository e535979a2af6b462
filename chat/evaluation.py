"""`evaluate --answers`: answer each evaluated query the way /api/ask does, and record what a reader got.

search.evaluation scores the records; it cannot import chat (chat is the layer above), so
chat.apps registers `EvaluationAnswerer` with it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chat.answering import answer_events
from chat.backends import Backend, get_backend
from chat.support import cited_sentences
from search.retrieval import SearchResult


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
                          cited_sentences=len(cited_sentences(event["text"])),
                          unsupported=[c["sentence"] for c in event["unsupported"]])
        elif event["type"] == "error":
            answer.update(error=event["error"])
    answer["quotes"] = quotes
    answer["ms"] = (time.perf_counter() - started) * 1000
    return answer


@dataclass
class EvaluationAnswerer:
    backend_impl: Backend

    @property
    def backend(self) -> str:
        return self.backend_impl.name

    def answer(self, *, user: Any, query: str, result: Any, started: float,
               paths: Mapping[int, str]) -> dict[str, Any]:
        return answer_record(backend=self.backend_impl, user=user, query=query, result=result, started=started,
                             paths=paths)


def evaluation_answerer(backend: str | None) -> EvaluationAnswerer:
    """The answerer for `backend` (default: the configured KB_ANSWER_BACKEND)."""
    return EvaluationAnswerer(get_backend(backend))
