"""The answer generator: retrieval as the asking user, NO ANSWER before any model, prompt, backend, citations.

`answer_stream` decides everything and yields the events a reader sees (chat.events), in order:
status(retrieving) → refused, or status(generating) → token… → citations → done, or
an error at any point after retrieval. What only storage needs (the search's figures, every
source handed to the model, a withdrawal) travels beside them in the stream's `record`. It
reads the database but writes nothing; the producer in chat.services stores each event
before publishing it, and tests iterate it directly. The sentences it writes itself (a refusal,
an error) are in the active language, the asker's (chat.services.answer_produce activates it);
answers quote the documents in their own words.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from django.db.models.functions import Length, Substr
from django.utils.translation import gettext, gettext_noop

from chat import match
from chat.backends import Backend, BackendError, get_backend
from chat.citations import CitationFilter, render_html
from chat.claim_support import quoted_at, unsupported_claims
from chat.events import ClaimPayload, CuratedPayload, Event, Timings, citation_from_source
from chat.prompts import Source, build_prompt
from kb.library.access import visible_documents
from kb.library.models import Chunk, Document
from kb.library.viewer import page_in
from kb.text.sentences import INTRODUCES, introduced
from search.retrieval import Hit, SearchOptions, SearchResult, hybrid_search, names_missing, reassemble

if TYPE_CHECKING:
    from chat.review.curated import CuratedMatch, CuratedSource

# The English sentences; each is translated where it is sent (gettext), so tests compare with these.
ACCESS_CHANGED = gettext_noop(
    "Your access to a document this answer was drawing on changed while it was being written, "
    "so it was withdrawn. Ask again to get an answer from what you can read now."
)


def _elapsed(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


INTRODUCED_CHARS = 1500  # read after a source that ends in a colon, for the list or code it introduces


def sources_for(hits: Sequence[Hit]) -> list[Source]:
    """The passed hits as numbered sources; a split section becomes one source of all its parts, and one
    that ends in a colon ("Run these three commands:") brings the list or code it introduces from the
    document, wherever the chunker cut: an answer never ends on a colon with nothing after it."""
    sources: list[Source] = []
    for hit, parts in reassemble(hits):
        if len(parts) > 1:
            start, end = parts[0].start, parts[-1].end
            text = _stitched(parts)
            if text is None:
                text = _canonical_slice(hit.document_id, start, end)
            page = next((p.page for p in parts if p.page), None)
        else:
            start, end, text, page = hit.start, hit.end, hit.content, hit.page
        if text.rstrip().endswith(INTRODUCES):
            block = introduced(_canonical_slice(hit.document_id, end, end + INTRODUCED_CHARS))
            text, end = text + block, end + len(block)
        sources.append(
            Source(
                number=len(sources) + 1, chunk_id=hit.chunk_id, document_id=hit.document_id,
                document_title=hit.document_title, label=hit.breadcrumb, text=text, start=start, end=end,
                page=page, distance=hit.distance, audience=hit.audience, parts=max(1, len(parts)),
                remembered=hit.remembered_spans,
            )
        )
    return sources


def _stitched(parts: Sequence[Chunk]) -> str | None:
    """canonical_text[first start:last end] from the parts' own contents (each is exactly its slice, and
    they overlap), without reading the whole document; None where the parts leave a gap."""
    text, end = parts[0].content, parts[0].end
    for part in parts[1:]:
        if part.start > end:
            return None
        if part.end > end:
            text += part.content[end - part.start :]
            end = part.end
    return text


def _canonical_slice(document_id: int, start: int, end: int) -> str:
    """Exactly canonical_text[start:end], cut by the database: a split section's parts overlap."""
    text = (
        Document.objects.filter(pk=document_id)
        .annotate(section=Substr("canonical_text", start + 1, end - start))
        .values_list("section", flat=True)
        .first()
    )
    return text or ""


def _pinpointed(source: Source, answer: str) -> Source:
    """The source with the sentence the answer quotes from it located, and that sentence's page: the citation
    link brings it into view (a cited section of a long manual runs over several pages)."""
    found = quoted_at(answer, source.number, source.text)
    if found is None:
        return source
    start, end = source.start + found[0], source.start + found[1]
    page = None
    if source.page is not None:
        stored = (Document.objects.filter(pk=source.document_id).annotate(length=Length("canonical_text"))
                  .values_list("pages", "length").first())
        page = page_in(stored[0], stored[1], start) if stored else None
    return replace(source, focus=(start, end, page))


NOT_FOUND = gettext_noop("I couldn't find this in the documents you can read, so I won't guess.")
MAY_HELP = gettext_noop("These passages may help, but none of them answers this directly, so I haven't written an answer.")
TRY_AGAIN = gettext_noop("Try the words the documents would use (a screen, field, setting or error code), "
                         "or ask the team that owns the topic.")


