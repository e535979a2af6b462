"""The scale-out drill: the app behind a real load balancer, with a read replica, while its processes die.

    .venv/bin/python bench/scaleout.py [--askers 50] [--documents 40] [--seconds 100] [--eval-dir ../shared/eval]
                                       [--json OUT]

Needs HAProxy (Debian: `apt-get install haproxy`). In a scratch database on the embedded PostgreSQL
(bench/_common.py; the live knowledge base is never touched) it ingests the evaluation set's corpus
with its groups and creates bench/load.py's askers, makes a hot standby of the server
(`pg_basebackup -R`, kb.runtime.embedded.start_standby), and starts HAProxy with deploy/haproxy.cfg in
front of two Daphne processes, two answer workers and one ingest worker, each its own Celery process,
every app process with DATABASE_REPLICA_URL pointing at the standby (search.replica). Then every asker
asks through the proxy, over and over (a new conversation each time: POST /api/ask, the websocket, the
events to the answer's end), while `--documents` files are uploaded through it (POST /api/documents),
and on a schedule (seconds after the askers start):

- `--kill-web-at` (20): SIGKILL one Daphne. Its readers' sockets close; each reconnects through the
  proxy with `?since=` and reads its answer to the end (the conversation replays);
- `--kill-worker-at` (40): SIGKILL one answer worker, main process and pool. The answer it was producing
  must fail with a reason (the other workers' heartbeat, kb.upkeep); the rest go to the other one;
- `--stop-replica-at` (60): stop the standby. Retrieval must read the primary, with no failed answer;
- `--start-replica-at` (75): start it again on the same port. Reads must return to it.

Printed: how every ask ended (done, refused, failed with a reason; lost: no end within `--timeout`,
target 0), errors (POST /api/ask failing other than by a proxy 502/503 retried), citations outside the
asker's groups (target 0), the time to recover from each event, time to first token p50/p95 before,
during and after the events, retrieval reads on the standby and on the primary in each phase, and the
uploaded documents' states at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench._common import (  # noqa: E402 (after the path)
    DEV_DIR,
    Processes,
    corpus_ingest,
    groups_create,
    load_average,
    percentile,
    run_in_scratch_database,
)
from bench.load import Asker, _post, askers_create  # noqa: E402

SCRIPT = Path(__file__).resolve()
FINAL = ("done", "refused", "error")
RETRIED = (502, 503)


@dataclass
class Ask:
    asker: str
    began: float  # seconds after the askers started
    outcome: str = ""  # done, refused, error (failed with a reason), lost, or post-failed
    reason: str = ""
    ttft_ms: float | None = None
    total_ms: float | None = None
    reconnects: int = 0
    resumed_ms: list[float] = field(default_factory=list)  # socket closed -> the next event, per drop
    post_retries: int = 0
    cited: list[int] = field(default_factory=list)  # documents; checked against the asker's access at the end


class Cluster(Processes):
    """HAProxy, two Daphne processes and three Celery workers (ingest, answers-1, answers-2)."""

    def __init__(self, env: dict[str, str]) -> None:
        from kb import queues
        from kb.runtime.embedded import free_port
        from kb.runtime.launcher import query_environment, wait_for_port, web_argv, workers

        super().__init__()
        self.named: dict[str, Any] = {}
        self.hostnames: dict[str, str] = {}
        webs = {}
        for name in ("web1", "web2"):
            port = free_port()
            webs[name] = port
            self.named[name] = self._spawn(web_argv("127.0.0.1", port), {**env, **query_environment()})
        spec = {worker.queue: worker for worker in workers()}
        for name, queue in (("ingest", queues.INGEST), ("answers-1", queues.ANSWERS), ("answers-2", queues.ANSWERS)):
            worker = spec[queue]
            self.hostnames[name] = f"drill-{name}-{os.getpid()}@localhost"
            argv = worker.argv()
            argv[argv.index("--hostname") + 1] = self.hostnames[name]
            argv[argv.index("--concurrency") + 1] = "1"
            self.named[name] = self._spawn(argv, {**env, **worker.env}, worker.niceness)
        self.port = free_port()
        proxy_env = {**env, "KB_PROXY_BIND": f"127.0.0.1:{self.port}", "KB_WEB1": f"127.0.0.1:{webs['web1']}",
                     "KB_WEB2": f"127.0.0.1:{webs['web2']}"}
        haproxy = shutil.which("haproxy")
        if haproxy is None:
            raise SystemExit("the drill needs HAProxy: apt-get install haproxy")
        self.named["haproxy"] = self._spawn([haproxy, "-db", "-f", str(ROOT / "deploy" / "haproxy.cfg")], proxy_env)
        for name, port in webs.items():
            wait_for_port("127.0.0.1", port, 120, self.named[name])
        wait_for_port("127.0.0.1", self.port, 30, self.named["haproxy"])
        self._wait_for_workers(3)

    def kill(self, name: str) -> None:
        os.killpg(self.named[name].pid, signal.SIGKILL)
        self.named[name].wait()


# The askers ---------------------------------------------------------------------------------


async def _read_to_the_end(url: str, origin: str, message: int, asker: Asker, ask: Ask, began: float,
                           deadline: float) -> None:
    """The answer's events to its end, reconnecting (with the same `since`) whenever the socket closes."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import WebSocketException
    from websockets.typing import Origin

    dropped: float | None = None
    while True:
        try:
            async with asyncio.timeout(max(deadline - time.perf_counter(), 0.1)):
                async with connect(url, origin=Origin(origin), additional_headers={"Cookie": asker.cookie},
                                   open_timeout=10) as ws:
                    while True:
                        event = json.loads(await ws.recv())
                        if dropped is not None:
                            ask.resumed_ms.append((time.perf_counter() - dropped) * 1000)
                            dropped = None
                        if event.get("message") != message:
                            if event.get("type") == "error" and event.get("message") is None:
                                ask.outcome, ask.reason = "error", f"socket error: {event.get('error')}"
                                return
                            continue
                        kind = event["type"]
                        if kind in ("token", "refused") and ask.ttft_ms is None:
                            ask.ttft_ms = (time.perf_counter() - began) * 1000
                        if kind == "citations":
                            ask.cited = sorted({*ask.cited, *(c["document_id"] for c in event["citations"])})
                        if kind in FINAL:
                            ask.outcome, ask.reason = kind, str(event.get("error") or "")
                            ask.total_ms = (time.perf_counter() - began) * 1000
                            return
        except TimeoutError:
            ask.outcome, ask.reason = "lost", "no end within the timeout"
            return
        except (WebSocketException, OSError) as exc:
            ask.reconnects += 1
            dropped = dropped or time.perf_counter()
            ask.reason = f"{type(exc).__name__}"
            await asyncio.sleep(0.2)


