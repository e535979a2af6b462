"""The answer generator: retrieval as the asking user, NO ANSWER before any model, prompt, backend, citations.

`answer_stream` decides everything and yields the events a reader sees, in order:
status(retrieving) → refused, or status(generating) → token… → citations → done, or
an error at any point after retrieval. It reads the database but writes nothing; the
producer in chat.services stores each event before publishing it, and tests iterate it
directly.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from django.db.models.functions import Substr

from accounts.acl import visible_documents
from chat.backends import Backend, BackendError, get_backend
from chat.citations import CitationFilter, render_html
from chat.events import Timings, citation_from_source
from chat.prompts import Source, build_prompt
from chat.support import unsupported_claims
from kb.models import Document
from search.retrieval import Hit, SearchOptions, SearchResult, hybrid_search, reassemble

ACCESS_CHANGED = (
    "Your access to a document this answer was drawing on changed while it was being written, "
    "so it was withdrawn. Ask again to get an answer from what you can read now."
)


def _elapsed(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


def sources_for(hits: Sequence[Hit]) -> list[Source]:
    """The passed hits as numbered sources; a split section becomes one source of all its parts."""
    sources: list[Source] = []
    for hit, parts in reassemble(hits):
        if len(parts) > 1:
            start, end = parts[0].start, parts[-1].end
            text = _canonical_slice(hit.document_id, start, end)
            page = next((p.page for p in parts if p.page), None)
        else:
            start, end, text, page = hit.start, hit.end, hit.content, hit.page
        sources.append(
            Source(
                number=len(sources) + 1, chunk_id=hit.chunk_id, document_id=hit.document_id,
                document_title=hit.document_title, label=hit.breadcrumb, text=text, start=start, end=end,
                page=page, distance=hit.distance, audience=hit.audience, parts=max(1, len(parts)),
            )
        )
    return sources


def _canonical_slice(document_id: int, start: int, end: int) -> str:
    """Exactly canonical_text[start:end], cut by the database: a split section's parts overlap."""
    text = (
        Document.objects.filter(pk=document_id)
        .annotate(section=Substr("canonical_text", start + 1, end - start))
        .values_list("section", flat=True)
        .first()
    )
    return text or ""


def refusal_text(result: SearchResult) -> str:
    reason = result.refusal_reason or "NO ANSWER"
    return (
        "I could not find this in the documents you can read, so I will not guess. "
        f"({reason}.) Try the words the documents would use (a screen, field, setting or error code), "
        "or ask the team that owns the topic."
    )


def answer_stream(
    *,
    user: Any,
    question: str,
    earlier: Sequence[str] = (),
    backend: Backend | None = None,
    options: SearchOptions | None = None,
) -> Iterator[dict[str, Any]]:
    """Events for one answer (without their `message` id, which the producer adds)."""
    started = time.perf_counter()
    yield {"type": "status", "state": "retrieving"}
    result = hybrid_search(user=user, query=question, options=options)
    yield from answer_events(user=user, question=question, result=result, started=started, earlier=earlier,
                             backend=backend)


def answer_events(
    *,
    user: Any,
    question: str,
    result: SearchResult,
    started: float,
    earlier: Sequence[str] = (),
    backend: Backend | None = None,
) -> Iterator[dict[str, Any]]:
    """`answer_stream` after retrieval: refusal or generation from `result` (evaluation reuses one search)."""
    retrieval_ms = _elapsed(started)
    timings: Timings = {"retrieval_ms": retrieval_ms, "first_token_ms": None, "total_ms": None}
    facts = {"intent": result.intent, "nearest_distance": result.nearest_distance, "threshold": result.threshold}
    if not result.answerable:
        # NO ANSWER is decided by two numbers, before any model is asked anything.
        timings["total_ms"] = _elapsed(started)
        yield {"type": "refused", "reason": result.refusal_reason or "NO ANSWER", "text": refusal_text(result),
               "intent": result.intent, "timings": timings, "_facts": facts}
        return

    sources = sources_for(result.passed)
    timings["retrieval_ms"] = _elapsed(started)
    prompt = build_prompt(question=question, intent=result.intent, sources=sources, earlier=earlier)
    del result  # the ranked candidates and their vectors are not needed past this point
    backend = backend or get_backend()
    given = {s.document_id for s in sources}
    # `_sources` is stored before any text: every reader of a partial or failed answer is
    # checked against all of them (chat.selectors), not only against what ends up cited.
    yield {"type": "status", "state": "generating", "backend": backend.name, "model": backend.model,
           "notice": backend.notice, "intent": prompt.intent, "_facts": facts, "_sources": sorted(given)}

    stream = CitationFilter(k=len(sources))
    length = 0
    try:
        for piece in backend.generate(prompt):
            text = stream.feed(piece)
            if text:
                if timings["first_token_ms"] is None:
                    timings["first_token_ms"] = _elapsed(started)
                yield {"type": "token", "at": length, "text": text}
                length += len(text)
        text = stream.finish()
        if text:
            if timings["first_token_ms"] is None:
                timings["first_token_ms"] = _elapsed(started)
            yield {"type": "token", "at": length, "text": text}
    except BackendError as exc:
        yield {"type": "error", "error": f"The answer could not be finished: {exc}."}
        return
    finally:
        backend.release()
    if not stream.text.strip():
        yield {"type": "error", "error": "The answer could not be finished: the model returned no text."}
        return

    # Access may have changed while the model wrote: check every source it was given, now.
    readable = set(visible_documents(user).filter(pk__in=given).values_list("pk", flat=True))
    if readable != given:
        yield {"type": "error", "error": ACCESS_CHANGED, "_withdraw": True}
        return
    by_number = {s.number: s for s in sources}
    cited = [by_number[n] for n in sorted(stream.cited)]
    yield {"type": "citations", "citations": [citation_from_source(s) for s in cited]}
    unsupported = unsupported_claims(stream.text, {s.number: s.text for s in cited})
    timings["total_ms"] = _elapsed(started)
    yield {
        "type": "done", "text": stream.text,
        "html": render_html(stream.text, {s.number: s for s in cited}, unsupported=unsupported),
        "intent": prompt.intent, "backend": backend.name, "model": backend.model, "notice": backend.notice,
        "timings": timings, "unsupported": unsupported,
    }
