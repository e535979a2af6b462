"""Load benchmark: many signed-in askers at once over the real websocket, on the app as `make run` starts it.

    .venv/bin/python bench/load.py [--askers 50] [--seconds 60] [--turns 5] [--think 0]
                                   [--asks-per-minute 0] [--eval-dir ../shared/eval] [--json OUT]

In a scratch database on the embedded PostgreSQL (bench/_common.py; the live knowledge base is
never touched): ingest the evaluation set's corpus with its groups, create `--askers` users
spread over acl.json's user profiles (each profile's groups, so the ACL filter is exercised),
sign each one in, and start Daphne and the two Celery workers exactly as `make run` does.
Then every asker does what the Ask page (chat/static/chat/ask.js) does, over and over, until
`--seconds` have passed: `POST /api/ask` with its session cookie and CSRF token, open
`/ws/chat/<conversation>/?since=…` for a new conversation (a follow-up reuses the open
socket), and read events until the answer's `done`, `refused` or `error`. After `--turns`
questions it starts a new conversation. Closed loop: an asker asks again as soon as its
answer is done (plus `--think` seconds), so the figures show the service saturated.

Printed: asks, answers, refusals; errors (a non-2xx other than 429, a websocket failure,
an answer ending in `error`, a timeout), target 0; 429s separately (the per-user limit is
`--asks-per-minute`, passed to the app as KB_ASKS_PER_MINUTE; 0, the default, switches it
off for the run, since fifty closed-loop askers would hit the usual 20 a minute by design);
citations of documents outside the asker's groups (target 0); time to first token (POST to
the first `token` or the `refused` event) and total time (POST to `done`/`refused`),
p50/p95; PostgreSQL connections to the database sampled every second, per process, the
maximum against KB_DB_POOL_SIZE (each process has its own pool); the RSS of every process
(Daphne, each Celery worker and its pool children, PostgreSQL, Redis) before and after; the
load average. The benchmark's own process competes for the same CPUs as the service.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from http.client import HTTPException
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench._common import (  # noqa: E402 (after the path)
    DEV_DIR,
    AppServer,
    corpus_ingest,
    groups_create,
    load_average,
    percentile,
    run_in_scratch_database,
    session_cookie,
)

if TYPE_CHECKING:
    from django.db.backends.postgresql.base import DatabaseWrapper as PostgresWrapper

SCRIPT = Path(__file__).resolve()
MIB = 1024 * 1024
FINAL = ("done", "refused", "error")
CLOSING = "closing (no owner; gone by the next sample)"


@dataclass(frozen=True)
class Asker:
    """One simulated user: what the browser holds after signing in, and what it may read."""

    username: str
    profile: str
    cookie: str
    csrf: str
    visible: frozenset[int]


@dataclass
class Tally:
    asks: int = 0
    answered: int = 0
    refused: int = 0
    throttled: int = 0
    acl_leaks: int = 0
    ttft_ms: list[float] = field(default_factory=list)
    total_ms: list[float] = field(default_factory=list)
    produce_first_ms: list[float] = field(default_factory=list)  # the producer's own, from the final event's timings
    produce_total_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class AnswerFailed(Exception):
    """The answer ended in an `error` event, or the socket closed before it ended."""


# Inner half: runs against the scratch database only ----------------------------------------


def askers_create(acl: dict[str, Any], groups: dict[str, Any], count: int) -> list[Asker]:
    """`count` signed-in users, dealt round-robin over acl.json's user profiles (their groups)."""
    from django.contrib.auth.models import User
    from django.http import HttpRequest
    from django.middleware.csrf import get_token

    from kb.library.access import visible_documents

    profiles = sorted(acl["users"].items())
    askers = []
    for n in range(count):
        profile, names = profiles[n % len(profiles)]
        user = User.objects.create_user(f"load-{n:03d}-{profile}")
        user.groups.set([groups[name] for name in names])
        request = HttpRequest()  # the token the Ask page's form would carry, and its cookie
        token = get_token(request)
        askers.append(Asker(
            username=user.username, profile=profile, csrf=token,
            cookie=f"{session_cookie(user)}; csrftoken={request.META['CSRF_COOKIE']}",
            visible=frozenset(visible_documents(user).values_list("pk", flat=True)),
        ))
    return askers