async def ask_loop(n: int, asker: Asker, base: str, questions: list[str], t0: float, until: float,
                   timeout: float, asks: list[Ask], errors: list[str]) -> None:
    while time.monotonic() < until:
        question = questions[(n * 7 + len(asks)) % len(questions)]
        ask = Ask(asker.username, round(time.monotonic() - t0, 3))
        asks.append(ask)
        began = time.perf_counter()
        while True:
            try:
                status, raw = await asyncio.to_thread(_post, base + "/api/ask", {"question": question}, asker, base, 30)
            except OSError as exc:
                status, raw = 0, str(exc).encode()
            if status == 202 or (status not in RETRIED and status != 0) or ask.post_retries >= 5:
                break
            ask.post_retries += 1  # the proxy had no server for it, or the connection broke: ask again
            await asyncio.sleep(0.5)
        if status != 202:
            ask.outcome, ask.reason = "post-failed", f"HTTP {status} {raw[:200]!r}"
            errors.append(f"{asker.username}: POST /api/ask {ask.reason}"[:300])
            await asyncio.sleep(1)
            continue
        reply = json.loads(raw)
        url = f"{base.replace('http://', 'ws://')}{reply['stream']}?since={reply['question'] - 1}"
        await _read_to_the_end(url, base, reply["message"], asker, ask, began, began + timeout)


# The schedule ---------------------------------------------------------------------------------


def _running_answers(hostname: str) -> list[int]:
    from chat.models import Message

    return list(Message.objects.filter(status=Message.Status.RUNNING, worker=hostname).values_list("pk", flat=True))


