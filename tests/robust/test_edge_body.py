"""Issue 28 item 4: the edge refuses a body before it stores it, in Daphne itself.

Before, Daphne (Twisted) spooled every request body into a temporary file before the
application (and kb.edge's limit) ran: `Content-Length: 300000000` without a login held a
300 MB file. These tests run the web server as `make run` starts it (launcher.web_argv), with
its own TMPDIR, and watch that process's open files in that directory while they send.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from accounts.websocket import CLOSE_UNAUTHENTICATED
from kb.runtime.embedded import free_port
from kb.runtime.launcher import web_argv
from tests.conftest import child, close_code, listening, service_env, wait_until, ws
from tests.factories import uploaded_document
from tests.robust.test_edge import post

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

BODY_LIMIT = 256 * 1024  # KB_MAX_BODY_KB below
UPLOAD_LIMIT = 2 * 2**20  # KB_MAX_UPLOAD_MB=1, plus 1 MB for the form
MB = 2**20


@dataclass
class Server:
    port: int
    pid: int
    tmpdir: Path

    def spooled(self) -> int:
        """Bytes in the files this process holds open under its TMPDIR (deleted ones included:
        a TemporaryFile has no name) plus what that directory lists."""
        total = 0
        fds = Path(f"/proc/{self.pid}/fd")
        for fd in fds.iterdir():
            try:
                if os.readlink(fd).startswith(str(self.tmpdir)):
                    total += os.stat(fd).st_size
            except FileNotFoundError:  # closed meanwhile
                continue
        return total + sum(path.stat().st_size for path in self.tmpdir.rglob("*") if path.is_file())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, django_db_setup: None) -> Iterator[Server]:
    """One server for this module's tests: each request's spool goes when its request ends."""
    from django.conf import settings

    tmpdir = tmp_path_factory.mktemp("daphne-tmp")
    port = free_port()
    env = service_env(SECRET_KEY=settings.SECRET_KEY, KB_MAX_BODY_KB=str(BODY_LIMIT // 1024), KB_MAX_UPLOAD_MB="1",
                      TMPDIR=str(tmpdir))
    with child("edge-body-daphne", web_argv("127.0.0.1", port), env) as web:
        wait_until(lambda: listening(port), "daphne", [web])
        yield Server(port, web.pid, tmpdir)


class SpoolWatch:
    """The most the server held in its TMPDIR at any sample, every 5 ms while the block runs."""

    def __init__(self, server: Server) -> None:
        self.server, self.peak, self._done = server, 0, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def sample(self) -> int:
        self.peak = max(self.peak, self.server.spooled())
        return self.peak

    def _watch(self) -> None:
        while not self._done.wait(0.005):
            self.sample()

    def __enter__(self) -> SpoolWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.sample()


def response_head(sock: socket.socket, timeout: float = 5) -> bytes:
    """The status line and headers the server sent; b"" when it hung up without answering."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            piece = sock.recv(65536)
            if not piece:
                break
            data += piece
    except ConnectionResetError:
        pass
    except TimeoutError:
        pytest.fail(f"no answer within {timeout} s (got {data!r}): the server is waiting for the body")
    return data.split(b"\r\n\r\n", 1)[0]


