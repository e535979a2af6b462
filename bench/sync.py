"""Sources kept in sync (issue 27): a full first sync, an incremental one, and index lag on a schedule.

    .venv/bin/python bench/sync.py [--files 1000] [--runs 3] [--kinds folder git] [--intervals 3]
                                   [--changes 6] [--json OUT]

Each run builds a source of `--files` generated documents (seeded; Markdown, one in five HTML),
each a title and three sections of prose written from word lists and sentence templates, so
editing one paragraph changes one chunk. For each kind (a folder on disk; a Git repository
cloned over file://) it times the first sync and then a sync after 1% of the files had one
paragraph rewritten (kb.library.sources.sync.source_sync, the job's body, in this process), and counts
the chunks embedded by the second against all the source's chunks.

Then index lag on the real schedule path: the ingest worker and Celery beat exactly as `make run`
starts them (kb.runtime.launcher), the source scheduled `every` 60 s. Over `--intervals` minutes,
`--changes` a minute are made at random times (a file rewritten in place, or a Git commit), each
adding a sentence found nowhere else; a reader's search (search.retrieval.hybrid_search, as the
search page runs it) is polled every 0.5 s, and each change's lag is from the moment it was
written or committed to the first search that returns its sentence. The starts of the scheduled
runs are recorded too: with a minute between beat's ticks they should be a minute apart.

Like the other benchmarks it never touches the live knowledge base: a scratch database on the
same PostgreSQL server (bench/_common.py), and its own Redis database number for the broker, so
no worker of a running `make run` takes its jobs. Prints each run's figures with the load
average, and the medians over the runs; exits non-zero when a median misses the issue's targets
(incremental >= 20x faster than the first sync, <= 2% of the chunks re-embedded).
"""

from __future__ import annotations

import argparse
import html
import os
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench._common import AppServer, load_average, own_servers_main, percentile  # noqa: E402 (after the path)

SCRIPT = Path(__file__).resolve()
EVERY = 60  # seconds: the source's schedule, and beat's tick (kb/celery.py)
POLL = 0.5  # seconds between a reader's searches for the changes not yet found
MIN_RATIO, MAX_SHARE = 20.0, 0.02  # the targets

# --------------------------------------------------------------------------- generated documents

SUBJECTS = ("Goods receipt", "Visitor registration", "Expense claims", "Server patching", "Fire drills",
            "Vendor onboarding", "Cold storage", "Laptop returns", "Contract renewals", "Quality sampling",
            "Fleet maintenance", "Holiday planning", "Data backups", "Customer refunds", "Stock counts",
            "Badge access", "Waste collection", "Press enquiries", "Spare parts", "Night shifts")
PLACES = ("the Leeds depot", "the Porto office", "the north warehouse", "the Lyon laboratory", "the harbour site",
          "the Graz plant", "the Aarhus branch", "the Bilbao yard", "the head office", "the Tampere workshop",
          "the Utrecht call centre", "the Brno data centre")
HEADINGS = ("Scope", "Responsibilities", "Daily routine", "Exceptions", "Records", "Escalation", "Approvals",
            "Tools and access", "Costs", "Safety", "Handover", "Audits")
ROLES = ("The shift lead", "The duty engineer", "A site coordinator", "The quality officer", "The payroll clerk",
         "Each project manager", "The night supervisor", "The facilities team", "The team assistant",
         "The warehouse planner", "The security desk", "The finance controller")
OBJECTS = ("delivery note", "calibration log", "access badge", "supplier invoice", "maintenance ticket",
           "travel request", "incident report", "purchase order", "safety checklist", "shipping manifest",
           "cooling schedule", "backup tape", "visitor pass", "spare parts list", "training record")
TIMINGS = ("every Monday before nine", "within two working days", "at the end of each shift",
           "before the monthly close", "on the first Friday of the quarter", "as soon as the truck is unloaded",
           "before anyone leaves the site", "once a week, usually on Thursday", "no later than noon")
CONSEQUENCES = ("nothing is paid before that", "the auditors sample a few of them each year",
                "late items are listed in the weekly report", "the planner can then book the next slot",
                "a missing one blocks the handover", "the record is kept with the original receipt")