def refusal_text(result: SearchResult) -> str:
    """What the asker reads when the question is refused, in plain words: no distance, threshold or
    confidence (those are the reviewers', in `refusal_reason`). Between "answerable" and "nothing
    near" (a passage within the related margin), the closest passages are the help on offer."""
    near = result.nearest_distance is not None and result.nearest_distance <= result.related_distance
    return f"{gettext(MAY_HELP if near else NOT_FOUND)} {gettext(TRY_AGAIN)}"


@dataclass
class AnswerRecord:
    """What the producer stores about an answer and never sends to a reader.

    The stream fills each field in before it yields the event the producer stores it with.
    """

    intent: str = ""  # the search's own intent (a prompt has only the screen and concept variants)
    nearest_distance: float | None = None
    threshold: float | None = None
    # Every document handed to the generator, known before any text: a reader of a partial or
    # failed answer is checked against all of them (chat.selectors), not only against what ends up cited.
    sources: list[int] = field(default_factory=list)
    withdrawn: bool = False  # access changed while the model wrote: the stored text goes too
    # The answerability signals and the query's embedding: what a refit from verdicts and the
    # content-gap topics read back (staff-only, like the refusal reason).
    signals: dict[str, Any] = field(default_factory=dict)
    vector: list[float] | None = None
    curated: int | None = None  # the curated answer served (chat.review.curated), if one was


class AnswerStream(Iterator[Event]):
    """The events of one answer, in order, and the `record` the producer stores beside them."""

    def __init__(self, record: AnswerRecord, events: Iterator[Event]) -> None:
        self.record = record
        self._events = events

    def __next__(self) -> Event:
        return next(self._events)


def answer_stream(
    *,
    user: Any,
    question: str,
    message: int = 0,
    earlier: Sequence[str] = (),
    backend: Backend | None = None,
    options: SearchOptions | None = None,
) -> AnswerStream:
    """The events of one answer, each naming `message` (the stored answer; 0 where none is stored)."""
    record = AnswerRecord()
    return AnswerStream(record, _searched(record, user=user, question=question, message=message, earlier=earlier,
                                          backend=backend, options=options))


def _searched(record: AnswerRecord, *, user: Any, question: str, message: int, earlier: Sequence[str],
              backend: Backend | None, options: SearchOptions | None) -> Iterator[Event]:
    started = time.perf_counter()
    yield {"type": "status", "message": message, "state": "retrieving"}
    result = hybrid_search(user=user, query=question, options=options)
    yield from _answered(record, user=user, question=question, message=message, result=result, started=started,
                         earlier=earlier, backend=backend)


def answer_events(
    *,
    user: Any,
    question: str,
    result: SearchResult,
    started: float,
    message: int = 0,
    earlier: Sequence[str] = (),
    backend: Backend | None = None,
) -> AnswerStream:
    """`answer_stream` after retrieval: refusal or generation from `result` (evaluation reuses one search)."""
    record = AnswerRecord()
    return AnswerStream(record, _answered(record, user=user, question=question, message=message, result=result,
                                          started=started, earlier=earlier, backend=backend))


CURATED = "curated"  # the backend and the match level of a curated answer
CURATED_PIECE = 6  # words per token event of a curated answer's text


def _curated(record: AnswerRecord, matched: CuratedMatch, passages: Sequence[CuratedSource], *, user: Any,
             message: int, started: float, timings: Timings) -> Iterator[Event]:
    """The curated answer as an answer's events: its text in pieces, the passages as they stand now, and a
    `done` marked curated (by whom, approved when, support's statement apart from the quotes)."""
    from chat.review import curated

    answer = matched.answer
    given = {p.chunk.document_id for p in passages}
    record.sources, record.curated = sorted(given), answer.pk
    timings["retrieval_ms"] = _elapsed(started)
    yield {"type": "status", "message": message, "state": "generating", "backend": CURATED, "model": "",
           "notice": "", "intent": record.intent}
    words = re.findall(r"\S+\s*", answer.text)
    length = 0
    for i in range(0, len(words), CURATED_PIECE):
        piece = "".join(words[i : i + CURATED_PIECE])
        if timings["first_token_ms"] is None:
            timings["first_token_ms"] = _elapsed(started)
        yield {"type": "token", "message": message, "at": length, "text": piece}
        length += len(piece)
    if set(visible_documents(user).filter(pk__in=given).values_list("pk", flat=True)) != given:
        record.withdrawn = True
        yield {"type": "error", "message": message, "error": gettext(ACCESS_CHANGED)}
        return
    cited = [Source(number=p.number, chunk_id=p.chunk.pk, document_id=p.chunk.document_id,
                    document_title=p.document_title, label=p.chunk.breadcrumb, text=p.quote, start=p.start, end=p.end,
                    page=p.chunk.page, distance=matched.distance, audience=p.chunk.audience) for p in passages]
    yield {"type": "citations", "message": message, "citations": [citation_from_source(s) for s in cited]}
    timings["total_ms"] = _elapsed(started)
    yield {
        "type": "done", "message": message, "text": answer.text, "match": CURATED,
        "match_signals": {"similarity": round(1 - matched.distance, 4), "gap": None, "stand_in": None},
        "html": render_html(answer.text, {s.number: s for s in cited}), "intent": record.intent, "backend": CURATED,
        "model": "", "notice": "", "timings": timings, "withheld": False, "unsupported": [],
        "curated": cast(CuratedPayload, curated.curated_payload(answer, question=matched.question)),
    }


