"""What the chat benchmarks share: a scratch database to run in, the evaluation set's groups
and corpus, the app started as `make run` starts it, percentiles and the load average.

The benchmarks never touch the live knowledge base: `run_in_scratch_database` creates a
database on the same PostgreSQL server (as `manage.py evaluate` does), runs the benchmark's
script again as a child process against it (`--inner OUT`), and drops it at the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EVAL_DIR = ROOT / "demo" / "eval"
DEV_DIR = ROOT.parent / "shared" / "eval"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def load_average() -> str:
    """The 1- and 5-minute load average: the benchmarks run on shared machines, so every figure carries it."""
    one, five, _ = os.getloadavg()
    return f"{one:.2f}/{five:.2f}"


def cpu_counters() -> tuple[int, int] | None:
    """(steal, total) CPU ticks since boot from /proc/stat; None where there is none (not Linux)."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None
    return fields[7], sum(fields)


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of CPU time the hypervisor gave to other machines between two readings. On a shared
    virtual machine it slows every process of a phase at once, so a "quiet" phase carries it."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


# Inner half: runs against the scratch database only ----------------------------------------


def groups_create(acl: dict[str, Any]) -> dict[str, Any]:
    """The evaluation set's groups (acl.json), by name."""
    from django.contrib.auth.models import Group

    names = sorted({g for g in acl.get("groups", {}).values() if g != "everyone"})
    return {name: Group.objects.create(name=name) for name in names}


def reader_create(groups: dict[str, Any]) -> Any:
    """The one asker of the latency benchmarks: in every group, so every question is answerable in principle."""
    from django.contrib.auth.models import User

    reader = User.objects.create_user("bench-reader")
    reader.groups.set(groups.values())
    return reader


def corpus_ingest(acl: dict[str, Any], groups: dict[str, Any], eval_dir: Path = EVAL_DIR) -> int:
    """Ingest the set's corpus through the real pipeline, each file shared as acl.json says; documents ready."""
    from kb.library.ingest.batch import expand_paths, ingest_paths

    corpus = eval_dir / "corpus"
    ready = 0
    for path in expand_paths([corpus]):
        group = acl.get("groups", {}).get(path.relative_to(corpus).as_posix(), "everyone")
        restricted = None if group == "everyone" else [groups[group]]
        summary = ingest_paths([path], groups=restricted, sync=True)
        ready += len(summary.ready)
    return ready


def session_cookie(user: Any) -> str:
    """A `Cookie` header value holding a signed-in session of `user` (what the browser sends)."""
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


class Processes:
    """Children started in their own sessions, logging to one file, all stopped by `stop()`."""

    def __init__(self) -> None:
        self.log = Path(tempfile.mkdtemp(prefix="kb-bench-server-")) / "server.log"  # kept for a failed run
        self.children: list[subprocess.Popen[bytes]] = []

    def _spawn(self, argv: list[str], env: dict[str, str], niceness: int = 0) -> subprocess.Popen[bytes]:
        with open(self.log, "ab") as log:
            process = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True,
                                       preexec_fn=(lambda: os.nice(niceness)) if niceness else None)
        self.children.append(process)
        return process

    @staticmethod
    def _wait_for_workers(count: int) -> None:
        from kb.celery import app

        deadline = time.monotonic() + 180
        while len(app.control.ping(timeout=1.0) or []) < count:
            if time.monotonic() > deadline:
                raise RuntimeError("the workers did not answer a ping within 180 s")

    def stop(self) -> None:
        for process in self.children:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.children:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


class AppServer(Processes):
    """Daphne and make run's two workers (kb.runtime.launcher.workers) against this database, stopped by `stop()`."""

    def __init__(self, env: dict[str, str]) -> None:
        from kb.runtime.embedded import free_port
        from kb.runtime.launcher import query_environment, wait_for_port, web_argv, workers

        super().__init__()
        self.port = free_port()
        self.web = self._spawn(web_argv("127.0.0.1", self.port), {**env, **query_environment()})
        self.workers = {worker.queue: self._spawn(worker.argv(), {**env, **worker.env}, worker.niceness)
                        for worker in workers()}
        wait_for_port("127.0.0.1", self.port, 120, self.web)
        self._wait_for_workers(len(self.workers))


# Outer half: scratch database ---------------------------------------------------------------


