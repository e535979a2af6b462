"""Index lag of a watched folder (issue 51 item 3): from a file's save to a reader's search finding it.

    .venv/bin/python bench/watch_lag.py [--files 50] [--saves 20] [--runs 3] [--gap 1 10] [--json OUT]

Each run writes a directory of `--files` generated documents (bench/sync.py's corpus), adds it as a
folder source with `watch` on and no schedule, and lets the watcher's catch-up run index it. Then
`--saves` saves at random gaps (uniform in `--gap` seconds), each one file rewritten whole as editors save
(a hidden temporary file renamed over it, bench/sync.py's Place) with a sentence found nowhere else. A
reader's search (search.retrieval.hybrid_search) is polled every 0.5 s (bench/sync.py's Lag), and each
save's lag runs from the rename to the first search that returns its sentence.

The app's processes as `make run` starts them (kb.runtime.launcher): the ingest worker and
`manage.py watch_sources`, with the default debounce (KB_SOURCE_WATCH_DEBOUNCE). Like the other
benchmarks it never touches the live knowledge base: a scratch database, its own VAR_DIR and Redis
database number. Prints each run's p50/p95 with the load average and the medians over the runs; exits
non-zero when the median p95 misses the issue's target (30 s) or a save was never found.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench._common import Processes, lag_report, load_average, own_servers_main, percentile  # noqa: E402 (after the path)
from bench.sync import POLL, Lag, Place, corpus, rewrite  # noqa: E402

SCRIPT = Path(__file__).resolve()
TARGET_P95 = 30.0  # seconds, the target


class WatchedApp(Processes):
    """The ingest worker and the folder watcher, with make run's argv and environment (kb.runtime.launcher)."""

    def __init__(self, env: dict[str, str]) -> None:
        from kb import queues
        from kb.runtime.launcher import watcher_argv, workers

        super().__init__()
        ingest = next(worker for worker in workers() if worker.queue == queues.INGEST)
        self._spawn(ingest.argv(), {**env, **ingest.env}, ingest.niceness)
        self._spawn(watcher_argv(), env)
        self._wait_for_workers(1)


def one_run(run: int, shares: Path, reader: Any, args: argparse.Namespace) -> dict[str, Any]:
    from kb.library.models import Folder, Source, SourcePush

    rng = random.Random(f"{args.seed}-{run}")  # noqa: S311 (generated prose and timings, not secrets)
    docs = corpus(rng, args.files)
    place = Place("folder", shares / f"run-{run}")
    place.write(docs, "the handbook")
    folder = Folder.objects.create(name=f"bench watch {run}", public=True)
    source = Source.objects.create(name=f"bench-watch-{run}", kind="folder", location=place.location, folder=folder,
                                   watch=True)
    deadline = time.monotonic() + 600
    while Source.objects.get(pk=source.pk).last_status != Source.RunStatus.OK:  # the catch-up run indexes it
        if time.monotonic() > deadline:
            raise SystemExit(f"run {run}: the watcher's first run did not index the folder within 600 s")
        time.sleep(1)

    caught_up = Source.objects.filter(pk=source.pk).values_list("last_started_at", flat=True).get()
    lag = Lag()
    stop = threading.Event()
    poller = threading.Thread(target=lag.poll, args=(reader, source.pk, stop), daemon=True)
    poller.start()
    load = load_average()
    for n, doc in enumerate(rng.sample(docs, args.saves)):  # one save per file: none overwrites another unseen
        time.sleep(rng.uniform(*args.gap))
        code = f"W{run}S{n:03d}"
        sentence = rewrite(doc, rng, code)
        place.write([doc], code)
        lag.committed[code] = (sentence, time.monotonic())
    deadline = time.monotonic() + 4 * TARGET_P95
    while len(lag.found) < len(lag.committed) and time.monotonic() < deadline:
        time.sleep(POLL)
    stop.set()
    poller.join()
    Source.objects.filter(pk=source.pk).update(watch=False)
    seconds = lag.seconds()
    runs = len({t for t in lag.run_starts if t is not None} - {caught_up})
    return {"run": run, "files": args.files, "saves": len(lag.committed), "found": len(seconds), "lag_s": seconds,
            "p50": percentile(seconds, 50), "p95": percentile(seconds, 95), "max": max(seconds, default=float("nan")),
            "syncs": runs, "pushes": SourcePush.objects.filter(source=source).count(),
            "load": f"{load} → {load_average()}"}


def run_inner(args: argparse.Namespace) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)
    reader = User.objects.create_user("bench-reader")  # an employee with no group: the folders are public
    results = []
    # Not under VAR_DIR: no source may be in the server's own data (kb.library.sources.policy).
    with tempfile.TemporaryDirectory(prefix="kb-bench-watched-") as shares:
        app = WatchedApp({**os.environ, "KB_SOURCE_FOLDER_ROOTS": shares})
        try:
            for run in range(1, args.runs + 1):
                result = one_run(run, Path(shares), reader, args)
                print("  " + line(result), file=sys.stderr)
                results.append(result)
        finally:
            app.stop()
    return {"runs": results}


def line(r: dict[str, Any]) -> str:
    return (f"run {r['run']}: {r['found']} of {r['saves']} saves found in a folder of {r['files']} files · save → "
            f"searchable p50 {r['p50']:.1f} s, p95 {r['p95']:.1f} s, max {r['max']:.1f} s · {r['syncs']} runs "
            f"({r['pushes']} watched saves recorded) · load {r['load']}")


def report(result: dict[str, Any]) -> tuple[list[str], bool]:
    return lag_report(result["runs"], line, what="save", count="saves", target_p95=TARGET_P95)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=50, help="documents in the watched folder")
    parser.add_argument("--saves", type=int, default=20, help="saves per run")
    parser.add_argument("--runs", type=int, default=3, help="runs (medians over them are printed)")
    parser.add_argument("--gap", type=float, nargs=2, default=[1.0, 10.0], metavar=("MIN", "MAX"),
                        help="seconds between two saves, drawn uniformly")
    parser.add_argument("--seed", default="kb-watch")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    parser.add_argument("--inner", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.runs < 1 or args.saves < 1 or args.files < args.saves:
        parser.error("--runs and --saves must be at least 1, and --files at least --saves")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.settings")
    extra = ["--files", str(args.files), "--saves", str(args.saves), "--runs", str(args.runs), "--gap",
             *map(str, args.gap), "--seed", args.seed]
    own_servers_main(script=SCRIPT, inner=args.inner, extra=extra, prefix="kb-bench-watch-",
                     run_inner=lambda tmp: run_inner(args), report=report, json_out=args.json)


if __name__ == "__main__":
    main()
