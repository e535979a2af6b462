"""`bench/chat.py --ttft`: what an asker waits for, end to end, quiet and while documents are indexed.

Runs inside bench/chat.py's scratch database. Starts Daphne and the two workers exactly as
`make run` does (kb.runtime.launcher.workers: the answer worker with one torch thread per process,
the ingest worker niced), then per question: `POST /api/ask` with a Bearer token, open the
conversation's websocket with the session cookie (as the browser does once the POST
returns), and stop the clock at the first `token` event. Refused questions (NO ANSWER)
stream no token; they are counted, not timed. After each ingesting phase the documents it added
are deleted again (and the table vacuumed), so every quiet phase searches the development corpus.
Each phase prints the load average and the share of CPU time the host gave to other machines
(steal, /proc/stat): on a shared virtual machine that slows every process of a phase at once.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench._common import (
    ROOT,
    AppServer,
    corpus_ingest,
    cpu_counters,
    groups_create,
    load_average,
    percentile,
    reader_create,
    session_cookie,
    steal_share,
)


def _ask(base: str, token: str, cookie: str, question: str) -> dict[str, Any]:
    """Milliseconds from POST /api/ask to its reply (`post`), to the open websocket (`open`) and to the
    first token event (`ttft`, None when the answer was refused), and the answer's message id."""
    from websockets.sync.client import connect
    from websockets.typing import Origin

    began, wall = time.perf_counter(), time.time()
    request = urllib.request.Request(  # noqa: S310 (http://127.0.0.1, our own server)
        base + "/api/ask", data=json.dumps({"question": question}).encode(), method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (the same)
        asked = json.load(response)
    times: dict[str, Any] = {"message": asked["message"], "post": (time.perf_counter() - began) * 1000, "ttft": None,
                             "wall": wall}
    ws_url = base.replace("http://", "ws://") + asked["stream"]
    with connect(ws_url, origin=Origin(base), additional_headers={"Cookie": cookie}, open_timeout=30) as ws:
        times["open"] = (time.perf_counter() - began) * 1000
        while True:
            event = json.loads(ws.recv(timeout=60))
            if event.get("message") != asked["message"]:
                continue
            if event["type"] == "token":
                times["ttft"] = (time.perf_counter() - began) * 1000
                return times
            if event["type"] in ("refused", "done", "error"):
                return times


class _IngestLoad:
    """`manage.py ingest CORPUS --folder <fresh>` round after round, until stopped: the same documents
    each round, into a new folder, so each round is new work for the ingest worker."""

    def __init__(self, corpus: Path, env: dict[str, str]) -> None:
        self.corpus, self.env, self.rounds = corpus, env, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            folder = f"bench-load-{os.getpid()}-{self.rounds}"
            subprocess.run([sys.executable, "manage.py", "ingest", str(self.corpus), "--folder", folder],
                           cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
            self.rounds += 1

    def stop(self) -> None:
        """Stop starting rounds, wait for the round under way and for the ingest worker to index what was
        queued, then delete what the rounds added: the next quiet phase must be quiet, and search the
        development corpus again, not two or three copies of it."""
        from django.db import connection

        from kb.library.models import Document, Folder
        from kb.library.services import document_delete, folder_delete
        from search.stats import lexeme_stats_refresh

        self._stop.set()
        self._thread.join()
        deadline = time.monotonic() + 900
        busy = Document.objects.exclude(status__in=[Document.Status.READY, Document.Status.FAILED])
        while busy.exists() and time.monotonic() < deadline:
            time.sleep(1)
        for folder in Folder.objects.filter(name__startswith=f"bench-load-{os.getpid()}-"):
            for document in folder.documents.all():
                document_delete(document=document)
            folder_delete(folder=folder)
        lexeme_stats_refresh()
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE kb_chunk")  # what autovacuum does a minute after a deletion this large
        connection.close()


def _phase(base: str, token: str, cookie: str, questions: list[str]) -> dict[str, Any]:
    from chat.models import Message

    load_before, counters_before = load_average(), cpu_counters()
    asked = [_ask(base, token, cookie, question) for question in questions]
    timed = [a for a in asked if a["ttft"] is not None]
    # Where the time went, from the stored answers (same machine, same clock): until the question was
    # stored, waiting for a worker, the worker's own first token, and the rest (storing and delivering it).
    stored = {m.pk: m for m in Message.objects.filter(pk__in=[a["message"] for a in timed])}
    split: dict[str, list[float]] = {"stored_ms": [], "queued_ms": [], "worker_first_token_ms": [], "delivered_ms": []}
    for a in timed:
        m = stored[a["message"]]
        if m.started_at is None or m.first_token_ms is None:
            continue  # (stored with the finished answer: the last one may still be finishing)
        split["stored_ms"].append((m.created_at.timestamp() - a["wall"]) * 1000)
        split["queued_ms"].append((m.started_at - m.created_at).total_seconds() * 1000)
        split["worker_first_token_ms"].append(m.first_token_ms)
        split["delivered_ms"].append(a["ttft"] - (m.started_at.timestamp() - a["wall"]) * 1000 - m.first_token_ms)
    return {"ttft_ms": [a["ttft"] for a in timed], "refused": len(asked) - len(timed),
            "post_ms": [a["post"] for a in timed], "open_ms": [a["open"] for a in timed], **split,
            "load": f"{load_before} -> {load_average()}", "steal": steal_share(counters_before, cpu_counters())}


def run_ttft(*, eval_dir: Path, questions: int, runs: int) -> dict[str, Any]:
    from django.core.management import call_command
    from django.db import connection

    from accounts.tokens import token_create

    call_command("migrate", interactive=False, verbosity=0)
    acl = json.loads((eval_dir / "acl.json").read_text())
    asked = [json.loads(line)["query"] for line in (eval_dir / "questions.jsonl").open() if line.strip()]
    groups = groups_create(acl)
    reader = reader_create(groups)
    started = time.perf_counter()
    documents = corpus_ingest(acl, groups, eval_dir)
    ingest_s = time.perf_counter() - started
    _, token = token_create(user=reader)
    cookie = session_cookie(reader)
    connection.close()  # the children and the load get the database's connections

    env = dict(os.environ, KB_ANSWER_BACKEND="extractive", DEBUG="0")
    corpus = Path(tempfile.mkdtemp(prefix="kb-bench-corpus-"))
    shutil.copytree(eval_dir / "corpus", corpus, dirs_exist_ok=True)
    server = AppServer(env)
    base = f"http://127.0.0.1:{server.port}"
    try:
        sample = [asked[i % len(asked)] for i in range(questions)]
        for question in sample[:5]:  # warm-up: models, connections
            _ask(base, token, cookie, question)
        results = []
        for run in range(runs):
            quiet = _phase(base, token, cookie, sample)
            load = _IngestLoad(corpus, env)
            time.sleep(3)  # the first documents reach the ingest worker
            try:
                busy = _phase(base, token, cookie, sample)
            finally:
                load.stop()
            busy["ingest_rounds_started"] = load.rounds
            results.append({"run": run + 1, "quiet": quiet, "ingesting": busy})
            print(f"run {run + 1}/{runs} done", file=sys.stderr)
    finally:
        server.stop()
        shutil.rmtree(corpus, ignore_errors=True)
    return {"documents": documents, "ingest_s": ingest_s, "questions": questions, "runs": results,
            "cpus": os.cpu_count()}


def report_ttft(result: dict[str, Any]) -> list[str]:
    lines = [
        f"time to first token, POST /api/ask -> first token event on the websocket (extractive backend, Daphne + "
        f"make run's workers); {result['documents']} documents, {result['questions']} questions per phase, "
        f"{len(result['runs'])} run(s), {result['cpus']} CPUs; load average 1/5 min before -> after each phase",
    ]
    summary: dict[str, dict[str, list[float]]] = {"quiet": {"p50": [], "p95": []}, "ingesting": {"p50": [], "p95": []}}
    for run in result["runs"]:
        for phase in ("quiet", "ingesting"):
            figures = run[phase]
            p50, p95 = percentile(figures["ttft_ms"], 50), percentile(figures["ttft_ms"], 95)
            summary[phase]["p50"].append(p50)
            summary[phase]["p95"].append(p95)
            extra = f", ingest rounds {figures['ingest_rounds_started']}" if phase == "ingesting" else ""
            if figures.get("steal") is not None:
                extra += f"; CPU stolen by the host {figures['steal'] * 100:.1f}%"
            lines.append(f"  run {run['run']} {phase:<9}: p50 {p50:7.1f} ms  p95 {p95:7.1f} ms  "
                         f"({len(figures['ttft_ms'])} timed, {figures['refused']} refused{extra}; load {figures['load']})")
            lines.append("      where: " + ", ".join(
                f"{name} p50 {percentile(figures[key], 50):.1f}/p95 {percentile(figures[key], 95):.1f}"
                for name, key in (("POST reply", "post_ms"), ("socket open", "open_ms"),
                                  ("question stored", "stored_ms"), ("queued", "queued_ms"),
                                  ("worker to first token", "worker_first_token_ms"),
                                  ("then stored and delivered", "delivered_ms"))))
    for phase, target in (("quiet", 150), ("ingesting", 400)):
        p50, p95 = statistics.median(summary[phase]["p50"]), statistics.median(summary[phase]["p95"])
        lines.append(f"median over runs, {phase:<9}: p50 {p50:7.1f} ms  p95 {p95:7.1f} ms  (target p95 <= {target} ms: "
                     f"{'met' if p95 <= target else 'NOT met'})")
    return lines