def rerun_in_scratch_database(argv: list[str]) -> int:
    """Start the embedded servers (an entry point, like manage.py), then run `argv` (this benchmark again, with
    KB_BENCH_INNER=1) against a fresh database on the same server, dropped at the end; its exit status."""
    import django

    from kb.runtime.embedded import ensure_services

    ensure_services()  # the settings only read where the servers are
    django.setup()
    from django.conf import settings
    from django.db import connection

    from lab.evaluation.runner import database_url, scratch_database

    with scratch_database(connection.settings_dict) as name:
        env = dict(os.environ, DATABASE_URL=database_url(connection.settings_dict, name),
                   REDIS_URL=settings.REDIS_URL, SECRET_KEY=settings.SECRET_KEY,
                   KB_MEDIA_ROOT=str(settings.VAR_DIR / f"bench-media-{name}"), KB_BENCH_INNER="1")
        return subprocess.run(argv, env=env, check=False).returncode


def run_in_scratch_database(script: Path, extra: list[str], *, keep: str | None = None) -> dict[str, Any]:
    """Run `script --inner OUT *extra` against a fresh database on the same server; the JSON it wrote to OUT.
    With `keep`, the database is `manage.py evaluate --reuse-index`'s kb_eval_keep_<keep>, kept for the next run."""
    from django.conf import settings
    from django.db import connection

    from lab.evaluation.runner import database_url, scratch_database

    with scratch_database(connection.settings_dict, keep=keep) as name, \
            tempfile.TemporaryDirectory(prefix="kb-bench-") as tmp:
        print(f"scratch database {name} ({'kept' if keep else 'dropped at the end'}) …", file=sys.stderr)
        out = Path(tmp) / "results.json"
        env = dict(os.environ)
        env.update(DATABASE_URL=database_url(connection.settings_dict, name), REDIS_URL=settings.REDIS_URL,
                   SECRET_KEY=settings.SECRET_KEY, KB_MEDIA_ROOT=str(Path(tmp) / "media"), DEBUG="0",
                   KB_ANSWER_BACKEND="extractive", PYTHONUNBUFFERED="1")
        command = [sys.executable, str(script), "--inner", str(out), *extra]
        child = subprocess.run(command, env=env, cwd=ROOT)
        if child.returncode != 0 or not out.exists():
            raise SystemExit(f"the benchmark run failed (exit {child.returncode})")
        return dict(json.loads(out.read_text()))


BROKER_DB = 11  # the Redis database number a benchmark's own broker uses


def own_broker(url: str) -> str:
    """The same Redis server, another database number: a live `make run` worker never takes the benchmark's jobs."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{BROKER_DB}")) if parts.scheme in ("redis", "rediss") else url


def own_servers_main(*, script: Path, inner: Path | None, extra: list[str], prefix: str,
                     run_inner: Callable[[Path], dict[str, Any]],
                     report: Callable[[dict[str, Any]], tuple[list[str], bool]], json_out: Path | None) -> None:
    """A source benchmark's entry point. Inside its scratch database (`inner`: where to write the figures) it runs
    with a VAR_DIR of its own (a Git source's clone is VAR_DIR/sources/<id>: ids of the scratch database) and its
    own broker; outside, it starts the embedded servers, runs `script` there, prints the report and exits 1 when a
    target is missed."""
    import django

    if inner:
        with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
            os.environ.update(KB_VAR_DIR=tmp, REDIS_URL=own_broker(os.environ["REDIS_URL"]))
            django.setup()
            inner.write_text(json.dumps(run_inner(Path(tmp)), default=str))
        return
    from kb.runtime.embedded import ensure_services

    ensure_services()  # an entry point, like manage.py: the embedded servers where DATABASE_URL/REDIS_URL are unset
    django.setup()
    result = run_in_scratch_database(script, extra)
    lines, met = report(result)
    print("\n".join(lines))
    if json_out:
        json_out.write_text(json.dumps(result, indent=2))
    sys.exit(0 if met else 1)


def lag_report(runs: list[dict[str, Any]], line: Callable[[dict[str, Any]], str], *, what: str, count: str,
               target_p95: float) -> tuple[list[str], bool]:
    """A lag benchmark's lines: each run's, then the medians of its p50 and p95 against `target_p95` (seconds) and
    how many of `count` (each run's number of changes) were never found; met when both hold."""
    import statistics

    p50, p95 = (statistics.median(r[key] for r in runs) for key in ("p50", "p95"))
    lost = sum(r[count] - r["found"] for r in runs)
    met = p95 <= target_p95 and not lost
    return [*(line(r) for r in runs),
            f"median of {len(runs)} run(s): {what} → searchable p50 {p50:.1f} s, p95 {p95:.1f} s (target p95 <= "
            f"{target_p95:.0f} s)" + (f"; {lost} {count} never found" if lost else "") + ("" if met else "  MISSED")], met