CONDITIONS = ("the seals are intact", "the counts match the order", "two people have signed",
              "the temperature stayed in range", "the cost centre is filled in", "the old copy was destroyed")
PROBLEMS = ("a pallet arrives damaged", "the system is down", "a supplier misses the deadline",
            "someone loses a badge", "the numbers do not add up", "a visitor arrives unannounced")
ACTIONS = ("write it on the paper form", "stop the line", "photograph the label", "call the duty phone",
           "set the item aside in the blue cage", "open a ticket in the service portal")
NOTIFIES = ("tell the team lead the same day", "copy the regional manager", "note it in the shift book",
            "inform the customer desk before noon")
STORES = ("the shared drive", "the locked cabinet in room 4", "the document system", "the planner's binder",
          "the archive boxes in the basement")
DURATIONS = ("seven years", "two years", "eighteen months", "until the next audit", "ten years")
NOTES = ("copies on laptops are not allowed", "the index is updated every Friday",
         "ask the archive team for anything older", "scans count as originals")
MONTHS = ("January", "March", "April", "June", "September", "November")
PEOPLE = ("Ines Duarte", "Tomas Novak", "Aoife Byrne", "Kenji Mori", "Leila Haddad", "Marek Wojcik", "Sofia Lind")


def _sentence(rng: random.Random) -> str:
    pick = rng.choice
    templates = (
        lambda: f"{pick(ROLES)} files the {pick(OBJECTS)} {pick(TIMINGS)}, and {pick(CONSEQUENCES)}.",
        lambda: f"Before the {pick(OBJECTS)} is closed, {pick(ROLES).lower()} checks that {pick(CONDITIONS)}.",
        lambda: f"If {pick(PROBLEMS)}, {pick(ACTIONS)} and {pick(NOTIFIES)}.",
        lambda: f"The {pick(OBJECTS)} is kept in {pick(STORES)} for {pick(DURATIONS)}; {pick(NOTES)}.",
        lambda: f"At {pick(PLACES)} the {pick(OBJECTS)} is handled {pick(TIMINGS)} unless {pick(PROBLEMS)}.",
    )
    return pick(templates)()


def _paragraph(rng: random.Random) -> str:
    return " ".join(_sentence(rng) for _ in range(rng.randint(4, 5)))


@dataclass
class Doc:
    """One generated file: a title and (heading, paragraph) sections, written as Markdown or HTML."""

    path: str
    title: str
    sections: list[tuple[str, str]]

    def render(self) -> str:
        if self.path.endswith(".html"):
            body = "".join(f"<h2>{html.escape(h)}</h2>\n<p>{html.escape(p)}</p>\n" for h, p in self.sections)
            return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(self.title)}'
                    f"</title></head>\n<body><h1>{html.escape(self.title)}</h1>\n{body}</body></html>\n")
        return f"# {self.title}\n\n" + "".join(f"## {h}\n\n{p}\n\n" for h, p in self.sections)


def corpus(rng: random.Random, files: int) -> list[Doc]:
    docs = []
    for n in range(files):
        subject, place = rng.choice(SUBJECTS), rng.choice(PLACES)
        suffix = ".html" if n % 5 == 4 else ".md"
        path = f"{subject.lower().replace(' ', '-')}/{n:05d}-{place.split()[-2].lower()}{suffix}"
        headings = rng.sample(HEADINGS, 3)
        docs.append(Doc(path, f"{subject} at {place[4:].title()}, note {n}", [(h, _paragraph(rng)) for h in headings]))
    return docs


def rewrite(doc: Doc, rng: random.Random, code: str) -> str:
    """Rewrite one paragraph of `doc` with a sentence found nowhere else; returns that sentence."""
    sentence = (f"From {rng.choice(MONTHS)} on, the {rng.choice(OBJECTS)} for {rng.choice(PLACES)} is approved by "
                f"{rng.choice(PEOPLE)} under reference {code}.")
    at = rng.randrange(len(doc.sections))
    doc.sections[at] = (doc.sections[at][0], f"{_paragraph(rng)} {sentence}")
    return sentence


