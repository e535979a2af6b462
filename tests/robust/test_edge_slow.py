"""Issue 47 item 6: slow clients are cut off, one address and one user hold only so many connections.

Before, Daphne bounded a body's size but not its time: every byte reset Twisted's idle timeout, and 20 of
20 slow-header and slow-body connections were still open after 75 s; HAProxy's `timeout http-request`
covered headers only, and nothing capped the websockets one user held open. These tests run the web
server as `make run` starts it (launcher.web_argv) with 2 s deadlines, and HAProxy with
deploy/haproxy.cfg (its timeouts shortened the same way) in front of it.
"""

from __future__ import annotations

import os
import select
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from websockets.exceptions import ConnectionClosed

from accounts.socket_slots import socket_slot_release, socket_slot_renew, socket_slot_take, socket_slots_held
from accounts.websocket import CLOSE_TOO_MANY_SOCKETS
from kb.env import ip_networks
from kb.runtime.daphne_server import EdgeLimits, body_seconds_left
from kb.runtime.embedded import free_port
from tests.conftest import ROOT, child, close_code, daphne, listening, port_of, service_env, wait_until, ws

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DEADLINE = 2.0  # KB_EDGE_HEADER_SECONDS and KB_EDGE_BODY_SECONDS below, and the proxy's http-request timeout
MARGIN = 2.0  # a loaded two-core machine may be late this much
MIN_RATE = 64 * 1024  # KB_EDGE_BODY_MIN_KBPS=64
ADDRESS_CAP = 4
USER_CAP = 3
TICK = 0.25  # a slow client sends one byte this often


@pytest.fixture(scope="module")
def server(django_db_setup: None) -> Iterator[int]:
    """Daphne with short clocks; 127.0.0.1 is its trusted proxy (the HAProxy below), so it is exempt from
    the per-address cap, which the tests exercise from 127.0.0.2 and 127.0.0.3."""
    with daphne("edge-slow", KB_EDGE_HEADER_SECONDS=str(DEADLINE), KB_EDGE_BODY_SECONDS=str(DEADLINE),
                KB_EDGE_BODY_MIN_KBPS=str(MIN_RATE // 1024), KB_EDGE_MAX_CONNECTIONS_PER_ADDRESS=str(ADDRESS_CAP),
                KB_TRUSTED_PROXIES="127.0.0.1", KB_WS_MAX_PER_USER=str(USER_CAP)) as base:
        yield port_of(base)


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))


def request(method: str, path: str, *headers: str) -> bytes:
    return ("\r\n".join([f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *headers]) + "\r\n\r\n").encode()


def status(sock: socket.socket, sent: bytes = b"") -> bytes:
    """Send `sent`, then the status line of the answer (the body read too: keep-alive stays usable);
    b"" when the server closed without one."""
    sock.settimeout(10)
    try:
        sock.sendall(sent)
        data = b""
        while b"\r\n\r\n" not in data:
            piece = sock.recv(65536)
            if not piece:
                return b""
            data += piece
    except (BrokenPipeError, ConnectionResetError):
        return b""
    head, body = data.split(b"\r\n\r\n", 1)
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
    while len(body) < length:
        body += sock.recv(65536)
    return head.split(b"\r\n")[0]


@dataclass
class Trickle:
    """A client that sends `first` at once, then `piece` every TICK, and records when the server hangs up."""

    sock: socket.socket
    first: bytes
    piece: bytes
    opened: float = field(default_factory=time.monotonic)
    answer: bytes = b""
    closed: float | None = None

    def hung_up(self) -> None:
        if self.closed is None:
            self.closed = time.monotonic() - self.opened


