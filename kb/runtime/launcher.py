"""`make run`: services, migrations, demo data, then Daphne, the Celery workers, beat and the folder watcher
until Ctrl-C.

Everything started here is stopped here: children run in their own process groups
so the launcher decides the order (web and worker first, then Redis and PostgreSQL).
SIGINT, SIGTERM and SIGHUP (a closed terminal) all stop it the same way, and if the
launcher itself dies before it is done (SIGKILL), kb.runtime.lifeline stops what it left.
While it runs it heals what crashes: a child that dies (the OOM killer, a SIGKILL) is started
again, and so is an embedded server it owns; a child that keeps dying stops the whole app.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from kb import queues
from kb.runtime import embedded
from kb.runtime.lifeline import Lifeline, die_with_parent
from kb.runtime.preflight import service_problems

STOP_GRACE_SECONDS = 10.0
CRASH_LOOP = 5  # deaths of one child within CRASH_WINDOW that stop the app instead of another restart
CRASH_WINDOW = 120.0  # seconds
RESTART_DELAY = 1.0  # seconds before a dead child is started again
SERVICE_CHECK_SECONDS = 2.0  # how often the embedded servers the launcher owns are checked

DEMO_LOGINS = (
    ("admin", "admin", "administrator (all documents, admin site)"),
    ("alice", "alice", "engineering"),
    ("bob", "bob", "finance"),
    ("carol", "carol", "no groups: public documents only"),
    ("dave", "dave", "engineering + hr"),
    ("sam", "sam", "support reviewer"),
)


class LaunchError(RuntimeError):
    """A reason not to start, already worded for the person at the terminal."""


def port_in_use(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def wait_for_port(host: str, port: int, timeout: float, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise LaunchError(f"the web server exited with status {process.returncode} before listening")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise LaunchError(f"the web server did not listen on {host}:{port} within {timeout:.0f}s")


def stop_process_groups(processes: Sequence[subprocess.Popen[bytes]], grace: float = STOP_GRACE_SECONDS) -> None:
    """SIGTERM every child at once, then SIGKILL each one's group after `grace` seconds.

    All at once, so stopping takes the slowest child's time rather than the sum: a Celery
    worker stopped while its pool is still loading the model waits for that load. A task
    cut off by the SIGKILL is not lost (acks_late, and kb.upkeep heals what was running).
    """
    for process in processes:
        if process.poll() is None:
            with suppress(ProcessLookupError):
                process.terminate()
    deadline = time.monotonic() + grace
    for process in processes:
        with suppress(subprocess.TimeoutExpired):
            process.wait(max(0.0, deadline - time.monotonic()))
    for process in processes:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # stragglers in the group, if any
        process.wait()


@dataclass
class Child:
    """A process the launcher keeps running, with what it takes to start it again."""

    name: str
    argv: list[str]
    env: dict[str, str]
    niceness: int
    process: subprocess.Popen[bytes]
    deaths: list[float] = field(default_factory=list)

    def crash_looping(self, now: float) -> bool:
        self.deaths = [t for t in self.deaths if now - t < CRASH_WINDOW] + [now]
        return len(self.deaths) >= CRASH_LOOP


@dataclass
class Launcher:
    host: str
    port: int
    env: dict[str, str]
    lifeline: Lifeline
    children: list[Child] = field(default_factory=list)
    owned: list[str] = field(default_factory=list)
    unstartable: set[str] = field(default_factory=set)

    def own(self, name: str) -> str:
        """Start or reuse embedded server `name`; its URL. Left again on shutdown, or by the lifeline."""
        url = embedded.use(name).url
        self.owned.append(name)
        self.lifeline.guard_service(name)
        return url

    def manage(self, *args: str) -> None:
        result = subprocess.run([sys.executable, "manage.py", *args], env=self.env)
        if result.returncode != 0:
            raise LaunchError(f"`manage.py {' '.join(args)}` failed with status {result.returncode}")

    def _popen(self, argv: Sequence[str], env: dict[str, str], niceness: int) -> subprocess.Popen[bytes]:
        def prepare() -> None:
            die_with_parent()
            if niceness:
                os.nice(niceness)

        process = subprocess.Popen(list(argv), env={**self.env, **env}, start_new_session=True, preexec_fn=prepare)
        self.lifeline.guard_group(process.pid)
        return process

    def spawn(self, name: str, argv: Sequence[str], env: dict[str, str] | None = None, niceness: int = 0) -> Child:
        child = Child(name, list(argv), env or {}, niceness, self._popen(argv, env or {}, niceness))
        self.children.append(child)
        return child

    def start(self) -> None:
        web = self.spawn("the web server (Daphne)", web_argv(self.host, self.port), env=query_environment())
        for worker in workers():
            env = {**worker.env, **WORKER_UNCHECKED}
            self.spawn(f"the {worker.queue} worker", worker.argv(), env=env, niceness=worker.niceness)
        self.spawn("the scheduler (Celery beat)", beat_argv(embedded.var_dir()))
        self.spawn("the folder watcher", watcher_argv())
        wait_for_port(self.host, self.port, 60, web.process)

    def watch(self) -> int:
        """Block until a signal, healing what crashes meanwhile; 1 when a child keeps dying."""
        checked = time.monotonic()
        while True:
            for child in self.children:
                if child.process.poll() is None:
                    continue
                status = child.process.returncode
                if child.crash_looping(time.monotonic()):
                    say(f"\n{child.name} exited with status {status} {CRASH_LOOP} times in "
                        f"{CRASH_WINDOW:.0f} s; stopping.")
                    return 1
                say(f"\n{child.name} exited with status {status}; starting it again.")
                self.restart(child)
            if time.monotonic() - checked >= SERVICE_CHECK_SECONDS:
                self.heal_services()
                checked = time.monotonic()
            time.sleep(0.5)

    def restart(self, child: Child) -> None:
        """What the dead process left in its group (a worker's pool processes) goes first."""
        stop_process_groups([child.process], grace=0)
        time.sleep(RESTART_DELAY)
        child.process = self._popen(child.argv, child.env, child.niceness)

    def heal_services(self) -> None:
        """Start again an embedded server that died under the app (on its previous port, so the running
        processes find it): until then requests answer 503, after it they succeed."""
        for name in self.owned:
            if embedded.process_alive(name):
                continue
            try:
                if embedded.start(name).started_here:
                    say(f"\nThe embedded {name} server had stopped; started it again.")
                self.unstartable.discard(name)
            except embedded.EmbeddedServiceError as exc:
                if name not in self.unstartable:  # said once; tried again at every check
                    say(f"\nThe embedded {name} server stopped and does not start again yet: {exc}")
                self.unstartable.add(name)

    def shutdown(self) -> None:
        stop_process_groups([child.process for child in self.children])
        self.children.clear()
        for name in reversed(self.owned):
            embedded.leave(name)
        self.owned.clear()


@dataclass(frozen=True)
class Worker:
    """One Celery worker that `make run` starts: the queue it serves and how it shares the CPU."""

    queue: str
    concurrency: str
    env: dict[str, str]
    niceness: int

    def argv(self) -> list[str]:
        return [
            sys.executable, "-m", "celery", "-A", "kb", "worker",
            "--loglevel", "INFO",
            "--queues", self.queue,
            "--concurrency", self.concurrency,
            "--hostname", f"kb-{self.queue}-{os.getpid()}@%h",
        ]


# A worker process runs one task at a time: it keeps one connection (checked before reuse) instead of
# taking one from a pool and handing it back around every task.
WORKER_DATABASE = {"KB_DB_POOL_SIZE": "0", "KB_DB_CONN_MAX_AGE": "300"}
# `migrate` ran Django's system checks before any child starts; each worker (and each restart of one) would run
# them again as it starts, ~1 s of CPU.
WORKER_UNCHECKED = {"CELERY_SKIP_CHECKS": "1"}


def workers() -> list[Worker]:
    """The ingest worker and the answer worker (docs/SCALING.md).

    Answers embed one short query and must not queue behind documents: their processes
    run one torch thread each (set before torch is imported, so it holds for the
    process's life) at normal priority. Ingestion is throughput work: it keeps every
    core (OMP_WAIT_POLICY=PASSIVE, so idle threads do not spin) but runs niced, so the
    scheduler gives an answer's burst of work the CPU first.
    """
    return [
        Worker(queues.INGEST, os.environ.get("KB_WORKER_CONCURRENCY", "1"), WORKER_DATABASE, 10),  # ingest processes, niced
        # answer worker processes, each holding the embedding model
        Worker(queues.ANSWERS, os.environ.get("KB_ANSWER_CONCURRENCY", "2"), {**WORKER_DATABASE, **query_environment()}, 0),
    ]


def beat_argv(var_dir: Path) -> list[str]:
    """Celery beat, which sends the periodic tasks (kb/celery.py: due source syncs). One per deployment: its
    schedule file and pid lock live in VAR_DIR, so a second beat on the same VAR_DIR refuses to start."""
    return [
        sys.executable, "-m", "celery", "-A", "kb", "beat",
        "--loglevel", "INFO",
        "--schedule", str(var_dir / "celerybeat-schedule"),
        "--pidfile", str(var_dir / "celerybeat.pid"),
    ]


def watcher_argv() -> list[str]:
    """The watcher of the folder sources with `watch` on (kb.library.sources.watch), which queues a sync a few
    seconds after a save. One per deployment, like beat: a second one would queue each run twice."""
    return [sys.executable, "manage.py", "watch_sources"]


def query_environment() -> dict[str, str]:
    """For the processes that embed one short query at a time (the answer worker; the web process, for
    search): one torch thread, which embeds a query faster than two here (~18 against ~23 ms) and
    leaves the other core to the next request."""
    return {"OMP_NUM_THREADS": os.environ.get("KB_ANSWER_TORCH_THREADS", "1")}  # torch threads per query process


def web_argv(host: str, port: int) -> list[str]:
    """Daphne, with request bodies bounded before they reach its temporary files (kb.runtime.daphne_server)."""
    return [sys.executable, "-m", "kb.runtime.daphne_server", "-b", host, "-p", str(port), "kb.asgi:application"]


def child_environment(database_url: str, redis_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(DATABASE_URL=database_url, REDIS_URL=redis_url, PYTHONUNBUFFERED="1")
    env.setdefault("DEBUG", "1")
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if not env.get("SECRET_KEY") and not env.get("SECRET_KEY_FILE"):
        env["SECRET_KEY"] = embedded.local_secret_key()
    return env


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def say(line: str) -> None:
    """Print, unless the terminal is gone (SIGHUP): stopping must go on without it."""
    try:
        print(line, flush=True)
    except OSError:
        pass


def run(host: str, port: int) -> int:
    if port_in_use(host, port):
        raise LaunchError(f"port {port} on {host} is already in use; stop what is using it or set PORT=<another port>")
    if partial := embedded.partial_configuration():
        raise LaunchError(partial)
    return supervise(Launcher(host=host, port=port, env={}, lifeline=Lifeline.start()), boot)


def boot(launcher: Launcher) -> None:
    """The embedded servers (where no URL is set), migrations, demo data, then the children; says where the app is."""
    database_url = os.environ.get("DATABASE_URL", "") or launcher.own("postgres")
    redis_url = os.environ.get("REDIS_URL", "") or launcher.own("redis")
    problems = service_problems(database_url, redis_url)
    if problems:
        raise LaunchError("\n".join(problems))
    launcher.env = child_environment(database_url, redis_url)
    launcher.manage("migrate", "--noinput")
    # Demo users' passwords are their names: only ever in the embedded database, never in
    # whatever DATABASE_URL points at (`manage.py load_demo` adds them there on purpose).
    demo = "postgres" in launcher.owned
    if demo:
        launcher.manage("load_demo")
    launcher.start()
    url = f"http://{launcher.host}:{launcher.port}/"
    say(f"\nKnowledge base ready at {url}  (health: {url}healthz)")
    if demo:
        say("Demo logins (username / password):")
        for username, password, role in DEMO_LOGINS:
            say(f"  {username:<6} / {password:<6} {role}")
    say("Press Ctrl-C to stop.")


def supervise(launcher: Launcher, start: Callable[[Launcher], None]) -> int:
    """`start` the app, then watch it until a signal; however that ends, everything started is stopped
    (and if the launcher is killed meanwhile, its lifeline stops it). tests/robust/test_launcher_lifetime.py
    runs this with stand-in children."""
    # SIGINT too: a launcher started in the background by a non-interactive shell inherits it ignored.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_interrupt)
    try:
        start(launcher)
        return launcher.watch()
    except KeyboardInterrupt:
        say("\nStopping…")
        return 0
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the cleanup
        launcher.shutdown()
        launcher.lifeline.release()


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.settings")
    host = os.environ.get("HOST", "127.0.0.1")  # the address `make run` listens on
    try:
        port = int(os.environ.get("PORT", "8000"))  # the port `make run` listens on
    except ValueError:
        sys.stderr.write(f"error: PORT must be a number (got {os.environ['PORT']!r})\n")
        sys.exit(2)
    try:
        status = run(host, port)
    except (LaunchError, embedded.EmbeddedServiceError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(2)
    sys.exit(status)


if __name__ == "__main__":
    main()