# --------------------------------------------------------------------------- the source on disk


def _git(*args: str, cwd: Path) -> None:
    env = dict(os.environ, GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="bench@example.com", GIT_COMMITTER_NAME="bench",
               GIT_COMMITTER_EMAIL="bench@example.com", GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_SYSTEM="/dev/null")
    subprocess.run([shutil.which("git") or "git", *args], cwd=cwd, env=env, check=True, capture_output=True)


class Place:
    """Where the source's files are: a directory, or the work tree of a Git repository. `write` returns
    once the change is there for a sync to see: the file replaced whole (never half-written), or committed."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind, self.root = kind, root
        root.mkdir(parents=True)
        if kind == "git":
            _git("init", "-q", "-b", "main", cwd=root)

    @property
    def location(self) -> str:
        return f"file://{self.root}" if self.kind == "git" else str(self.root)

    def write(self, docs: list[Doc], message: str) -> None:
        for doc in docs:
            path = self.root / doc.path
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f".{path.name}.part")  # hidden: a listing never selects it
            partial.write_text(doc.render(), encoding="utf-8")
            os.replace(partial, path)
        if self.kind == "git":
            _git("add", "-A", cwd=self.root)
            _git("commit", "-q", "-m", message, cwd=self.root)


# --------------------------------------------------------------------------- inner half (scratch database)


class Scheduler(AppServer):
    """The ingest worker and Celery beat, with make run's argv and environment (kb.runtime.launcher)."""

    def __init__(self, env: dict[str, str], var: Path) -> None:
        from kb import queues
        from kb.runtime.launcher import beat_argv, workers

        self.log = var / "scheduler.log"
        self.children = []
        ingest = next(worker for worker in workers() if worker.queue == queues.INGEST)
        self._spawn(ingest.argv(), {**env, **ingest.env}, ingest.niceness)
        self._spawn(beat_argv(var), env)
        self._wait_for_workers(1)


@dataclass
class Lag:
    """Changes made at random times while the source runs on its schedule, and when search first found each."""

    committed: dict[str, tuple[str, float]] = field(default_factory=dict)  # code -> (sentence, monotonic time)
    found: dict[str, float] = field(default_factory=dict)
    run_starts: set[Any] = field(default_factory=set)
    searches: int = 0

    def poll(self, reader: Any, source_id: int, stop: threading.Event) -> None:
        """Every POLL seconds: for each change not yet found whose text is stored, the reader's search."""
        from django.db import connection

        from kb.library.models import Chunk, Source
        from search.retrieval import hybrid_search

        try:
            while not stop.is_set():
                tick = time.monotonic()
                self.run_starts.add(Source.objects.filter(pk=source_id).values_list("last_started_at", flat=True).get())
                pending = {code: sentence for code, (sentence, _) in list(self.committed.items()) if code not in self.found}
                # One look at the stored text (a scan of the source's chunks) picks the changes worth a search.
                stored = " ".join(Chunk.objects.filter(document__source_id=source_id, content__regex="|".join(pending))
                                  .values_list("content", flat=True)) if pending else ""
                for code, sentence in pending.items():
                    if code not in stored:
                        continue
                    self.searches += 1
                    if any(code in hit.content for hit in hybrid_search(user=reader, query=sentence).hits):
                        self.found[code] = time.monotonic()
                stop.wait(max(0.0, POLL - (time.monotonic() - tick)))
        finally:
            connection.close()

    def seconds(self) -> list[float]:
        return sorted(self.found[code] - at for code, (_, at) in self.committed.items() if code in self.found)


