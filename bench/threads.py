"""Query embedding latency beside a busy ingest encoder, for the answer worker's torch threads.

    .venv/bin/python bench/threads.py [--queries 100] [--runs 3]

For each setting of the answer process (1 or 2 torch threads) it embeds the development
questions one by one, first alone, then while another process encodes chunk texts in a loop
the way the ingest worker does (all cores, niced by 10, OMP_WAIT_POLICY=PASSIVE, as
kb.runtime.launcher starts it). Each setting runs in a fresh process, since torch's thread count
is fixed when torch is imported. Prints p50/p95 per setting, medians over the runs, with
the load average beside each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = ROOT.parent / "shared" / "eval" / "questions.jsonl"


def _child_env(threads: int | None) -> dict[str, str]:
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", PYTHONPATH=str(ROOT), DJANGO_SETTINGS_MODULE="kb.settings")
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def encoder_loop() -> None:
    """The ingest worker's work: encode batches of chunk-sized texts until killed."""
    import django

    from kb.runtime.embedded import ensure_services

    ensure_services()  # an entry point, like manage.py: the settings only read where the servers are
    django.setup()
    from kb.text import embedding

    texts = [line.strip() * 6 for line in QUESTIONS.open()][:64]  # ~150-word-piece texts
    while True:
        embedding.embed_with_pieces(texts)


def query_times(count: int) -> None:
    import django

    from kb.runtime.embedded import ensure_services

    ensure_services()  # an entry point, like manage.py: the settings only read where the servers are
    django.setup()
    import torch

    from kb.text import embedding

    questions = [json.loads(line)["query"] for line in QUESTIONS.open()][:count]
    for q in questions[:5]:
        embedding.embed_query(q)
    times = []
    for q in questions:
        started = time.perf_counter()
        embedding.embed_query(q)
        times.append((time.perf_counter() - started) * 1000)
    print(json.dumps({"threads": torch.get_num_threads(), "times": times}))


def measure(threads: int, busy: bool, count: int) -> tuple[list[float], str]:
    background = None
    if busy:
        background = subprocess.Popen([sys.executable, __file__, "--encoder-loop"], env=_child_env(None),
                                      preexec_fn=lambda: os.nice(10))
        time.sleep(15)  # the model is loaded and encoding
    try:
        out = subprocess.run([sys.executable, __file__, "--query-times", str(count)], env=_child_env(threads),
                             capture_output=True, text=True, check=True).stdout
    finally:
        if background is not None:
            background.kill()
            background.wait()
    one, five, _ = os.getloadavg()
    return json.loads(out.strip().splitlines()[-1])["times"], f"load {one:.2f}/{five:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--encoder-loop", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--query-times", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.encoder_loop:
        encoder_loop()
        return
    if args.query_times:
        query_times(args.query_times)
        return
    print(f"query embedding, {args.queries} questions, {os.cpu_count()} CPUs, median of {args.runs} runs")
    for threads in (1, 2):
        for busy in (False, True):
            p50s, p95s, loads = [], [], []
            for _ in range(args.runs):
                times, load = measure(threads, busy, args.queries)
                p50s.append(statistics.median(times))
                p95s.append(sorted(times)[int(0.95 * (len(times) - 1))])
                loads.append(load)
            print(f"  {threads} thread(s), {'beside a busy ingest encoder' if busy else 'alone':<28}: "
                  f"p50 {statistics.median(p50s):6.1f} ms  p95 {statistics.median(p95s):6.1f} ms  ({' · '.join(loads)})")


if __name__ == "__main__":
    main()
