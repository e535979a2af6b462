"""The JSON events of /ws/chat/<conversation>/ and how sync code publishes them.

Every event names its `message`; token events carry `at`, the offset of their text in
the answer, so a client (and the consumer, when it replays stored text first) never
shows a piece twice.

Publishing goes through one event loop per process, kept in a daemon thread: the
channel layer's Redis connections belong to a loop, and `async_to_sync` would make a
new loop, and new connections, for every single token.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, NotRequired

from channels.layers import get_channel_layer
from pydantic import Field

# pydantic (the API's schemas) reads typing_extensions' TypedDict on Python 3.11, not typing's.
from typing_extensions import TypedDict

from chat.claim_support import UnsupportedClaim

if TYPE_CHECKING:
    from chat.models import Citation
    from chat.prompts import Source

log = logging.getLogger(__name__)

PUBLISH_TIMEOUT_S = 5.0
HANDLER: Final = "chat.event"  # the consumer's chat_event() relays these


class CitationPayload(TypedDict):
    number: int
    chunk_id: int | None
    document_id: int
    document_title: str
    label: str
    link: str
    quote: str
    start: int
    end: int
    page: int | None
    parts: int
    distance: float


def citation_from_source(source: Source) -> CitationPayload:
    """A citation as the answer stream sends it, from the source the answer cites."""
    return {
        "number": source.number,
        "chunk_id": source.chunk_id,
        "document_id": source.document_id,
        "document_title": source.document_title,
        "label": source.label,
        "link": source.link,
        "quote": source.text,
        "start": source.start,
        "end": source.end,
        "page": source.page,
        "parts": source.parts,
        "distance": round(source.distance, 4),
    }


def citation_from_stored(citation: Citation) -> CitationPayload:
    """The same payload from a stored citation (replay, the REST API, the page)."""
    return {
        "number": citation.number,
        "chunk_id": citation.chunk_id,
        "document_id": citation.document_id or 0,
        "document_title": citation.document_title,
        "label": citation.label,
        "link": citation.link,
        "quote": citation.quote,
        "start": citation.start,
        "end": citation.end,
        "page": citation.page,
        "parts": citation.parts,
        "distance": citation.distance,
    }


class Timings(TypedDict):
    retrieval_ms: float | None
    first_token_ms: float | None
    total_ms: float | None


class QuestionEvent(TypedDict):
    type: Literal["question"]
    message: int
    text: str


class StatusEvent(TypedDict):
    type: Literal["status"]
    message: int
    state: Literal["queued", "retrieving", "generating"]
    backend: NotRequired[str]
    model: NotRequired[str]
    notice: NotRequired[str]
    intent: NotRequired[str]


class TokenEvent(TypedDict):
    type: Literal["token"]
    message: int
    at: int
    text: str


class CitationsEvent(TypedDict):
    type: Literal["citations"]
    message: int
    citations: list[CitationPayload]


class ClaimPayload(UnsupportedClaim):
    """An unsupported claim as sent: as the stream found it, and once stored with a reviewer's verdict."""

    verdict: NotRequired[Literal["open", "confirmed", "dismissed"]]
    reviewer: NotRequired[str]
    judged_at: NotRequired[str]  # ISO 8601: when the reviewer gave the verdict


class MatchPayload(TypedDict):
    similarity: float
    gap: float | None
    stand_in: str | None  # chat.match.stand_in: "sick leave → carer's leave"


class CuratedPayload(TypedDict):
    """A curated answer (chat.review.curated), as the reader is told: support's, by whom, approved when, and support's
    own statement, shown apart from the quotes."""

    by: str
    approved_at: str | None  # ISO 8601
    statement: str
    question: str  # the example question support answered, nearest the asker's


class DoneEvent(TypedDict):
    type: Literal["done"]
    message: int
    text: str
    html: str
    intent: str
    backend: str
    model: str
    notice: str
    timings: Timings
    withheld: bool  # True when this reader may not see a document the answer drew on (only ever in replay)
    unsupported: list[ClaimPayload]
    match: NotRequired[str]  # chat.match: "quoted" or "closest" (may not answer the question); "curated"
    match_signals: NotRequired[MatchPayload]
    curated: NotRequired[CuratedPayload]  # with match "curated": support's curated answer (chat.review.curated)


class RefusedEvent(TypedDict):
    type: Literal["refused"]
    message: int
    reason: str
    text: str
    intent: str
    timings: Timings


class ErrorEvent(TypedDict):
    type: Literal["error"]
    message: int | None
    error: str


Event = QuestionEvent | StatusEvent | TokenEvent | CitationsEvent | DoneEvent | RefusedEvent | ErrorEvent
# The same union for schemas (the REST API sends stored messages as these events): one branch per `type`.
EventSchema = Annotated[Event, Field(discriminator="type")]


class ChatEventMessage(TypedDict):
    """What goes over the channel layer to every consumer in the conversation's group."""

    type: Literal["chat.event"]
    event: Event


class _LoopThread:
    """An asyncio loop in a daemon thread, created lazily and again after a fork (Celery prefork)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = 0

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="chat-publisher", daemon=True).start()
                self._loop, self._pid = loop, os.getpid()
            return self._loop

    def run(self, coroutine: Coroutine[Any, Any, Any], timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop()).result(timeout)


_publisher = _LoopThread()


def group_name(conversation_id: int) -> str:
    return f"chat.{conversation_id}"


def publish(conversation_id: int, event: Event) -> bool:
    """Send `event` to everyone watching the conversation; False (logged) when the layer is unreachable.

    A lost event costs nothing permanent: the text is stored first, and a client that
    reconnects gets it from there.
    """
    layer = get_channel_layer()
    if layer is None:
        return False
    message: ChatEventMessage = {"type": HANDLER, "event": event}
    try:
        _publisher.run(layer.group_send(group_name(conversation_id), dict(message)), PUBLISH_TIMEOUT_S)
    except Exception:  # the answer goes on; readers recover from the stored text
        log.warning("could not publish a %s event for conversation %s", event.get("type"), conversation_id,
                    exc_info=True)
        return False
    return True