def _lag(place: Place, docs: list[Doc], source: Any, reader: Any, rng: random.Random, *, intervals: int,
         changes: int, tag: str) -> dict[str, Any]:
    from kb.library.models import Source
    from kb.library.sources.schedule import sources_running

    lag = Lag()
    Source.objects.filter(pk=source.pk).update(every=EVERY)
    stop = threading.Event()
    poller = threading.Thread(target=lag.poll, args=(reader, source.pk, stop), daemon=True)
    poller.start()
    load = load_average()
    began = time.monotonic()
    targets = rng.sample(docs, intervals * changes)  # one change per file: none overwrites another unseen
    for n, (at, doc) in enumerate(zip(sorted(rng.uniform(0, intervals * EVERY) for _ in targets), targets, strict=True)):
        time.sleep(max(0.0, began + at - time.monotonic()))
        code = f"{tag}L{n:03d}"
        sentence = rewrite(doc, rng, code)
        place.write([doc], f"change {code}")
        lag.committed[code] = (sentence, time.monotonic())
    deadline = time.monotonic() + 4 * EVERY  # two missed ticks and a slow run
    while len(lag.found) < len(lag.committed) and time.monotonic() < deadline:
        time.sleep(POLL)
    stop.set()
    poller.join()
    Source.objects.filter(pk=source.pk).update(every=None)
    while source.pk in sources_running():  # a scheduled run still going would slow the next run's first sync
        time.sleep(1)
    starts = sorted(t for t in lag.run_starts if t is not None)
    gaps = [(b - a).total_seconds() for a, b in zip(starts, starts[1:], strict=False)]
    seconds = lag.seconds()
    return {"changes": len(lag.committed), "found": len(seconds), "lag_s": seconds, "searches": lag.searches,
            "p50": percentile(seconds, 50), "p95": percentile(seconds, 95), "run_gaps_s": gaps,
            "load": f"{load} → {load_average()}"}


def one_run(kind: str, run: int, tmp: Path, reader: Any, args: argparse.Namespace) -> dict[str, Any]:
    from kb.library.models import Chunk, Folder, Source
    from kb.library.sources.sync import source_sync
    from search.retrieval import hybrid_search

    rng = random.Random(f"{args.seed}-{run}")  # noqa: S311 (generated prose, not secrets)
    docs = corpus(rng, args.files)
    place = Place(kind, tmp / f"{kind}-{run}")
    place.write(docs, "the handbook")
    folder = Folder.objects.create(name=f"bench {kind} {run}", public=True)
    source = Source.objects.create(name=f"bench-{kind}-{run}", kind=kind, location=place.location, folder=folder)

    load = load_average()
    started = time.perf_counter()
    first = source_sync(source)
    first_s = time.perf_counter() - started
    first_load = f"{load} → {load_average()}"
    if first.status != "ok" or first.failed:
        raise SystemExit(f"{kind} run {run}: the first sync did not index everything: {first.summary()} {first.failures[:3]}")
    chunks = Chunk.objects.filter(document__source=source).count()

    edited = rng.sample(docs, max(1, round(args.files * args.edit_share)))
    tag = f"{kind[0].upper()}{run}X"
    sentences = {f"{tag}{n:04d}": rewrite(doc, rng, f"{tag}{n:04d}") for n, doc in enumerate(edited)}
    place.write(edited, "edit one paragraph each")
    load = load_average()
    started = time.perf_counter()
    second = source_sync(source)
    second_s = time.perf_counter() - started
    second_load = f"{load} → {load_average()}"
    if second.status != "ok" or second.changed != len(edited) or second.new or second.deleted:
        raise SystemExit(f"{kind} run {run}: the incremental sync was not {len(edited)} changed files: {second.summary()}")
    missing = [code for code, sentence in sentences.items()
               if not any(code in hit.content for hit in hybrid_search(user=reader, query=sentence).hits)]
    if missing:
        raise SystemExit(f"{kind} run {run}: search does not return the edited sentences {missing}")

    lag = _lag(place, docs, source, reader, rng, intervals=args.intervals, changes=args.changes, tag=tag)
    return {"kind": kind, "run": run, "files": args.files, "chunks": chunks, "first_s": first_s, "first_load": first_load,
            "edited": len(edited), "incremental_s": second_s, "incremental_load": second_load,
            "ratio": first_s / second_s, "reembedded": second.chunks_embedded, "share": second.chunks_embedded / chunks,
            "lag": lag}