def _post(url: str, body: dict[str, Any], asker: Asker, origin: str, timeout: float) -> tuple[int, bytes]:
    request = urllib.request.Request(  # noqa: S310 (http://127.0.0.1, our own server)
        url, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json", "Cookie": asker.cookie,
                 "X-CSRFToken": asker.csrf, "Origin": origin},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (the same)
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


async def _read_answer(ws: Any, message: int, began: float, asker: Asker, tally: Tally) -> None:
    """Events until `message` ends; its first token (or refusal) and its end go into `tally`."""
    first = False
    while True:
        event = json.loads(await ws.recv())
        if event.get("type") == "error" and event.get("message") is None:
            raise AnswerFailed(f"error event: {event.get('error')}")
        if event.get("message") != message:
            continue
        kind = event["type"]
        if kind in ("token", "refused") and not first:
            first = True
            tally.ttft_ms.append((time.perf_counter() - began) * 1000)
        if kind == "citations":
            tally.acl_leaks += sum(1 for c in event["citations"] if c["document_id"] not in asker.visible)
        if kind in FINAL:
            if kind == "error":
                raise AnswerFailed(f"error event: {event.get('error')}")
            tally.total_ms.append((time.perf_counter() - began) * 1000)
            timings = event.get("timings") or {}
            if timings.get("first_token_ms") is not None:
                tally.produce_first_ms.append(timings["first_token_ms"])
            if timings.get("total_ms") is not None:
                tally.produce_total_ms.append(timings["total_ms"])
            if kind == "done":
                tally.answered += 1
            else:
                tally.refused += 1
            return


async def ask_loop(n: int, asker: Asker, base: str, questions: list[str], until: float, opts: argparse.Namespace,
                   tally: Tally) -> None:
    """One asker doing what the Ask page does, until `until` (monotonic); a started answer is read to its end."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import WebSocketException
    from websockets.typing import Origin

    ws: Any = None
    conversation: int | None = None
    asked, in_conversation = 0, 0
    while time.monotonic() < until:
        body: dict[str, Any] = {"question": questions[(n * 7 + asked) % len(questions)]}
        if conversation is not None:
            body["conversation"] = conversation
        asked += 1
        tally.asks += 1
        began = time.perf_counter()
        try:
            status, raw = await asyncio.to_thread(_post, base + "/api/ask", body, asker, base, opts.timeout)
            if status == 429:
                tally.throttled += 1
                await asyncio.sleep(1)
                continue
            if status != 202:
                raise AnswerFailed(f"POST /api/ask: HTTP {status} {raw[:200]!r}")
            reply = json.loads(raw)
            conversation = reply["conversation"]
            in_conversation += 1
            if ws is None:
                url = f"{base.replace('http://', 'ws://')}{reply['stream']}?since={reply['question'] - 1}"
                ws = await connect(url, origin=Origin(base), additional_headers={"Cookie": asker.cookie}, open_timeout=30)
            async with asyncio.timeout(opts.timeout):
                await _read_answer(ws, reply["message"], began, asker, tally)
        except (AnswerFailed, WebSocketException, OSError, HTTPException, TimeoutError, ValueError, KeyError) as exc:
            reason = "timeout" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
            tally.errors.append(f"{asker.username}: {reason}"[:300])
            in_conversation = opts.turns  # start afresh: a new conversation on a new socket
        if in_conversation >= opts.turns:
            if ws is not None:
                await ws.close()
            ws, conversation, in_conversation = None, None, 0
        if opts.think:
            await asyncio.sleep(opts.think)
    if ws is not None:
        await ws.close()


async def drive(askers: list[Asker], base: str, questions: list[str], opts: argparse.Namespace) -> Tally:
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(len(askers) + 2, thread_name_prefix="post"))
    tally = Tally()
    until = time.monotonic() + opts.seconds
    await asyncio.gather(*(ask_loop(n, a, base, questions, until, opts, tally) for n, a in enumerate(askers)))
    return tally


# Processes: who holds which PostgreSQL connection, and how much memory --------------------


def _server_processes(server: AppServer) -> Iterator[tuple[str, Any]]:
    """(label, psutil.Process) for Daphne, each worker and each of its pool children, as they are now."""
    import psutil

    yield "daphne", psutil.Process(server.web.pid)
    for queue, popen in server.workers.items():
        worker = psutil.Process(popen.pid)
        yield f"celery {queue}", worker
        for i, child in enumerate(sorted(worker.children(recursive=True), key=lambda p: p.pid), 1):
            yield f"celery {queue} child {i}", child


def _service_pids(dsn: str, redis_url: str) -> tuple[int, int]:
    """The PostgreSQL postmaster's and the Redis server's process ids, as the servers tell them."""
    import psycopg
    import redis

    with psycopg.connect(dsn, autocommit=True) as conn:
        (data_directory,) = conn.execute("SHOW data_directory").fetchall()[0]
    postmaster = int((Path(data_directory) / "postmaster.pid").read_text().split()[0])
    return postmaster, int(redis.Redis.from_url(redis_url).info("server")["process_id"])


def _all_processes(server: AppServer, postmaster: int, redis_pid: int) -> list[tuple[str, Any]]:
    """Every process of the running app, as they are now; PostgreSQL's children as one entry (a list)."""
    import psutil

    pg = psutil.Process(postmaster)
    return [*_server_processes(server), ("postgres", pg), ("postgres children", pg.children()),
            ("redis", psutil.Process(redis_pid))]