def _until_ended(ids: list[int], timeout: float) -> tuple[float | None, list[str]]:
    """Seconds until every answer in `ids` ended (None: not within `timeout`), and how they ended."""
    from chat.models import Message

    began = time.monotonic()
    while time.monotonic() - began < timeout:
        rows = list(Message.objects.filter(pk__in=ids).values_list("status", "error"))
        if all(status not in (Message.Status.RUNNING, Message.Status.PENDING) for status, _ in rows):
            return time.monotonic() - began, [f"{status}: {error}"[:160] for status, error in rows]
        time.sleep(0.25)
    return None, []


class StandbyReads:
    """Transactions on the standby's copy of the database, sampled every second (pg_stat_database): each
    retrieval served there is two (search.replica's check, then the query), one that the check sends to
    the primary is one, and the sampler's own read is one a second."""

    SQL = "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"

    def __init__(self, url: str, t0: float) -> None:
        self.url, self.t0 = url, t0
        self.samples: list[tuple[float, int | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def read(self) -> int | None:
        import psycopg

        try:
            with psycopg.connect(self.url, autocommit=True, connect_timeout=2) as conn:
                row = conn.execute(self.SQL).fetchone()
                return int(row[0]) if row else 0
        except psycopg.Error:
            return None

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.samples.append((time.monotonic() - self.t0, self.read()))

    def stop(self) -> list[tuple[float, int | None]]:
        self._stop.set()
        self._thread.join()
        return self.samples


async def schedule(cluster: Cluster, opts: argparse.Namespace, t0: float, standby: dict[str, Any],
                   events: list[dict[str, Any]]) -> None:
    from kb.runtime.embedded import start_standby, stop_pgdata

    async def at(seconds: float) -> None:
        await asyncio.sleep(max(0.0, t0 + seconds - time.monotonic()))

    await at(opts.kill_web_at)
    cluster.kill("web1")
    events.append({"event": "SIGKILL web1 (Daphne)", "at": round(time.monotonic() - t0, 1)})

    await at(opts.kill_worker_at)
    producing = await asyncio.to_thread(_running_answers, cluster.hostnames["answers-1"])
    cluster.kill("answers-1")
    killed = {"event": "SIGKILL answers-1 (main process and pool)", "at": round(time.monotonic() - t0, 1),
              "producing": producing}
    events.append(killed)
    watch = asyncio.create_task(asyncio.to_thread(_until_ended, producing, 120.0))  # while the schedule goes on

    await at(opts.stop_replica_at)
    await asyncio.to_thread(stop_pgdata, standby["pgdata"])
    events.append({"event": "standby stopped", "at": round(time.monotonic() - t0, 1)})

    await at(opts.start_replica_at)
    await asyncio.to_thread(start_standby, standby["primary"], standby["pgdata"], standby["port"])
    events.append({"event": "standby started again", "at": round(time.monotonic() - t0, 1)})
    killed["ended_after_s"], killed["ended_as"] = await watch


# Uploads ---------------------------------------------------------------------------------------


def upload_documents(base: str, token: str, eval_dir: Path, count: int, t0: float, results: list[dict[str, Any]]) -> None:
    """`count` files of the set's corpus (Markdown and text), each made new by a heading, one a second."""
    import requests

    sources = sorted(p for p in (eval_dir / "corpus").rglob("*") if p.suffix in {".md", ".txt"})
    for i in range(count):
        path = sources[i % len(sources)]
        body = f"Drill copy {i}\n\n".encode() + path.read_bytes()
        name = f"drill-{i:02d}-{path.name}"
        sent = time.monotonic() - t0
        try:
            response = requests.post(base + "/api/documents", headers={"Authorization": f"Bearer {token}"},
                                     files=[("files", (name, body, "text/plain"))], data={"access": "everyone"},
                                     timeout=60)
            item = response.json()["items"][0] if response.status_code in (200, 201) else {}
            results.append({"name": name, "at": round(sent, 1), "status": response.status_code,
                            "document": (item.get("document") or {}).get("id"), "error": item.get("error")})
        except (requests.RequestException, ValueError, KeyError, IndexError) as exc:
            results.append({"name": name, "at": round(sent, 1), "status": 0, "document": None, "error": str(exc)})
        time.sleep(1.0)


def documents_settled(ids: list[int], timeout: float) -> dict[str, Any]:
    from kb.library.models import Document

    deadline = time.monotonic() + timeout
    while True:
        states = dict(Document.objects.filter(pk__in=ids).values_list("pk", "status"))
        if all(s in (Document.Status.READY, Document.Status.FAILED) for s in states.values()) or time.monotonic() > deadline:
            break
        time.sleep(1)
    reasons = list(Document.objects.filter(pk__in=ids, status=Document.Status.FAILED).values_list("failure_reason", flat=True))
    counts: dict[str, int] = {}
    for state in states.values():
        counts[state] = counts.get(state, 0) + 1
    return {"states": counts, "failed_reasons": reasons[:10]}


# The run ---------------------------------------------------------------------------------------


async def drive(cluster: Cluster, askers: list[Asker], questions: list[str], opts: argparse.Namespace,
                standby: dict[str, Any], token: str) -> dict[str, Any]:
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(len(askers) + 8, thread_name_prefix="drill"))
    base = f"http://127.0.0.1:{cluster.port}"
    warm: list[list[Ask]] = [[] for _ in askers[:4]]  # each process's first answer loads what it needs: not measured
    soon = time.monotonic() + 0.1
    await asyncio.gather(*(ask_loop(n, a, base, questions, soon, soon, opts.timeout, warm[n], [])
                           for n, a in enumerate(askers[:4])))
    t0 = time.monotonic()
    until = t0 + opts.seconds
    errors: list[str] = []
    events: list[dict[str, Any]] = []
    uploads: list[dict[str, Any]] = []
    counter = StandbyReads(standby["url"], t0)
    uploader = threading.Thread(target=upload_documents, args=(base, token, opts.eval_dir, opts.documents, t0 + 1, uploads),
                                daemon=True)
    uploader.start()
    per_asker: list[list[Ask]] = [[] for _ in askers]
    await asyncio.gather(
        schedule(cluster, opts, t0, standby, events),
        *(ask_loop(n, a, base, questions, t0, until, opts.timeout, per_asker[n], errors) for n, a in enumerate(askers)),
    )
    asks = [ask for mine in per_asker for ask in mine]
    reads = counter.stop()
    await asyncio.to_thread(uploader.join)
    documents = await asyncio.to_thread(documents_settled, [u["document"] for u in uploads if u["document"]], opts.ingest_wait)
    return {"asks": [asdict(a) for a in asks], "errors": errors, "events": events, "reads": reads, "uploads": uploads,
            "documents": documents, "elapsed_s": time.monotonic() - t0, "warm_up": [asdict(a) for w in warm for a in w]}


def leaks_of(asks: list[dict[str, Any]]) -> list[str]:
    """Each cited document the asker may not read, by the access rule as it stands after the run (no access
    changes during the drill; documents uploaded during it are readable by everyone)."""
    from django.contrib.auth.models import User

    from kb.library.access import visible_documents

    visible = {user.username: set(visible_documents(user).values_list("pk", flat=True))
               for user in User.objects.filter(username__in={a["asker"] for a in asks})}
    return [f"{a['asker']}: document {doc}" for a in asks for doc in a["cited"] if doc not in visible[a["asker"]]]


def run_drill(opts: argparse.Namespace) -> dict[str, Any]:
    from typing import cast

    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.db import connection

    from accounts.models import Scope
    from accounts.tokens import token_create
    from kb.runtime.embedded import start_standby, stop_pgdata

    call_command("migrate", interactive=False, verbosity=0)
    acl = json.loads((opts.eval_dir / "acl.json").read_text())
    questions = [json.loads(line)["query"] for line in (opts.eval_dir / "questions.jsonl").open() if line.strip()]
    groups = groups_create(acl)
    corpus_ingest(acl, groups, opts.eval_dir)
    askers = askers_create(acl, groups, opts.askers)
    admin = User.objects.create_superuser("drill-admin")
    _, token = token_create(user=admin, name="drill", scopes=[Scope.DOCUMENTS_READ, Scope.DOCUMENTS_WRITE])
    connection.close()
    cast(Any, connection).close_pool()

    primary = os.environ["DATABASE_URL"]
    pgdata = Path(tempfile.mkdtemp(prefix="kb-drill-")) / "standby"
    started = time.monotonic()
    service = start_standby(primary, pgdata)
    standby = {"primary": primary, "pgdata": pgdata, "url": service.url,
               "port": int(service.url.rsplit(":", 1)[1].split("/")[0]), "basebackup_s": time.monotonic() - started}
    # The Daphnes see every asker through the one HAProxy: trusted, it is exempt from the per-address cap.
    env = dict(os.environ, DATABASE_REPLICA_URL=service.url, KB_ANSWER_BACKEND="extractive", DEBUG="0",
               KB_ASKS_PER_MINUTE="0", KB_TRUSTED_PROXIES="127.0.0.1")
    cluster = Cluster(env)
    load_before = load_average()
    try:
        result = asyncio.run(drive(cluster, askers, questions, opts, standby, token))
    finally:
        cluster.stop()
        stop_pgdata(pgdata)
        shutil.rmtree(pgdata.parent, ignore_errors=True)
    return {**result, "leaks": leaks_of(result["asks"]), "askers": opts.askers, "seconds": opts.seconds, "load_before": load_before,
            "load_after": load_average(), "cpus": os.cpu_count(), "server_log": str(cluster.log),
            "basebackup_s": standby["basebackup_s"],
            "schedule": {k: getattr(opts, k) for k in ("kill_web_at", "kill_worker_at", "stop_replica_at", "start_replica_at")}}


# Report ---------------------------------------------------------------------------------------


def _phase(ask: dict[str, Any], schedule: dict[str, float]) -> str:
    if ask["began"] < schedule["kill_web_at"]:
        return "before"
    return "during" if ask["began"] < schedule["start_replica_at"] + 10 else "after"


def _standby_rate(reads: list[tuple[float, int | None]], start: float, end: float) -> float:
    """Transactions a second on the standby between two moments, from the samples where it answered."""
    inside = [(t, n) for t, n in reads if start <= t <= end and n is not None]
    if len(inside) < 2:
        return 0.0
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def _reads_back(reads: list[tuple[float, int | None]], started: float, usual: float) -> float:
    """Seconds from the standby's start until it serves retrieval again: the first second with at least
    half its `usual` rate of transactions."""
    after = [(t, n) for t, n in reads if t > started and n is not None]
    for (t0, n0), (t1, n1) in zip(after, after[1:], strict=False):
        if (n1 - n0) / (t1 - t0) >= usual / 2:
            return t1 - started
    return float("nan")


def report(result: dict[str, Any]) -> list[str]:
    asks, schedule = result["asks"], result["schedule"]
    ended = {k: sum(1 for a in asks if a["outcome"] == k) for k in ("done", "refused", "error", "lost", "post-failed")}
    leaks = len(result["leaks"])
    resumed = [ms for a in asks for ms in a["resumed_ms"]]
    lines = [
        f"scale-out drill: {result['askers']} askers for {result['seconds']} s through HAProxy, 2 Daphne, answer workers "
        f"2 + ingest 1, a hot standby for retrieval; {result['cpus']} CPUs; pg_basebackup {result['basebackup_s']:.1f} s",
        f"asks {len(asks)}: done {ended['done']}, refused {ended['refused']}, failed with a reason {ended['error']}, "
        f"LOST {ended['lost']} (target 0), POST failed {ended['post-failed']}",
        f"errors: {len(result['errors'])} (target 0); citations outside the asker's groups: {leaks} (target 0); "
        f"POST /api/ask retried after a proxy 502/503 or a broken connection: {sum(a['post_retries'] for a in asks)}",
        *(f"  {e}" for e in result["errors"][:8]),
        *(f"  LEAK {leak}" for leak in result["leaks"][:8]),
        *(f"  failed: {a['asker']} at {a['began']:.1f} s: {a['reason'][:150]}" for a in asks if a["outcome"] == "error"),
        *(f"  lost: {a['asker']} at {a['began']:.1f} s: {a['reason'][:150]}" for a in asks if a["outcome"] == "lost"),
        "events:",
    ]
    for event in result["events"]:
        lines.append(f"  {event['at']:>6.1f} s  {event['event']}")
        if "producing" in event:
            lines.append(f"           answers it was producing: {len(event['producing'])}; all ended after "
                         f"{event['ended_after_s'] if event['ended_after_s'] is None else round(event['ended_after_s'], 1)} s "
                         f"as {event['ended_as']}")
    lines.append(f"  sockets closed under a reader: {sum(a['reconnects'] > 0 for a in asks)} asks; the next event after "
                 f"the drop p50 {percentile(resumed, 50):.0f} ms, max {max(resumed, default=float('nan')):.0f} ms")
    lines.append("time to first token (POST -> first token or refused), asks a second, and transactions a second on the "
                 "standby (two per retrieval served there, one per retrieval its check sent to the primary):")
    bounds = {"before": (0, schedule["kill_web_at"]), "during": (schedule["kill_web_at"], schedule["start_replica_at"] + 10),
              "after": (schedule["start_replica_at"] + 10, result["elapsed_s"])}
    for phase, (start, end) in bounds.items():
        ttft = [a["ttft_ms"] for a in asks if _phase(a, schedule) == phase and a["ttft_ms"] is not None]
        asking = max(min(end, result["seconds"]) - start, 1)  # the askers stop asking at --seconds
        lines.append(f"  {phase:<7} {start:>5.0f}-{end:<5.0f} s: {len(ttft):>4} asks ({len(ttft) / asking:.1f}/s), "
                     f"p50 {percentile(ttft, 50):>6.0f} ms, p95 {percentile(ttft, 95):>6.0f} ms; standby "
                     f"{_standby_rate(result['reads'], start, end):.1f} transactions/s")
    stopped = schedule["stop_replica_at"]
    usual = _standby_rate(result["reads"], 0, schedule["kill_web_at"])
    down = [a for a in asks if stopped <= a["began"] < schedule["start_replica_at"]]
    lines.append(f"  while the standby was down: {len(down)} asks began, {sum(a['outcome'] == 'error' for a in down)} failed, "
                 f"time to first token p95 {percentile([a['ttft_ms'] for a in down if a['ttft_ms']], 95):.0f} ms; retrieval "
                 f"on the standby again {_reads_back(result['reads'], schedule['start_replica_at'], usual):.1f} s after it started")
    uploads = result["uploads"]
    lines.append(f"uploads through the proxy: {len(uploads)}, accepted {sum(1 for u in uploads if u['document'])}; "
                 f"document states at the end: {result['documents']['states']}")
    lines.extend(f"  failed: {reason}" for reason in result["documents"]["failed_reasons"])
    lines.extend(f"  upload refused: {u['name']}: HTTP {u['status']} {u['error']}" for u in uploads if not u["document"])
    lines.append(f"load average 1/5 min: {result['load_before']} before -> {result['load_after']} after")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--askers", type=int, default=50)
    parser.add_argument("--documents", type=int, default=40, help="files uploaded through the proxy during the drill")
    parser.add_argument("--seconds", type=float, default=100, help="how long the askers keep asking")
    parser.add_argument("--kill-web-at", type=float, default=20)
    parser.add_argument("--kill-worker-at", type=float, default=40)
    parser.add_argument("--stop-replica-at", type=float, default=60)
    parser.add_argument("--start-replica-at", type=float, default=75)
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds an answer may take before it counts as lost")
    parser.add_argument("--ingest-wait", type=float, default=300.0, help="seconds to wait after the askers for the uploads")
    parser.add_argument("--eval-dir", type=Path, default=DEV_DIR)
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    parser.add_argument("--inner", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.kill_web_at < args.kill_worker_at < args.stop_replica_at < args.start_replica_at < args.seconds:
        parser.error("the schedule must run in order, within --seconds")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.settings")
    os.environ["KB_ASKS_PER_MINUTE"] = "0"
    import django

    from kb.runtime.embedded import ensure_services

    ensure_services()
    django.setup()
    if args.inner:
        args.inner.write_text(json.dumps(run_drill(args), default=str))
        return
    extra = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k not in {"json", "inner", "eval_dir"}]
    result = run_in_scratch_database(SCRIPT, [*extra, f"--eval-dir={args.eval_dir.resolve()}"])
    for line in report(result):
        print(line)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    asks = result["asks"]
    failed = any(a["outcome"] == "lost" for a in asks) or result["errors"] or result["leaks"]
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