def run_inner(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """`tmp` is this process's VAR_DIR and its children's (Git clones, beat's schedule file)."""
    from django.contrib.auth.models import User
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)
    reader = User.objects.create_user("bench-reader")  # an employee with no group: the folders are public
    results: list[dict[str, Any]] = []
    scheduler = Scheduler(dict(os.environ), tmp)
    try:
        for run in range(1, args.runs + 1):
            for kind in args.kinds:
                result = one_run(kind, run, tmp, reader, args)
                print("  " + line(result), file=sys.stderr)
                results.append(result)
    finally:
        scheduler.stop()
    return {"runs": results}


# --------------------------------------------------------------------------- outer half: report


def line(r: dict[str, Any]) -> str:
    lag = r["lag"]
    gaps = ", ".join(f"{g:.0f}" for g in lag["run_gaps_s"]) or "-"
    return (f"run {r['run']} {r['kind']}: {r['files']} files, {r['chunks']} chunks · first sync {r['first_s']:.1f} s "
            f"(load {r['first_load']}) · {r['edited']} files edited: incremental {r['incremental_s']:.2f} s "
            f"(load {r['incremental_load']}), {r['ratio']:.0f}x faster · re-embedded {r['reembedded']} of {r['chunks']} "
            f"chunks ({r['share']:.2%}) · index lag over {lag['found']} of {lag['changes']} changes: "
            f"p50 {lag['p50']:.1f} s, p95 {lag['p95']:.1f} s (load {lag['load']}; scheduled runs {gaps} s apart)")


def report(result: dict[str, Any]) -> tuple[list[str], bool]:
    lines, met = [], True
    for kind in dict.fromkeys(r["kind"] for r in result["runs"]):
        runs = [r for r in result["runs"] if r["kind"] == kind]
        lines += [line(r) for r in runs]
        median = {key: statistics.median(r[key] for r in runs) for key in ("first_s", "incremental_s", "ratio", "share")}
        p50, p95 = (statistics.median(r["lag"][key] for r in runs) for key in ("p50", "p95"))
        unfound = sum(r["lag"]["changes"] - r["lag"]["found"] for r in runs)
        ok = median["ratio"] >= MIN_RATIO and median["share"] <= MAX_SHARE and not unfound
        met = met and ok
        lines.append(
            f"median of {len(runs)} run(s), {kind}: first sync {median['first_s']:.1f} s, incremental "
            f"{median['incremental_s']:.2f} s, {median['ratio']:.0f}x faster (target >= {MIN_RATIO:.0f}x), re-embedded "
            f"{median['share']:.2%} of the chunks (target <= {MAX_SHARE:.0%}); index lag with a {EVERY} s schedule "
            f"p50 {p50:.1f} s, p95 {p95:.1f} s" + (f"; {unfound} change(s) never found" if unfound else "")
            + ("" if ok else "  MISSED"))
    return lines, met


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1000, help="documents in the source")
    parser.add_argument("--edit-share", type=float, default=0.01, help="share of the files edited before the second sync")
    parser.add_argument("--runs", type=int, default=3, help="runs (medians over them are printed)")
    parser.add_argument("--kinds", nargs="+", choices=("folder", "git"), default=["folder", "git"])
    parser.add_argument("--intervals", type=int, default=3, help="minutes of changes for the index lag")
    parser.add_argument("--changes", type=int, default=6, help="changes per minute for the index lag")
    parser.add_argument("--seed", default="kb-sync")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    parser.add_argument("--inner", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.runs < 1 or args.intervals < 1 or args.changes < 1 or args.files < args.intervals * args.changes:
        parser.error("--runs, --intervals and --changes must be at least 1, and --files at least intervals x changes")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.settings")
    extra = ["--files", str(args.files), "--edit-share", str(args.edit_share), "--runs", str(args.runs), "--kinds",
             *args.kinds, "--intervals", str(args.intervals), "--changes", str(args.changes), "--seed", args.seed]
    own_servers_main(script=SCRIPT, inner=args.inner, extra=extra, prefix="kb-bench-sync-",
                     run_inner=lambda tmp: run_inner(args, tmp), report=report, json_out=args.json)


if __name__ == "__main__":
    main()