def send_all_you_can(sock: socket.socket, data: bytes, total: int) -> int:
    """Send `data` over and over up to `total` bytes; how many went before the server hung up."""
    sent = 0
    sock.settimeout(10)
    try:
        while sent < total:
            sock.sendall(data)
            sent += len(data)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def head(method: str, path: str, *headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_a_declared_length_over_the_limit_is_refused_before_any_body_byte(server: Server) -> None:
    with SpoolWatch(server) as spool:
        for path, declared in (("/accounts/login/", 300_000_000), ("/api/documents", 300_000_000),
                               ("/api/ask", BODY_LIMIT + 1), ("/library/upload", UPLOAD_LIMIT + 1)):
            with socket.create_connection(("127.0.0.1", server.port)) as sock:
                started = time.monotonic()
                sock.sendall(head("POST", path, "Content-Type: application/x-www-form-urlencoded",
                                  f"Content-Length: {declared}"))
                status = response_head(sock)
                elapsed = time.monotonic() - started
                assert status.startswith(b"HTTP/1.1 413"), (path, status)
                assert elapsed < 0.1, (path, elapsed)
                # What the client sends anyway is read and dropped: nothing reaches the disk.
                send_all_you_can(sock, b"x" * 65536, 8 * MB)
            print(f"{path}: Content-Length {declared:,} -> 413 in {elapsed * 1000:.1f} ms")
        # Declared with "Expect: 100-continue": the 413 comes instead of the 100, nothing follows it.
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(head("POST", "/api/ask", "Content-Length: 300000000", "Expect: 100-continue"))
            status = response_head(sock)
            assert status.startswith(b"HTTP/1.1 413"), status
            sock.settimeout(5)
            rest = b""
            while piece := sock.recv(65536):
                rest += piece
            assert b"HTTP/1.1" not in rest  # no "100 Continue" after the refusal
    print(f"spooled at most {spool.peak:,} bytes")
    assert spool.peak < 2 * MB


def test_a_chunked_body_is_cut_at_the_limit(server: Server) -> None:
    for path, limit in (("/api/ask", BODY_LIMIT), ("/api/documents", UPLOAD_LIMIT)):
        with SpoolWatch(server) as spool, socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(head("POST", path, "Content-Type: application/json", "Transfer-Encoding: chunked"))
            sent = send_all_you_can(sock, chunk(b"y" * 65536), 16 * MB)
            held = server.spooled()  # before the last chunk: what the server holds of an unfinished body
            try:
                sock.sendall(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass
            status = response_head(sock)
        answer = status.split(b"\r\n")[0] or b"(closed)"
        print(f"{path}: chunked, {sent:,} bytes sent -> {answer!r}; the server held {held:,} then, {spool.peak:,} at most")
        assert status == b"" or status.startswith(b"HTTP/1.1 413"), (path, status)  # refused, or cut off
        assert held == 0 and spool.peak <= limit < 2 * MB + 1


def test_bodies_up_to_the_limit_requests_and_websockets_still_work(server: Server, people: dict[str, Any]) -> None:
    port = server.port
    assert post(port, "/accounts/login/", b"x" * BODY_LIMIT) == 403  # at the limit: reaches Django (CSRF)
    assert post(port, "/accounts/login/", b"x" * (BODY_LIMIT + 1)) == 413
    assert post(port, "/api/ask", b"x" * BODY_LIMIT, chunked=True) == 403  # streamed, at the limit: reaches the API
    assert post(port, "/api/ask", b"x" * (BODY_LIMIT + 1), chunked=True) == 413
    assert post(port, "/library/upload", b"x" * (BODY_LIMIT + 1)) != 413  # the upload limit is larger
    # Keep-alive: a body and then another request on one connection.
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("POST", "/accounts/login/", body=b"a=b", headers={"Content-Type": "application/x-www-form-urlencoded"})
    first = connection.getresponse()
    first.read()
    opened = connection.sock
    connection.request("GET", "/accounts/login/")
    assert (first.status, connection.getresponse().status) == (403, 200) and connection.sock is opened
    connection.close()

    # Websockets still upgrade: the consumer answers a watch, and closes an anonymous socket itself.
    document = uploaded_document("# Leave\n\nEveryone gets 28 days.\n", "leave.md", public=True)
    browser = Client()
    browser.force_login(people["alice"])
    with ws(port, "/ws/library/", browser.cookies["sessionid"].value) as socket_:
        socket_.send(json.dumps({"type": "watch", "ids": [document.pk]}))
        assert json.loads(socket_.recv(timeout=10))["id"] == document.pk
    with ws(port, "/ws/library/") as anonymous:
        assert close_code(anonymous) == CLOSE_UNAUTHENTICATED