def _answered(record: AnswerRecord, *, user: Any, question: str, message: int, result: SearchResult,
              started: float, earlier: Sequence[str], backend: Backend | None) -> Iterator[Event]:
    retrieval_ms = _elapsed(started)
    timings: Timings = {"retrieval_ms": retrieval_ms, "first_token_ms": None, "total_ms": None}
    record.intent, record.nearest_distance, record.threshold = result.intent, result.nearest_distance, result.threshold
    record.signals = result.signals.as_json() if result.signals else {}
    if result.remembered:  # which remembered questions led here: a verdict against this answer forgets them
        record.signals["remembered"] = result.remembered
    record.vector = result.vector.tolist() if result.vector is not None else None
    # A curated answer whose example question is this one in other words, every passage of it readable by the
    # asker now, comes before the refusal and before any model (chat.review.curated; imported here: its errors are
    # chat.services', which imports this module).
    from chat.review import curated

    nearest = curated.curated_for(user=user, vector=result.vector, first=[h.chunk_id for h in result.hits])
    passages = curated.curated_sources(nearest.answer) if nearest else None
    if nearest and passages and not names_missing(result.unknown_names, [p.chunk.content for p in passages]):
        yield from _curated(record, nearest, passages, user=user, message=message, started=started, timings=timings)
        return
    if not result.answerable:
        # NO ANSWER is decided by retrieval's answerability model (search.answerability), before any model writes.
        timings["total_ms"] = _elapsed(started)
        yield {"type": "refused", "message": message, "reason": result.refusal_reason or "NO ANSWER",
               "text": refusal_text(result), "intent": result.intent, "timings": timings}
        return

    sources = sources_for(result.passed)
    timings["retrieval_ms"] = _elapsed(started)
    prompt = build_prompt(question=question, intent=result.intent, sources=sources, earlier=earlier)
    gap = result.signals.gap if result.signals else None
    del result  # the ranked candidates and their vectors are not needed past this point
    backend = backend or get_backend()
    given = {s.document_id for s in sources}
    record.sources = sorted(given)
    yield {"type": "status", "message": message, "state": "generating", "backend": backend.name,
           "model": backend.model, "notice": backend.notice, "intent": prompt.intent}

    stream = CitationFilter(k=len(sources))
    length = 0
    try:
        for piece in backend.generate(prompt):
            text = stream.feed(piece)
            if text:
                if timings["first_token_ms"] is None:
                    timings["first_token_ms"] = _elapsed(started)
                yield {"type": "token", "message": message, "at": length, "text": text}
                length += len(text)
        text = stream.finish()
        if text:
            if timings["first_token_ms"] is None:
                timings["first_token_ms"] = _elapsed(started)
            yield {"type": "token", "message": message, "at": length, "text": text}
    except BackendError as exc:
        yield {"type": "error", "message": message,
               "error": gettext("The answer could not be finished: %(reason)s.") % {"reason": exc}}
        return
    finally:
        backend.release()
    if not stream.text.strip():
        yield {"type": "error", "message": message,
               "error": gettext("The answer could not be finished: the model returned no text.")}
        return

    # Access may have changed while the model wrote: check every source it was given, now.
    readable = set(visible_documents(user).filter(pk__in=given).values_list("pk", flat=True))
    if readable != given:
        record.withdrawn = True
        yield {"type": "error", "message": message, "error": gettext(ACCESS_CHANGED)}
        return
    by_number = {s.number: s for s in sources}
    cited = [_pinpointed(by_number[n], stream.text) for n in sorted(stream.cited)]
    yield {"type": "citations", "message": message, "citations": [citation_from_source(s) for s in cited]}
    # A claim as found is a ClaimPayload with no verdict yet (mypy cannot widen to the optional keys).
    unsupported = cast(list[ClaimPayload], unsupported_claims(stream.text, {s.number: s.text for s in cited}))
    matched = match.signals(question=question, answer=stream.text, gap=gap, quotes=[s.text for s in cited])
    timings["total_ms"] = _elapsed(started)
    yield {
        "type": "done", "message": message, "text": stream.text, "match": matched.level(),
        "match_signals": {"similarity": matched.similarity, "gap": matched.gap, "stand_in": matched.stand_in},
        "html": render_html(stream.text, {s.number: s for s in cited}, unsupported=unsupported),
        "intent": prompt.intent, "backend": backend.name, "model": backend.model, "notice": backend.notice,
        "timings": timings, "withheld": False, "unsupported": unsupported,
    }
