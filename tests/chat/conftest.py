"""Chat fixtures: a small real corpus, the answer producer in a thread, websocket helpers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from chat.events import Event
from kb.library.models import Document
from tests.factories import ingested_document

SHIPMENTS = """# Shipments console

## Exporting the list

The Export button at the top right of the Shipments screen opens the Export dialog, which has two tabs, CSV and PDF.
The CSV tab exports the rows that match the current filters; the PDF tab prints the same rows as a report.
Exports larger than 50,000 rows are emailed to you as a link instead of downloading at once.

## Filters

The filter bar above the table has a Status dropdown, a Carrier field and a Date range picker.
Saved filters appear in the Views menu on the left of the filter bar.
"""

VAULT = """# Vault rotation

## Procedure

The vault rotation code for the Oslo depot is ZX-4412-QUARTZ and it changes every ninety days.
Only the on-call engineer may read it out over the phone, and never in a chat channel.
"""

EXPORT_QUESTION = "How do I export the Shipments list, and which formats does the Export dialog offer?"
VAULT_QUESTION = "What is the vault rotation code for the Oslo depot?"
OOD_QUESTION = "What is the airspeed velocity of an unladen swallow carrying a coconut?"


def received(stream: Iterable[Event]) -> list[dict[str, Any]]:
    """A stream's events as a client reads them off the wire (JSON), with any key readable without narrowing."""
    events: list[dict[str, Any]] = json.loads(json.dumps(list(stream)))
    return events


@pytest.fixture(autouse=True)
def _extractive_by_default(settings: Any) -> None:
    settings.KB_ANSWER_BACKEND = "extractive"


@pytest.fixture
def corpus(people: dict[str, Any]) -> dict[str, Document]:
    return {
        "shipments": ingested_document(SHIPMENTS, "shipments.md"),
        "vault": ingested_document(VAULT, "vault.md", public=False, groups=[people["groups"]["engineering"]]),
    }


class Producer:
    """Runs chat.services.answer_produce in its own thread (and DB connection), as a worker would."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.results: dict[int, Any] = {}

    def start(self, message_id: int) -> threading.Thread:
        def run() -> None:
            from django.db import connections

            from chat.services import answer_produce

            try:
                self.results[message_id] = answer_produce(message_id=message_id)
            finally:
                connections.close_all()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self.threads.append(thread)
        return thread

    def join(self, timeout: float = 60) -> None:
        for thread in self.threads:
            thread.join(timeout)
            assert not thread.is_alive(), "the answer producer did not finish"


@pytest.fixture
def producer() -> Iterator[Producer]:
    p = Producer()
    yield p
    p.join()


@pytest.fixture(autouse=True)
async def _close_thread_connections() -> Any:
    """Consumers reach the DB from a worker thread; close it so the test DB can be dropped."""
    yield
    from django.db import connections

    await database_sync_to_async(connections.close_all)()


async def session_cookie(user: Any) -> str:
    client = Client()
    await database_sync_to_async(client.force_login)(user)
    return client.cookies["sessionid"].value


_opened: list[WebsocketCommunicator] = []


@pytest.fixture(autouse=True)
async def _disconnect_communicators() -> Any:
    """Every consumer is told its client left: a consumer still reading the channel layer
    when the test's event loop closes can hold that loop open."""
    yield
    while _opened:
        communicator = _opened.pop()
        with contextlib.suppress(Exception):  # already gone, or it failed in the test itself
            await communicator.disconnect(timeout=5)


async def open_chat(conversation_id: int, user: Any = None, query: str = "") -> WebsocketCommunicator:
    from kb.asgi import application

    headers = [(b"origin", b"http://localhost")]
    if user is not None:
        headers.append((b"cookie", f"sessionid={await session_cookie(user)}".encode()))
    path = f"/ws/chat/{conversation_id}/" + (f"?{query}" if query else "")
    communicator = WebsocketCommunicator(application, path, headers=headers)
    _opened.append(communicator)
    return communicator


async def events_until(communicator: WebsocketCommunicator, stop: Callable[[dict[str, Any]], bool],
                       timeout: float = 30) -> list[dict[str, Any]]:
    """Events received until (and including) the first one for which `stop` is true."""
    out: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        event = await communicator.receive_json_from(timeout=max(0.1, deadline - loop.time()))
        out.append(event)
        if stop(event):
            return out


def finished(event: dict[str, Any]) -> bool:
    return event["type"] in ("done", "refused", "error") and event.get("message") is not None


def joined_tokens(events: list[dict[str, Any]], message_id: int) -> str:
    """The answer text as a client builds it; fails if a piece would be shown twice or out of place."""
    text = ""
    for event in events:
        if event["type"] == "token" and event["message"] == message_id:
            assert event["at"] == len(text), f"token at {event['at']} but the client has {len(text)} characters"
            text += event["text"]
    return text
