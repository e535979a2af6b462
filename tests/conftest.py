"""Shared fixtures: the demo-shaped users, a real Celery worker, subprocess helpers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kb.queues import ANSWERS, INGEST

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "test-output"
# The development evaluation set lies beside the checkout (CI copies it there); a worktree elsewhere
# names it with KB_SHARED_EVAL. Tests that need it skip without it; CI fails on any other skip.
SHARED_EVAL = Path(os.environ.get("KB_SHARED_EVAL") or ROOT.parent / "shared" / "eval")


# The one expected skip: a test on the shared development set when the set is not beside the checkout.
NO_SHARED_EVAL = "(set KB_SHARED_EVAL)"


def _skips(config: pytest.Config) -> tuple[int, int]:
    """(all skips, unexpected skips): only a missing shared evaluation set may excuse a skip."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    reports = reporter.stats.get("skipped", []) if reporter is not None else []
    return len(reports), sum(NO_SHARED_EVAL not in str(report.longrepr) for report in reports)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """With KB_FAIL_ON_SKIP=1 (CI) an unexpected skip fails the run: nothing passes by not running."""
    if os.environ.get("KB_FAIL_ON_SKIP") == "1" and _skips(session.config)[1] and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    skipped, unexpected = _skips(config)
    terminalreporter.write_line(f"skipped tests: {skipped} ({skipped - unexpected} only for want of the shared eval set)")
    if os.environ.get("KB_FAIL_ON_SKIP") == "1" and unexpected:
        terminalreporter.write_line("KB_FAIL_ON_SKIP=1: the unexpected skips above fail this run", red=True)


@pytest.fixture(autouse=True, scope="session")
def _empty_broker() -> None:
    """The embedded Redis keeps its data across restarts (append-only file); tasks queued by an
    earlier run would reach this run's workers with ids of this run's rows."""
    import redis
    from django.conf import settings

    redis.Redis.from_url(settings.REDIS_URL).flushall()


@pytest.fixture(autouse=True)
def _fast_password_hasher(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.KB_ASKS_PER_MINUTE = 0  # tests ask many questions as one user; tests/robust/test_ask_rate.py sets it


@pytest.fixture(autouse=True)
def _fresh_channel_layer() -> None:
    """Each async test has its own event loop; a channel layer kept from an earlier test holds
    asyncio locks bound to that test's loop (channels_redis), which fail when awaited here."""
    from channels.layers import channel_layers

    channel_layers.backends = {}


@pytest.fixture
def people(db: None) -> dict[str, Any]:
    """alice (engineering), bob (finance), carol (nobody), dave (engineering + hr), sam (support), a superuser."""
    from django.contrib.auth.models import Group, User

    groups = {name: Group.objects.create(name=name) for name in ("engineering", "finance", "hr", "support")}
    members = {
        "alice": ["engineering"],
        "bob": ["finance"],
        "carol": [],
        "dave": ["engineering", "hr"],
        "sam": ["support"],
    }
    users: dict[str, Any] = {}
    for name, group_names in members.items():
        user = User.objects.create_user(name, password=name)
        user.groups.set([groups[g] for g in group_names])
        users[name] = user
    users["admin"] = User.objects.create_superuser("admin", password="admin")
    users["groups"] = groups
    return users


def service_env(**overrides: str) -> dict[str, str]:
    """Environment for a child process that talks to this test run's servers and test database."""
    from django.conf import settings
    from django.db import connection

    db = connection.settings_dict
    env = dict(os.environ)
    env.update(
        DATABASE_URL=f"postgresql://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        REDIS_URL=settings.REDIS_URL,
        SECRET_KEY="test-secret-key-for-child-processes",
        PYTHONUNBUFFERED="1",
    )
    env.update(overrides)
    return env


def manage(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def start_worker(name: str = "celery-worker", queues: str = f"{INGEST},{ANSWERS}", pool: str = "solo",
                 hostname: str | None = None, **env: str) -> subprocess.Popen[str]:
    """A real worker process on the real Redis broker, reading the test database; returns once it answers a ping.

    It serves both queues unless told otherwise (`make run` gives each its own worker), in one process
    unless `pool="prefork"` (then one pool process, as `make run`'s workers have); `hostname` is its node
    name (a new one each time unless given, as the launcher gives a restarted worker its old one); `env`
    overrides its environment (KB_SWEEP_SECONDS=…).
    """
    from kb.celery import app

    hostname = hostname or f"{name}-{os.getpid()}-{time.monotonic_ns()}@localhost"
    log = OUTPUT / f"{name}.log"
    log.parent.mkdir(exist_ok=True)
    with open(log, "w") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "kb", "worker", "--pool", pool, "--concurrency", "1", "--hostname",
             hostname, "--queues", queues, "--loglevel", "INFO", "--without-gossip", "--without-mingle"],
            cwd=ROOT, env=service_env(**env), stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            if worker.poll() is not None:
                pytest.fail(f"celery worker exited early: {log.read_text()[-2000:]}")
            try:
                if app.control.ping(destination=[hostname], timeout=0.5):
                    return worker
            except app.connection().connection_errors:
                time.sleep(0.5)  # a broker that was just restarted: the pooled connection reconnects
        pytest.fail("celery worker did not answer a ping within 90s")
    except BaseException:
        stop_process(worker)  # never leave a worker behind to take a later test's tasks
        raise


def stop_process(process: subprocess.Popen[Any], timeout: float = 30) -> None:
    """SIGTERM a child the tests started, SIGKILL it if it does not go in time."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def celery_worker(transactional_db: None) -> Iterator[subprocess.Popen[str]]:
    worker = start_worker()
    try:
        yield worker
    finally:
        stop_process(worker)
