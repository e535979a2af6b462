"""End to end over real sockets: Daphne, a Celery worker and the model server are separate processes/threads.

The question goes in over HTTP (POST /api/ask, where kb/api.py mounts the chat router),
the worker answers from the test database with the `openai` backend against the stand-in
server, and a real websocket client reads /ws/chat/<id>/, drops mid-answer and comes back.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.test import Client
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from accounts.tokens import token_create
from accounts.websocket import CLOSE_UNAUTHENTICATED
from chat.consumers import CLOSE_FORBIDDEN
from chat.services import question_ask
from kb.library.models import Document
from kb.queues import ANSWERS
from tests.chat.conftest import EXPORT_QUESTION
from tests.chat.openai_stub import StubOpenAI
from tests.conftest import OUTPUT, ROOT, port_of, service_env, stop_process

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TOKENS = ["Press", " Export", " at", " the", " top", " right", " of", " the", " Shipments", " screen", " [1]", "."]
ANSWER = "Press Export at the top right of the Shipments screen [1]."


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def child(name: str, argv: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    OUTPUT.mkdir(exist_ok=True)
    with open(OUTPUT / f"chat-e2e-{name}.log", "w") as log:
        process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
                                   start_new_session=True)
    try:
        yield process
    finally:
        stop_process(process, 20)


def wait_until(ready: Any, what: str, processes: list[subprocess.Popen[str]], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for process in processes:
            if process.poll() is not None:
                pytest.fail(f"{process.args[2]!r} exited early; see {OUTPUT}/chat-e2e-*.log")
        if ready():
            return
        time.sleep(0.2)
    pytest.fail(f"{what} not ready within {timeout:.0f}s; see {OUTPUT}/chat-e2e-*.log")


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def ws(port: int, path: str, cookie: str | None = None) -> ClientConnection:
    headers = {"Origin": f"http://127.0.0.1:{port}"}
    if cookie:
        headers["Cookie"] = f"sessionid={cookie}"
    return connect(f"ws://127.0.0.1:{port}{path}", additional_headers=headers, open_timeout=10)


def close_code(connection: ClientConnection) -> int | None:
    with pytest.raises(ConnectionClosed) as closed:
        connection.recv(timeout=10)
    return closed.value.rcvd.code if closed.value.rcvd else None


def receive_until(connection: ClientConnection, stop: Any, timeout: float = 60) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while True:
        event = json.loads(connection.recv(timeout=max(0.1, deadline - time.monotonic())))
        events.append(event)
        if stop(event):
            return events


def ask_over_http(port: int, user: Any, question: str) -> dict[str, Any] | None:
    """POST /api/ask with a Bearer token; None while kb/api.py does not mount the chat router."""
    _, token = token_create(user=user)
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/ask", data=json.dumps({"question": question}).encode(), method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            assert response.status == 202
            return dict(json.loads(response.read()))
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


def test_a_real_socket_through_daphne_and_a_worker(
    corpus: dict[str, Document], people: dict[str, Any], settings: Any, web_server: str
) -> None:
    """On the session's Daphne: only the worker answers, so only the worker needs the stand-in model server."""
    from kb.celery import app

    port = port_of(web_server)
    hostname = f"chat-e2e-{os.getpid()}-{time.monotonic_ns()}@localhost"
    with StubOpenAI(TOKENS, pause_after=5) as stub:
        env = service_env(SECRET_KEY=settings.SECRET_KEY, KB_ANSWER_BACKEND="openai", KB_OPENAI_BASE_URL=stub.url,
                          KB_OPENAI_READ_TIMEOUT="45", DEBUG="0")
        with child("worker", [sys.executable, "-m", "celery", "-A", "kb", "worker", "--pool", "solo", "--hostname",
                              hostname, "--queues", ANSWERS, "--without-gossip", "--without-mingle", "--loglevel", "INFO"], env) as worker:
            wait_until(lambda: bool(app.control.ping(destination=[hostname], timeout=0.5)), "worker", [worker])

            alice = people["alice"]
            asked = ask_over_http(port, alice, EXPORT_QUESTION)
            if asked is None:  # the router is not mounted yet: queue it through the same service
                made = question_ask(user=alice, question=EXPORT_QUESTION)
                asked = {"conversation": made.conversation.pk, "message": made.answer.pk}
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
                before = receive_until(first, lambda e: e["type"] == "token" and "top" in e["text"])
            states = [e.get("state") for e in before if e["type"] == "status"]
            # A socket that connects once generation has begun (a busy machine) is told only "generating";
            # whatever it was told, the states come in the order the answer goes through them.
            order = ["queued", "retrieving", "generating"]
            assert states[-1] == "generating" and states == sorted(states, key=order.index), states
            partial = "".join(e["text"] for e in before if e["type"] == "token")
            assert partial and ANSWER.startswith(partial)

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