def trickle_until_cut(clients: list[Trickle], limit: float) -> None:
    """Drive every client until the server has closed each, or `limit` seconds pass."""
    for client in clients:
        client.sock.sendall(client.first)
    end = time.monotonic() + limit
    while time.monotonic() < end and any(c.closed is None for c in clients):
        for client in clients:
            if client.closed is None:
                try:
                    client.sock.send(client.piece)
                except OSError:
                    client.hung_up()
        tick_end = time.monotonic() + TICK
        while (left := tick_end - time.monotonic()) > 0:
            readable, _, _ = select.select([c.sock for c in clients if c.closed is None], [], [], left)
            if not readable:
                break
            for client in clients:
                if client.sock in readable:
                    try:
                        data = client.sock.recv(65536)
                    except OSError:
                        data = b""
                    client.answer += data
                    if not data:
                        client.hung_up()
    for client in clients:
        client.sock.close()


def slow_headers(port: int) -> Trickle:
    return Trickle(connect(port), b"GET /accounts/login/ HTTP/1.1\r\n", b"X")


def slow_body(port: int, *, chunked: bool, source: str = "127.0.0.1") -> Trickle:
    framing = "Transfer-Encoding: chunked" if chunked else "Content-Length: 100000"
    first = request("POST", "/api/ask", "Content-Type: application/json", framing)
    return Trickle(connect(port, source), first, b"1\r\nx\r\n" if chunked else b"x")


def assert_cut_at_the_deadline(clients: list[Trickle], answer: bytes) -> list[float]:
    times = sorted(c.closed for c in clients if c.closed is not None)
    assert len(times) == len(clients), f"{len(clients) - len(times)} of {len(clients)} still open"
    assert DEADLINE - 0.3 < times[0] and times[-1] < DEADLINE + MARGIN, times
    assert all(c.answer.startswith(answer) for c in clients), {c.answer[:60] for c in clients}
    return times


def test_the_body_clock_allows_a_slow_start_made_up_later() -> None:
    limits = EdgeLimits(10, 30, 1000, 0, [])
    assert body_seconds_left(5, 0, limits) == 25  # the first 30 s are free
    assert body_seconds_left(31, 0, limits) < 0
    assert body_seconds_left(31, 40_000, limits) == 9  # 40 kB at 1 kB/s may take 40 s
    assert body_seconds_left(31, 40_000, EdgeLimits(10, 30, 0, 0, [])) < 0  # no rate: 30 s is all
    proxied = EdgeLimits(10, 30, 1000, 5, ip_networks(["10.0.0.0/8"]))
    assert proxied.capped("192.0.2.1") and not proxied.capped("10.1.2.3")
    assert not EdgeLimits(10, 30, 1000, 0, []).capped("192.0.2.1")  # 0: no cap


def test_a_slot_once_taken_is_renewed_whatever_the_count() -> None:
    user = 10**9 + os.getpid()  # no real user's slots
    assert socket_slot_take(user, "a", cap=1) and not socket_slot_take(user, "b", cap=1)
    assert socket_slot_take(user, "a", cap=1)  # its own slot again: a renewal, not one more
    socket_slot_renew(user, "a")
    assert socket_slots_held(user) == 1
    socket_slot_release(user, "a")
    assert socket_slot_take(user, "b", cap=1) and socket_slots_held(user) == 1
    socket_slot_release(user, "b")


def test_slow_headers_and_slow_bodies_are_cut_at_their_deadline(server: int) -> None:
    # A kept-alive connection idle between requests is no slow client: no clock runs while it waits.
    idle = connect(server)
    assert status(idle, request("GET", "/accounts/login/")) == b"HTTP/1.1 200 OK"

    clients = [slow_headers(server) for _ in range(20)]
    clients += [slow_body(server, chunked=i % 2 == 1) for i in range(20)]
    silent = Trickle(connect(server), b"", b"")  # sends nothing: closed without a 408 a browser could misread
    trickle_until_cut([*clients, silent], DEADLINE + MARGIN + 1)
    headers = assert_cut_at_the_deadline(clients[:20], b"HTTP/1.1 408")
    bodies = assert_cut_at_the_deadline(clients[20:], b"HTTP/1.1 408")
    assert_cut_at_the_deadline([silent], b"")
    assert silent.answer == b""
    print(f"20 slow headers cut after {headers[0]:.2f}-{headers[-1]:.2f} s, 20 slow bodies after "
          f"{bodies[0]:.2f}-{bodies[-1]:.2f} s (deadline {DEADLINE} s)")
    assert b"KB_EDGE_HEADER_SECONDS" in clients[0].answer and b"KB_EDGE_BODY_MIN_KBPS" in clients[20].answer

    assert status(idle, request("GET", "/accounts/login/")) == b"HTTP/1.1 200 OK"  # idle > DEADLINE, still served
    idle.close()


