"""End to end over real sockets: Daphne, a Celery worker and the model server are separate processes/threads.

The question goes in over HTTP (POST /api/ask, where kb/api.py mounts the chat router),
the worker answers from the test database with the `openai` backend against the stand-in
server, and a real websocket client reads /ws/chat/<id>/, drops mid-answer and comes back.
"""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest
from django.test import Client
from websockets.sync.client import ClientConnection

from accounts.tokens import token_create
from accounts.websocket import CLOSE_UNAUTHENTICATED
from chat.consumers import CLOSE_FORBIDDEN
from kb.library.models import Document
from kb.queues import ANSWERS
from tests.chat.conftest import EXPORT_QUESTION
from tests.chat.openai_stub import StubOpenAI
from tests.conftest import close_code, port_of, start_worker, stop_process, ws

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TOKENS = ["Press", " Export", " at", " the", " top", " right", " of", " the", " Shipments", " screen", " [1]", "."]
ANSWER = "Press Export at the top right of the Shipments screen [1]."


def receive_until(connection: ClientConnection, stop: Any, timeout: float = 60) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while True:
        event = json.loads(connection.recv(timeout=max(0.1, deadline - time.monotonic())))
        events.append(event)
        if stop(event):
            return events


def ask_over_http(port: int, user: Any, question: str) -> dict[str, Any]:
    """POST /api/ask with a Bearer token."""
    _, token = token_create(user=user)
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/ask", data=json.dumps({"question": question}).encode(), method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=20) as response:
        assert response.status == 202
        return dict(json.loads(response.read()))


def test_a_real_socket_through_daphne_and_a_worker(
    corpus: dict[str, Document], people: dict[str, Any], settings: Any, web_server: str
) -> None:
    """On the session's Daphne: only the worker answers, so only the worker needs the stand-in model server."""
    port = port_of(web_server)
    with StubOpenAI(TOKENS, pause_after=5) as stub:
        worker = start_worker("chat-e2e", queues=ANSWERS, SECRET_KEY=settings.SECRET_KEY, KB_ANSWER_BACKEND="openai",
                              KB_OPENAI_BASE_URL=stub.url, KB_OPENAI_READ_TIMEOUT="45", DEBUG="0")
        try:
            alice = people["alice"]
            asked = ask_over_http(port, alice, EXPORT_QUESTION)
            path = f"/ws/chat/{asked['conversation']}/"
            message_id = asked["message"]

            assert close_code(ws(port, path)) == CLOSE_UNAUTHENTICATED
            bob = Client()
            bob.force_login(people["bob"])
            assert close_code(ws(port, path, bob.cookies["sessionid"].value)) == CLOSE_FORBIDDEN

            browser = Client()
            browser.force_login(alice)
            cookie = browser.cookies["sessionid"].value
            with ws(port, path, cookie) as first:
                assert stub.paused.wait(60), "the worker never reached the model server"
                # The stub pauses after " top"; the citation filter holds back the word being written.
                before = receive_until(first, lambda e: e["type"] == "token" and e["text"].endswith("the"))
            states = [e.get("state") for e in before if e["type"] == "status"]
            # A socket that connects once generation has begun (a busy machine) is told only "generating";
            # whatever it was told, the states come in the order the answer goes through them.
            order = ["queued", "retrieving", "generating"]
            assert states[-1] == "generating" and states == sorted(states, key=order.index), states
            partial = "".join(e["text"] for e in before if e["type"] == "token")
            assert partial == "Press Export at the"  # every token the model sent, but the word it was in

            with ws(port, path, cookie) as second:
                replay = receive_until(second, lambda e: e["type"] == "token")
                assert replay[-1] == {"type": "token", "message": message_id, "at": 0, "text": replay[-1]["text"]}
                stub.resume()
                after = replay + receive_until(second, lambda e: e["type"] in ("done", "error"))
            text = ""
            for event in after:
                if event["type"] == "token":
                    assert event["at"] == len(text)  # nothing twice, nothing skipped
                    text += event["text"]
            assert after[-1]["type"] == "done", after[-1]
            assert text == after[-1]["text"] == ANSWER
            citations = [e for e in after if e["type"] == "citations"]
            assert len(citations) == 1 and [c["number"] for c in citations[0]["citations"]] == [1]
            assert citations[0]["citations"][0]["document_id"] == corpus["shipments"].pk
        finally:
            stop_process(worker, 20)