def rss_snapshot(processes: list[tuple[str, Any]]) -> dict[str, str]:
    """Label -> RSS in MiB (a list of processes, such as PostgreSQL's backends, is summed and counted)."""
    import psutil

    rss = {}
    for label, what in processes:
        group = what if isinstance(what, list) else [what]
        total = 0
        for process in group:
            try:
                total += process.memory_info().rss
            except psutil.NoSuchProcess:
                continue
        rss[label] = f"{total / MIB:.1f}" + (f" ({len(group)} processes; shared buffers counted in each)"
                                             if isinstance(what, list) else "")
    return rss


class ConnectionSampler:
    """Every second: the database's connections (pg_stat_activity), attributed to the server's processes
    by their client port. Its own connection is left out of every count."""

    def __init__(self, dsn: str, pg_port: int, server: AppServer) -> None:
        self.dsn, self.pg_port, self.server = dsn, pg_port, server
        self.samples = 0
        self.max_total = 0
        self.max_by_process: dict[str, int] = {}
        self.unattributed: set[str] = set()  # what the connections no server process holds were doing
        self._unowned: set[int] = set()  # client ports no process held in the last sample
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.wait(1.0):
                owner = self._owners()
                rows = conn.execute(
                    "SELECT client_port, concat_ws(' ', application_name, state, left(query, 80)) "
                    "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchall()
                self._count(dict(rows), {**owner, **self._owners()})

    def _owners(self) -> dict[int, str]:
        """Client port -> the process holding it. Read before and after each sample: a connection that
        opens or closes while the sample is taken still finds its owner."""
        import psutil

        owner: dict[int, str] = {}
        for label, process in [*_server_processes(self.server), ("this benchmark", psutil.Process())]:
            try:
                for conn in process.net_connections("tcp"):
                    if conn.raddr and conn.raddr.port == self.pg_port:
                        owner[conn.laddr.port] = label
            except psutil.NoSuchProcess:
                continue
        return owner

    def _count(self, ports: dict[int, str], owner: dict[int, str]) -> None:
        counts: dict[str, int] = {}
        unowned = set()
        for port, doing in ports.items():
            label = owner.get(port)
            if label is None:
                # Its client already closed it while the backend is still exiting, unless it is there again next time.
                unowned.add(port)
                label = "other" if port in self._unowned else CLOSING
                if label == "other" and len(self.unattributed) < 5:
                    self.unattributed.add(doing)
            counts[label] = counts.get(label, 0) + 1
        self._unowned = unowned
        for label, count in counts.items():
            self.max_by_process[label] = max(self.max_by_process.get(label, 0), count)
        self.max_total = max(self.max_total, len(ports))
        self.samples += 1

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join()
        return {"samples": self.samples, "max_total": self.max_total, "max_by_process": self.max_by_process,
                "unattributed": sorted(self.unattributed)}


def run_load(opts: argparse.Namespace) -> dict[str, Any]:
    from urllib.parse import urlsplit

    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", interactive=False, verbosity=0)
    acl = json.loads((opts.eval_dir / "acl.json").read_text())
    questions = [json.loads(line)["query"] for line in (opts.eval_dir / "questions.jsonl").open() if line.strip()]
    groups = groups_create(acl)
    started = time.perf_counter()
    documents = corpus_ingest(acl, groups, opts.eval_dir)
    ingest_s = time.perf_counter() - started
    askers = askers_create(acl, groups, opts.askers)
    connection.close()
    cast("PostgresWrapper", connection).close_pool()  # the server gets the database's connections; the pool would keep one idle

    dsn = os.environ["DATABASE_URL"]
    pool = settings.DATABASES["default"].get("OPTIONS", {}).get("pool")
    env = dict(os.environ, KB_ANSWER_BACKEND="extractive", DEBUG="0", KB_ASKS_PER_MINUTE=str(opts.asks_per_minute))
    server = AppServer(env)
    base = f"http://127.0.0.1:{server.port}"
    try:
        warm = asyncio.run(drive(askers[:2], base, questions, argparse.Namespace(**{**vars(opts), "seconds": 3})))
        postmaster, redis_pid = _service_pids(dsn, settings.REDIS_URL)
        rss_before = rss_snapshot(_all_processes(server, postmaster, redis_pid))
        load_before = load_average()
        sampler = ConnectionSampler(dsn, urlsplit(dsn).port or 5432, server)
        began = time.monotonic()
        tally = asyncio.run(drive(askers, base, questions, opts))
        elapsed = time.monotonic() - began
        connections = sampler.stop()
        load_after = load_average()
        rss_after = rss_snapshot(_all_processes(server, postmaster, redis_pid))
    finally:
        server.stop()
    return {
        "documents": documents, "ingest_s": ingest_s, "askers": opts.askers, "seconds": opts.seconds,
        "elapsed_s": elapsed, "turns": opts.turns, "think_s": opts.think, "asks_per_minute": opts.asks_per_minute,
        "profiles": sorted({a.profile for a in askers}), "warm_up_errors": warm.errors,
        "tally": asdict(tally), "connections": connections, "pool_size": pool["max_size"] if pool else 0,
        "rss_before": rss_before, "rss_after": rss_after, "load_before": load_before, "load_after": load_after,
        "cpus": os.cpu_count(), "server_log": str(server.log),
    }


# Report -------------------------------------------------------------------------------------


def report(result: dict[str, Any]) -> list[str]:
    tally, conns = result["tally"], result["connections"]
    ttft, total = tally["ttft_ms"], tally["total_ms"]
    pool = result["pool_size"]
    limit = (f"{result['asks_per_minute']} a minute per user (KB_ASKS_PER_MINUTE)" if result["asks_per_minute"]
             else "off for this run (KB_ASKS_PER_MINUTE=0)")
    lines = [
        f"load bench: {result['askers']} askers for {result['seconds']} s ({result['elapsed_s']:.1f} s with the last "
        f"answers), profiles {', '.join(result['profiles'])}; {result['documents']} documents; extractive backend; "
        f"a new conversation every {result['turns']} questions; think time {result['think_s']} s; {result['cpus']} CPUs",
        f"asks {tally['asks']} ({tally['asks'] / result['elapsed_s']:.1f}/s): answered {tally['answered']}, "
        f"refused (NO ANSWER) {tally['refused']}, 429 {tally['throttled']} (per-user ask limit {limit})",
        f"errors: {len(tally['errors'])} (target 0); citations outside the asker's groups: {tally['acl_leaks']} (target 0)",
        *(f"  {error}" for error in tally["errors"][:10]),
        f"time to first token (POST -> first token or refused): p50 {percentile(ttft, 50):.0f} ms, "
        f"p95 {percentile(ttft, 95):.0f} ms",
        f"total time (POST -> done or refused):                p50 {percentile(total, 50):.0f} ms, "
        f"p95 {percentile(total, 95):.0f} ms",
        f"  the worker's own timings (producing, no queueing): first token of the answered p50 "
        f"{percentile(tally['produce_first_ms'], 50):.0f} ms, p95 {percentile(tally['produce_first_ms'], 95):.0f} ms; "
        f"total of all p50 {percentile(tally['produce_total_ms'], 50):.0f} ms, "
        f"p95 {percentile(tally['produce_total_ms'], 95):.0f} ms",
        f"PostgreSQL connections to the database, sampled every second ({conns['samples']} samples): max {conns['max_total']} "
        f"in all; pool size KB_DB_POOL_SIZE={pool} per process",
    ]
    over = [label for label, n in conns["max_by_process"].items() if (pool and n > pool) or label == "other"]
    for label, n in sorted(conns["max_by_process"].items()):
        lines.append(f"  {label:<30} max {n}")
    lines.extend(f"  other: {doing}" for doing in conns["unattributed"])
    lines.append(f"  connections within the pool size: {'yes' if not over else 'NO: ' + ', '.join(over)}")
    lines.append("RSS (MiB), before -> after the load:")
    for label, before in result["rss_before"].items():
        lines.append(f"  {label:<30} {before} -> {result['rss_after'].get(label, 'gone')}")
    lines.append(f"load average 1/5 min: {result['load_before']} before -> {result['load_after']} after")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--askers", type=int, default=50, help="simulated users asking at once")
    parser.add_argument("--seconds", type=float, default=60, help="how long they keep asking")
    parser.add_argument("--turns", type=int, default=5, help="questions per conversation (then a new one)")
    parser.add_argument("--think", type=float, default=0.0, help="seconds an asker waits between an answer and its next question")
    parser.add_argument("--timeout", type=float, default=180.0,
                        help="seconds an answer may take before it counts as an error (default: the app's KB_ANSWER_TIMEOUT)")
    parser.add_argument("--asks-per-minute", type=int, default=0, help="the app's per-user ask limit for the run (0: off)")
    parser.add_argument("--eval-dir", type=Path, default=DEV_DIR, help="the set whose corpus and questions are used")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    parser.add_argument("--inner", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.askers < 1 or args.seconds <= 0 or args.turns < 1 or args.timeout <= 0 or args.think < 0 or args.asks_per_minute < 0:
        parser.error("--askers, --seconds, --turns and --timeout must be positive; --think and --asks-per-minute >= 0")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.settings")
    os.environ["KB_ASKS_PER_MINUTE"] = str(args.asks_per_minute)
    import django

    from kb.runtime.embedded import ensure_services

    ensure_services()  # an entry point, like manage.py: the settings only read where the servers are
    django.setup()
    if args.inner:
        args.inner.write_text(json.dumps(run_load(args)))
        return
    result = run_in_scratch_database(SCRIPT, [
        "--askers", str(args.askers), "--seconds", str(args.seconds), "--turns", str(args.turns),
        "--think", str(args.think), "--timeout", str(args.timeout), "--asks-per-minute", str(args.asks_per_minute),
        "--eval-dir", str(args.eval_dir.resolve())])
    for line in report(result):
        print(line)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    tally = result["tally"]
    sys.exit(0 if not tally["errors"] and not tally["acl_leaks"] else 1)


if __name__ == "__main__":
    main()
