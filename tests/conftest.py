"""Shared fixtures: the demo-shaped users, a real Celery worker, subprocess helpers."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from kb.queues import ANSWERS, INGEST
from tests.entry import worker_dir

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = worker_dir(ROOT / "test-output")
OUTPUT.mkdir(parents=True, exist_ok=True)
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


@pytest.hookimpl(trylast=True)  # after pytest-django's own ordering (by kind of database use), which would undo it
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files holding slow tests first, each file's own order kept. Under xdist (`--dist loadfile
    --no-loadscope-reorder`: its default hands out files with the most tests first) a worker takes whole
    files in this order: long files started last left one worker running them alone at the end while the
    other sat idle."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)


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


@pytest.fixture(autouse=True, scope="session")
def _statistics_emptied_with_the_tables() -> Iterator[None]:
    """A test that commits ends with Django's flush (TRUNCATE), which leaves the materialized corpus statistics
    as they were, so the next test would weigh words by an earlier test's corpus. The flush ends by sending
    post_migrate: the statistics are refreshed there, over the emptied tables."""
    from django.apps import apps
    from django.db.models.signals import post_migrate

    from search.stats import lexeme_stats_refresh

    def refresh(**kwargs: Any) -> None:
        lexeme_stats_refresh()

    search = apps.get_app_config("search")
    post_migrate.connect(refresh, sender=search, weak=False, dispatch_uid="tests-statistics")
    yield
    post_migrate.disconnect(sender=search, dispatch_uid="tests-statistics")


@pytest.fixture(autouse=True, scope="session")
def _flush_keeps_content_types_and_permissions() -> Iterator[None]:
    """Django's flush after a test that commits empties every table, content types and permissions too, and its
    post_migrate then creates them again (~60 queries and 19 commits, most of a flush's cost, for each such test).
    Kept, they are the rows migrate made, with the same ids all session; post_migrate still adds any missing."""
    from django.contrib.auth.models import Permission
    from django.contrib.contenttypes.models import ContentType
    from django.core.management.commands import flush

    kept = {ContentType._meta.db_table, Permission._meta.db_table}

    def sql_flush(style: Any, connection: Any, reset_sequences: bool = True, allow_cascade: bool = False) -> list[str]:
        tables = [t for t in connection.introspection.django_table_names(only_existing=True, include_views=False)
                  if t not in kept]
        return list(connection.ops.sql_flush(style, tables, reset_sequences=reset_sequences,
                                             allow_cascade=allow_cascade))

    patch = pytest.MonkeyPatch()
    patch.setattr(flush, "sql_flush", sql_flush)  # the name the flush command calls
    yield
    patch.undo()


@pytest.fixture(autouse=True)
def _fast_password_hasher(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.KB_ASKS_PER_MINUTE = 0  # tests ask many questions as one user; tests/robust/test_ask_rate.py sets it
    # In-process sockets are often left open when a test ends (their slots would lapse only a minute later, while
    # the next tests reuse the user ids); tests/robust/test_edge_slow.py sets it in its own Daphne.
    settings.KB_WS_MAX_PER_USER = 0


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
    overrides its environment (KB_SWEEP_SECONDS=…). Like the launcher's workers it skips Django's system checks
    (~1 s of CPU a start, ~30 starts a run): tests run `manage.py check` itself.
    """
    from kb.celery import app
    from kb.runtime.launcher import WORKER_UNCHECKED

    hostname = hostname or f"{name}-{os.getpid()}-{time.monotonic_ns()}@localhost"
    log = OUTPUT / f"{name}.log"
    log.parent.mkdir(exist_ok=True)
    with open(log, "w") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "kb", "worker", "--pool", pool, "--concurrency", "1", "--hostname",
             hostname, "--queues", queues, "--loglevel", "INFO", "--without-gossip", "--without-mingle"],
            cwd=ROOT, env=service_env(**{**WORKER_UNCHECKED, **env}), stdout=out, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
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


