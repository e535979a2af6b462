"""Issue 12 fault drill: PostgreSQL restarts under traffic.

A real Daphne on its own embedded servers (a data directory of this test's) serves API calls
from several clients while the test stops PostgreSQL and starts it again seven seconds later.
A request during the outage waits for a connection up to KB_DB_POOL_TIMEOUT, so it either
rides a short outage out or ends with a 503 (JSON from the API, a page that says to retry from a
browser page; no hang, no 500 page, no traceback); after it, requests succeed again without
restarting Daphne.

Before: the restarted server came up on another port, so Daphne never found it again, and a
request during the outage was a 500 page.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from kb.runtime import embedded
from kb.runtime.embedded import free_port
from tests.conftest import ROOT, child, listening, wait_until

pytestmark = pytest.mark.slow

POOL_WAIT = 4  # seconds: the drill's KB_DB_POOL_TIMEOUT (10 by default), a request's wait for a connection
OUTAGE = 7.0  # seconds: longer than the pool's wait, so some requests must give up
SLOWEST_ANSWER = POOL_WAIT + 5.0  # seconds: the wait for a connection and then the answer


@dataclass(frozen=True)
class Call:
    path: str
    began: float
    seconds: float
    status: int
    content_type: str
    body: str


def isolated_env(var_dir: Path, **extra: str) -> dict[str, str]:
    """A process on embedded servers under `var_dir` only: none of the test run's."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(KB_VAR_DIR=str(var_dir), SECRET_KEY="drill-secret-key", DEBUG="0", PYTHONUNBUFFERED="1", **extra)
    return env


def prepare(env: dict[str, str], *, admin: bool = False) -> tuple[str, str]:
    """Migrate the drill's database; a new user's API token (every scope for an admin) and the cookie of
    a browser session of theirs."""
    script = (
        "from django.core.management import call_command; call_command('migrate', verbosity=0)\n"
        "from django.contrib.auth.models import User; from django.test import Client\n"
        "from accounts.models import Scope; from accounts.tokens import token_create\n"
        f"user = User.objects.{'create_superuser' if admin else 'create_user'}('drill')\n"
        "browser = Client(); browser.force_login(user)\n"
        f"print(token_create(user=user, scopes={'list(Scope)' if admin else '(Scope.SEARCH, Scope.ASK)'})[1], "
        "browser.cookies['sessionid'].value)"
    )
    done = subprocess.run([sys.executable, "manage.py", "shell", "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    token, session = done.stdout.strip().splitlines()[-1].split()
    return token, session


@dataclass(frozen=True)
class Caller:
    """What one client requests, and how it signs in: the API with a token, or a page with a session."""

    path: str
    headers: dict[str, str]


def callers(token: str, session: str) -> list[Caller]:
    api = Caller("/api/conversations", {"Authorization": f"Bearer {token}"})
    page = Caller("/", {"Cookie": f"sessionid={session}"})
    return [api, api, api, page]


def call(base: str, caller: Caller) -> Call:
    request = urllib.request.Request(f"{base}{caller.path}", headers=caller.headers)
    began = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            status, headers, body = response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        status, headers, body = error.code, error.headers, error.read()
    return Call(caller.path, began, time.monotonic() - began, status, headers.get("Content-Type", ""),
                body.decode(errors="replace"))


@dataclass
class Traffic:
    calls: list[Call]
    stop: threading.Event


@contextmanager
def traffic(base: str, clients: list[Caller]) -> Iterator[Traffic]:
    """A thread per caller, each calling one request after another until the block ends."""
    seen = Traffic([], threading.Event())

    def client(caller: Caller) -> None:
        while not seen.stop.is_set():
            seen.calls.append(call(base, caller))
            time.sleep(0.05)

    threads = [threading.Thread(target=client, args=(caller,), daemon=True) for caller in clients]
    for thread in threads:
        thread.start()
    try:
        yield seen
    finally:
        seen.stop.set()
        for thread in threads:
            thread.join(90)


@dataclass(frozen=True)
class Drill:
    var_dir: Path
    base: str
    token: str
    session: str
    web: subprocess.Popen[str]


@contextmanager
def drill(tmp_path: Path, name: str, *, admin: bool = False) -> Iterator[Drill]:
    """A real Daphne on embedded servers of its own, which the test may stop and start, with a user's token
    and session. The test holds the servers itself, so the processes it starts reuse them."""
    var_dir = tmp_path / "var"
    var_dir.mkdir()
    embedded.use("postgres", var_dir)
    embedded.use("redis", var_dir)
    try:
        env = isolated_env(var_dir, KB_DB_POOL_TIMEOUT=str(POOL_WAIT))
        token, session = prepare(env, admin=admin)
        port = free_port()
        argv = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "kb.asgi:application"]
        with child(name, argv, env) as web:
            wait_until(lambda: listening(port), "daphne", [web])
            yield Drill(var_dir, f"http://127.0.0.1:{port}", token, session, web)
            assert web.poll() is None, "Daphne died"
    finally:
        embedded.leave("postgres", var_dir)
        embedded.leave("redis", var_dir)


def test_requests_fail_cleanly_while_postgresql_restarts_and_succeed_after(tmp_path: Path) -> None:
    with drill(tmp_path, "pg-restart-daphne") as server:
        clients = callers(server.token, server.session)
        assert all(call(server.base, caller).status == 200 for caller in clients)
        with traffic(server.base, clients) as seen:
            time.sleep(3)
            stopped_at = time.monotonic()
            embedded.stop_postgres(server.var_dir)
            time.sleep(OUTAGE)
            restarted_at = time.monotonic()
            embedded.start_postgres(server.var_dir)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not any(c.began > restarted_at and c.status == 200
                                                          for c in seen.calls):
                time.sleep(0.5)
            time.sleep(3)

    before = [c for c in seen.calls if c.began + c.seconds < stopped_at]
    outage = [c for c in seen.calls if c.status != 200]
    after = [c for c in seen.calls if c.began > restarted_at]
    summary = f"{len(seen.calls)} calls, {len(after)} after the restart; not 200: " + ", ".join(
        f"{c.path} {c.status} at {c.began - stopped_at:+.1f} s took {c.seconds:.1f} s" for c in outage)
    assert before and all(c.status == 200 for c in before), summary
    assert outage, f"the outage was never seen: {summary}"
    assert {c.path for c in outage} == {c.path for c in clients}, summary  # the page met the outage too
    for c in outage:  # a request that could not ride the outage out says so: JSON from the API, a page else
        assert c.status == 503 and "Traceback" not in c.body, (c, summary)
        if c.path.startswith("/api/"):
            assert c.content_type.startswith("application/json"), (c, summary)
            assert "unavailable" in json.loads(c.body)["detail"], (c, summary)
        else:
            assert c.content_type.startswith("text/html") and "Temporarily unavailable" in c.body, (c, summary)
    assert max(c.seconds for c in seen.calls) < SLOWEST_ANSWER, summary  # nothing hangs
    recovered = [c.began for c in after if c.status == 200]
    assert recovered and min(recovered) - restarted_at < 20, summary
    assert all(c.status == 200 for c in after if c.began >= min(recovered)), summary  # and stays up