def test_a_body_that_keeps_the_minimum_rate_may_take_longer(server: int) -> None:
    size, piece = 6 * MIN_RATE, 8192  # at twice the minimum rate: 3 s, past the DEADLINE seconds free of any rate
    with connect(server) as sock:
        started = time.monotonic()
        sock.sendall(request("POST", "/accounts/login/", "Content-Type: application/x-www-form-urlencoded",
                             f"Content-Length: {size}"))
        for i in range(size // piece):
            time.sleep(max(0.0, started + i * piece / (2 * MIN_RATE) - time.monotonic()))
            sock.sendall(b"x" * piece)
        elapsed = time.monotonic() - started
        assert elapsed > DEADLINE + 0.5
        assert status(sock) == b"HTTP/1.1 403 Forbidden"  # reached Django (CSRF), not cut
    print(f"{size:,} bytes over {elapsed:.1f} s: served")


def test_one_address_holds_at_most_the_cap_of_connections(server: int) -> None:
    held = [connect(server, "127.0.0.2") for _ in range(ADDRESS_CAP)]
    for sock in held:  # each served once, then kept alive (and idle: no clock runs)
        assert status(sock, request("GET", "/accounts/login/")) == b"HTTP/1.1 200 OK"
    with connect(server, "127.0.0.2") as refused:
        assert status(refused) == b"HTTP/1.1 429 Too Many Requests"  # answered before it sent anything
    with connect(server, "127.0.0.3") as other:  # another address is not held to 127.0.0.2's count
        assert status(other, request("GET", "/accounts/login/")) == b"HTTP/1.1 200 OK"
    trusted = [connect(server) for _ in range(ADDRESS_CAP + 2)]  # the trusted proxy's address: no cap
    for sock in trusted:
        assert status(sock, request("GET", "/accounts/login/")) == b"HTTP/1.1 200 OK"
        sock.close()

    held.pop().close()  # one slot frees when its connection closes
    deadline = time.monotonic() + 5
    while True:
        with connect(server, "127.0.0.2") as again:
            answer = status(again, request("GET", "/accounts/login/"))
        if answer == b"HTTP/1.1 200 OK" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert answer == b"HTTP/1.1 200 OK"
    for sock in held:
        sock.close()


def open_socket(port: int, cookie: str) -> Any:
    return ws(port, "/ws/library/", cookie)


def still_open(connection: Any, seconds: float = 0.5) -> bool:
    try:
        connection.recv(timeout=seconds)
    except TimeoutError:
        return True
    except ConnectionClosed:
        return False
    return True


def test_one_user_holds_at_most_the_cap_of_websockets_on_every_daphne(server: int, people: dict[str, Any]) -> None:
    cookies = {}
    for name in ("alice", "bob"):
        browser = Client()
        browser.force_login(people[name])
        cookies[name] = browser.cookies["sessionid"].value
    alice = people["alice"].pk
    # A socket alice holds on another Daphne: its slot is in the same Redis.
    assert socket_slot_take(alice, "another-daphne!socket")
    sockets = [open_socket(server, cookies["alice"]) for _ in range(USER_CAP - 1)]
    with open_socket(server, cookies["alice"]) as over:
        assert close_code(over) == CLOSE_TOO_MANY_SOCKETS
    with open_socket(server, cookies["bob"]) as bobs:  # another user: his own count
        # Upgraded sockets outlive the HTTP clocks: open past both deadlines.
        assert still_open(bobs, DEADLINE + 0.5)
    assert all(still_open(s) for s in sockets)

    socket_slot_release(alice, "another-daphne!socket")  # that socket closed: alice may open one more
    sockets.append(open_socket(server, cookies["alice"]))
    assert still_open(sockets[-1])
    sockets.pop(0).close()
    wait_until(lambda: socket_slots_held(alice) == USER_CAP - 1, "the closed socket's slot freed", [])
    sockets.append(open_socket(server, cookies["alice"]))
    assert still_open(sockets[-1]) and socket_slots_held(alice) == USER_CAP
    for s in sockets:
        s.close()
    wait_until(lambda: socket_slots_held(alice) == 0, "every slot freed", [], timeout=10)


@pytest.fixture(scope="module")
def proxy(server: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """HAProxy with deploy/haproxy.cfg, its http-request timeout DEADLINE and its per-source cap ADDRESS_CAP."""
    haproxy = shutil.which("haproxy")
    if haproxy is None:
        pytest.skip("HAProxy is not installed (apt-get install haproxy)")
    config = (ROOT / "deploy" / "haproxy.cfg").read_text()
    for setting, test_value in (("timeout http-request 10s", f"timeout http-request {DEADLINE:g}s"),
                                ("sc0_conn_cur gt 100", f"sc0_conn_cur gt {ADDRESS_CAP}")):
        assert setting in config, setting
        config = config.replace(setting, test_value)
    path = Path(tmp_path_factory.mktemp("haproxy")) / "haproxy.cfg"
    path.write_text(config)
    port = free_port()
    env = service_env(KB_PROXY_BIND=f"127.0.0.1:{port}", KB_WEB1=f"127.0.0.1:{server}", KB_WEB2=f"127.0.0.1:{server}")
    subprocess.run([haproxy, "-c", "-q", "-f", str(path)], env=env, check=True)
    with child("edge-slow-haproxy", [haproxy, "-db", "-f", str(path)], env) as process:
        wait_until(lambda: listening(port), "haproxy", [process])
        yield port


def test_through_the_proxy_slow_bodies_are_cut_and_one_source_is_capped(proxy: int) -> None:
    with connect(proxy) as sock:
        assert status(sock, request("GET", "/accounts/login/")) == b"HTTP/1.1 200 OK"

    # Small bodies wait in the proxy's buffer: HAProxy's own 408 (HTML), Daphne never sees them. Each client
    # has an address of its own (127.0.1.x), under the proxy's per-source cap.
    clients = [slow_body(proxy, chunked=i % 2 == 1, source=f"127.0.1.{i + 1}") for i in range(20)]
    # A body bigger than the buffer streams to Daphne, whose body clock cuts it (its JSON 408).
    upload = Trickle(connect(proxy), request("POST", "/api/ask", "Content-Type: application/json",
                                             "Content-Length: 1000000") + b"x" * 65536, b"x")
    trickle_until_cut([*clients, upload], DEADLINE + MARGIN + 1)
    times = assert_cut_at_the_deadline(clients, b"HTTP/1.1 408")
    assert all(b"<html>" in c.answer for c in clients), clients[0].answer
    assert_cut_at_the_deadline([upload], b"HTTP/1.1 408")
    assert b"KB_EDGE_BODY_SECONDS" in upload.answer
    print(f"through HAProxy: 20 slow bodies cut after {times[0]:.2f}-{times[-1]:.2f} s, a slow upload after "
          f"{upload.closed:.2f} s")

    held = [connect(proxy, "127.0.0.2") for _ in range(ADDRESS_CAP)]
    for sock in held:
        assert status(sock, request("GET", "/accounts/login/")) == b"HTTP/1.1 200 OK"
    try:  # HAProxy closes it without an answer, at times before connect() has returned
        with connect(proxy, "127.0.0.2") as refused:
            assert status(refused, request("GET", "/accounts/login/")) == b""
    except ConnectionResetError:
        pass
    with connect(proxy, "127.0.0.3") as other:
        assert status(other, request("GET", "/accounts/login/")) == b"HTTP/1.1 200 OK"
    for sock in held:
        sock.close()