class SharedWorker:
    """The session's worker on both queues (start_worker's defaults): a worker start loads the embedding model
    (~6 s of CPU), so tests that only need a worker share this one. Between them it is stopped (SIGSTOP): it
    takes no task that a test's own worker should run and answers no ping, as if no worker ran."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[str] | None = None
        self.hostname = ""
        self.redis_run = ""

    def get(self) -> subprocess.Popen[str]:
        """Running and answering: continued where it was stopped, started where there is none, it died or Redis
        restarted under it (redis_run_id)."""
        from kb.celery import app

        if self.process is not None and self.process.poll() is None and self.redis_run == redis_run_id():
            os.killpg(self.process.pid, signal.SIGCONT)
            if app.control.ping(destination=[self.hostname], timeout=10):
                return self.process
        self.stop()
        self.redis_run = redis_run_id()
        self.hostname = f"celery-session-worker-{os.getpid()}-{time.monotonic_ns()}@localhost"
        # Its statistics refresh soon after indexing: pause() waits for that scheduled task.
        self.process = start_worker("celery-session-worker", hostname=self.hostname, KB_STATS_REFRESH_SECONDS="1")
        return self.process

    def pause(self, timeout: float = 60) -> None:
        """Before the test's tables are emptied: once the worker has finished what the test queued (nothing
        waiting in Redis, active, reserved or scheduled), stop it; one that does not get there goes."""
        import redis
        from django.conf import settings

        from kb.celery import app

        if self.process is None or self.process.poll() is not None:
            return
        broker = redis.Redis.from_url(settings.REDIS_URL)
        inspect = app.control.inspect(destination=[self.hostname], timeout=2)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not broker.llen(INGEST) and not broker.llen(ANSWERS):
                replies = [inspect.active(), inspect.reserved(), inspect.scheduled()]
                if all(reply and not reply.get(self.hostname) for reply in replies):
                    os.killpg(self.process.pid, signal.SIGSTOP)
                    _until_no_pop_waits(broker)
                    return
            time.sleep(0.2)
        self.stop()

    def stop(self) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGCONT)  # a stopped process would not act on SIGTERM
            stop_process(self.process)
            self.process = None


def _until_no_pop_waits(broker: Any, timeout: float = 10) -> None:
    """Until no Redis client waits in a blocking pop. A worker stopped inside one (kombu's BRPOP waits up to a
    second) is still handed the next message queued: the next test's first task went to the stopped worker,
    and its document stayed queued."""
    deadline = time.monotonic() + timeout
    while any(client["cmd"] == "brpop" and "b" in client["flags"] for client in broker.client_list()):
        if time.monotonic() > deadline:
            pytest.fail("a stopped worker still waits in BRPOP")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def _shared_worker(django_db_setup: None) -> Iterator[SharedWorker]:
    shared = SharedWorker()
    try:
        yield shared
    finally:
        shared.stop()


@pytest.fixture
def celery_worker(transactional_db: None, _shared_worker: SharedWorker) -> Iterator[subprocess.Popen[str]]:
    """A real worker on both queues reading the test database: the session's (SharedWorker). Tests that stop,
    kill or configure a worker start their own (start_worker)."""
    yield _shared_worker.get()
    _shared_worker.pause()


@contextmanager
def child(name: str, argv: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """A server the test starts itself, its output in OUTPUT/<name>.log; stopped when the block ends."""
    with open(OUTPUT / f"{name}.log", "w") as log:
        process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
                                   start_new_session=True)
    try:
        yield process
    finally:
        stop_process(process, 20)


def wait_until(ready: Any, what: str, processes: list[subprocess.Popen[str]], timeout: float = 90) -> None:
    """Until `ready()`; fails when one of `processes` (started with child) exits first or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for process in processes:
            if process.poll() is not None:
                pytest.fail(f"{process.args[2]!r} exited early; see its log in {OUTPUT}")
        if ready():
            return
        time.sleep(0.2)
    pytest.fail(f"{what} not ready within {timeout:.0f}s; see the logs in {OUTPUT}")


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def ws(port: int, path: str, cookie: str | None = None) -> ClientConnection:
    """A websocket to a Daphne the tests started, as a browser of this origin opens it (with a session cookie)."""
    headers = {"Origin": f"http://127.0.0.1:{port}"}
    if cookie:
        headers["Cookie"] = f"sessionid={cookie}"
    return connect(f"ws://127.0.0.1:{port}{path}", additional_headers=headers, open_timeout=10)


def close_code(connection: ClientConnection) -> int | None:
    """The code the server closes `connection` with, when the next receive ends it."""
    with pytest.raises(ConnectionClosed) as closed:
        connection.recv(timeout=10)
    return closed.value.rcvd.code if closed.value.rcvd else None


def wait_until_serving(
    base: str, process: subprocess.Popen[bytes], log: Path, timeout: float = 60, path: str = "accounts/login/"
) -> None:
    """Until GET base+path answers 200; fails with the server's log when it exits or takes too long."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{log.name}: the server exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(base + path, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    pytest.fail(f"{log.name}: the server did not serve within {timeout}s:\n{log.read_text()[-3000:]}")


@contextmanager
def daphne(name: str = "web", **env: str) -> Iterator[str]:
    """Daphne (HTTP + websockets, the app's own static files) on the test database, with extra
    environment (e.g. single sign-on settings); yields its base URL."""
    from django.conf import settings

    from kb.runtime.embedded import free_port
    from kb.runtime.launcher import web_argv

    port = free_port()
    OUTPUT.mkdir(exist_ok=True)
    log = OUTPUT / f"daphne-{name}.log"
    with open(log, "wb") as out:
        # The same SECRET_KEY as this process, so sessions made here (force_login) are valid there.
        child_env = service_env(SECRET_KEY=settings.SECRET_KEY, **env)
        process = subprocess.Popen(
            web_argv("127.0.0.1", port),
            cwd=ROOT, env=child_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}/"
    try:
        wait_until_serving(base, process, log)
        yield base
    finally:
        stop_process(process, 20)


def port_of(base: str) -> int:
    port = urlsplit(base).port
    assert port is not None, base
    return port


def redis_run_id() -> str:
    """Which run of the session's Redis this is: tests/robust/test_sweeper.py restarts it, and a process started
    before that holds connections that fail once (a Daphne's channel layer closes the next socket with 1011)."""
    import redis
    from django.conf import settings

    return str(redis.Redis.from_url(settings.REDIS_URL).info("server")["run_id"])


class SharedWeb:
    """The session's Daphne, started when a test first needs it and again after Redis restarted under it."""

    def __init__(self) -> None:
        self.server: contextlib.ExitStack | None = None
        self.base = ""
        self.redis_run = ""

    def get(self) -> str:
        if self.server is None or self.redis_run != redis_run_id():
            self.stop()
            self.redis_run = redis_run_id()
            self.server = contextlib.ExitStack()
            self.base = self.server.enter_context(daphne())
        return self.base

    def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None


@pytest.fixture(scope="session")
def _shared_web(django_db_setup: None) -> Iterator[SharedWeb]:
    shared = SharedWeb()
    try:
        yield shared
    finally:
        shared.stop()


@pytest.fixture
def web_server(_shared_web: SharedWeb) -> str:
    """The session's Daphne (SharedWeb), as `make run` starts it, with this process's SECRET_KEY; its base URL.
    Tests using it are transactional, so what they commit is what it serves, and the tables are emptied between
    tests. Tests that need other settings in the server, or stop it, start their own (daphne)."""
    return _shared_web.get()
