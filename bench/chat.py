"""Chat benchmark: time to first token and total time, and memory over 1,000 answers.

    .venv/bin/python bench/chat.py [--answers 1000] [--json OUT]
    .venv/bin/python bench/chat.py --ttft [--questions 200] [--runs 3] [--json OUT]
    .venv/bin/python bench/chat.py --ttft --manuals [--questions 120] [--runs 3]

`--ttft` measures what a user waits for, end to end, on the development corpus
(../shared/eval): real Daphne and the two Celery workers exactly as `make run` starts them
(kb.runtime.launcher.workers), and for each question the time from `POST /api/ask` to the first
`token` event on the conversation's websocket. Each run asks the questions once with
nothing else running and once while `manage.py ingest` indexes the development corpus
again (into fresh folders, round after round, on the ingest worker); it prints p50/p95
of both per run, their medians over the runs, and the load average beside each.
`--manuals` asks about big manuals instead (bench/manuals.py: a 311-page PDF and five long
reStructuredText pages of a library reference, built once under var/bench-manuals).

Like `manage.py evaluate`, it never touches the live knowledge base: it creates a scratch
database on the same PostgreSQL server, runs itself again as a child process against it
(`--inner`: migrate, create the demo evaluation set's groups and users, ingest
demo/eval/corpus through the real pipeline, answer), and drops the database at the end.
Uploads go to a temporary folder. Answers are produced exactly as a worker produces them
(chat.services.answer_produce: retrieval, extractive backend, storing, publishing to the
channel layer), in-process, so the times are the producer's, without queueing.

Printed: time to first token and total time (p50/p95) over the demo questions, the
embedding of one short query in the same run (DESIGN's denominator), and the process RSS
after 100 and after 1,000 answers (growth must stay under 10%).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench._common import (  # noqa: E402 (after the path)
    DEV_DIR,
    EVAL_DIR,
    corpus_ingest,
    groups_create,
    percentile,
    reader_create,
    run_in_scratch_database,
)

SCRIPT = Path(__file__).resolve()
GROWTH_LIMIT = 0.10


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.settings")
    os.environ["KB_ANSWER_BACKEND"] = "extractive"
    os.environ["KB_ASKS_PER_MINUTE"] = "0"  # one reader asks every question: no per-user budget
    import django

    from kb.runtime.embedded import ensure_services

    ensure_services()  # an entry point, like manage.py: the settings only read where the servers are
    django.setup()


# Inner half: runs against the scratch database only ----------------------------------------


def _answer(reader: Any, question: str) -> Any:
    from chat.models import Message
    from chat.services import answer_produce, question_ask

    began = time.perf_counter()
    asked = question_ask(user=reader, question=question, enqueue=False)
    answer_produce(message_id=asked.answer.pk)
    wall_ms = (time.perf_counter() - began) * 1000
    return Message.objects.get(pk=asked.answer.pk), wall_ms


def run_inner(answers: int) -> dict[str, Any]:
    import psutil
    from django.core.management import call_command

    from kb.text import embedding

    call_command("migrate", interactive=False, verbosity=0)
    acl = json.loads((EVAL_DIR / "acl.json").read_text())
    questions = [json.loads(line)["query"] for line in (EVAL_DIR / "questions.jsonl").open() if line.strip()]
    groups = groups_create(acl)
    reader = reader_create(groups)
    started = time.perf_counter()
    documents = corpus_ingest(acl, groups)
    ingest_s = time.perf_counter() - started

    embed_ms = []
    for _ in range(30):
        began = time.perf_counter()
        embedding.embed(["where is the export button"])
        embed_ms.append((time.perf_counter() - began) * 1000)

    for question in questions[:5]:  # warm-up: models, caches, connections
        _answer(reader, question)
    first_token, total, wall, retrieval, refused = [], [], [], [], 0
    for question in questions:
        message, wall_ms = _answer(reader, question)
        wall.append(wall_ms)
        total.append(message.total_ms)
        retrieval.append(message.retrieval_ms)
        if message.status == "refused":
            refused += 1
        elif message.first_token_ms is not None:
            first_token.append(message.first_token_ms)

    process = psutil.Process()
    rss: dict[int, int] = {}
    for i in range(1, answers + 1):
        _answer(reader, questions[i % len(questions)])
        if i in (100, answers):
            rss[i] = process.memory_info().rss
    return {
        "documents": documents, "ingest_s": ingest_s, "questions": len(questions), "refused": refused,
        "first_token_ms": first_token, "total_ms": total, "wall_ms": wall, "retrieval_ms": retrieval,
        "embed_ms": embed_ms,
        "answers": answers, "rss_100": rss.get(100), "rss_end": rss.get(answers),
    }


def report(result: dict[str, Any]) -> list[str]:
    ft, total, embed = result["first_token_ms"], result["total_ms"], result["embed_ms"]
    growth = (result["rss_end"] - result["rss_100"]) / result["rss_100"]
    mib = 1024 * 1024
    embed_p50 = percentile(embed, 50)
    return [
        f"chat bench: {result['questions']} demo questions, extractive backend, {result['documents']} documents "
        f"ingested in {result['ingest_s']:.1f}s",
        f"answered {result['questions'] - result['refused']}, refused (NO ANSWER) {result['refused']}",
        f"time to first token: p50 {percentile(ft, 50):.1f} ms, p95 {percentile(ft, 95):.1f} ms "
        f"({percentile(ft, 50) / embed_p50:.1f}x one query embedding, p50 {embed_p50:.1f} ms in this run)",
        f"retrieval:           p50 {percentile(result['retrieval_ms'], 50):.1f} ms, "
        f"p95 {percentile(result['retrieval_ms'], 95):.1f} ms (search, gate, split sections reassembled)",
        f"total time:          p50 {percentile(total, 50):.1f} ms, p95 {percentile(total, 95):.1f} ms "
        f"(retrieval to done; with the ask and storing, wall p50 {percentile(result['wall_ms'], 50):.1f} ms, "
        f"p95 {percentile(result['wall_ms'], 95):.1f} ms)",
        f"RSS after 100 answers: {result['rss_100'] / mib:.1f} MiB; after {result['answers']}: "
        f"{result['rss_end'] / mib:.1f} MiB; growth {growth * 100:+.1f}% "
        f"({'OK' if growth < GROWTH_LIMIT else 'OVER'} the {GROWTH_LIMIT * 100:.0f}% limit)",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers", type=int, default=1000, help="answers for the memory run (RSS at 100 and at the end)")
    parser.add_argument("--ttft", action="store_true", help="end-to-end time to first token, quiet and during ingestion")
    parser.add_argument("--questions", type=int, default=200, help="questions per phase of a --ttft run")
    parser.add_argument("--runs", type=int, default=3, help="--ttft runs (medians over them are printed)")
    parser.add_argument("--eval-dir", type=Path, default=DEV_DIR, help="the set --ttft asks (default ../shared/eval)")
    parser.add_argument("--manuals", action="store_true",
                        help="--ttft on big PDF and reStructuredText manuals (bench/manuals.py) instead")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    parser.add_argument("--inner", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.answers < 100:
        parser.error("--answers must be at least 100")
    if args.ttft and (args.questions < 1 or args.runs < 1):
        parser.error("--questions and --runs must be at least 1")
    if args.manuals and not args.ttft:
        parser.error("--manuals is a corpus for --ttft")
    _setup()
    if args.inner:
        if args.ttft:
            from bench.ttft import run_ttft

            result = run_ttft(eval_dir=args.eval_dir, questions=args.questions, runs=args.runs)
        else:
            result = run_inner(args.answers)
        args.inner.write_text(json.dumps(result))
        return
    if args.ttft:
        if args.manuals:
            from bench.manuals import build
            from kb.runtime.embedded import var_dir

            args.eval_dir = build(var_dir() / "bench-manuals")
        result = run_in_scratch_database(SCRIPT, ["--ttft", "--questions", str(args.questions), "--runs", str(args.runs),
                                                  "--eval-dir", str(args.eval_dir.resolve())])
        from bench.ttft import report_ttft

        for line in report_ttft(result):
            print(line)
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))
        return
    result = run_in_scratch_database(SCRIPT, ["--answers", str(args.answers)])
    for line in report(result):
        print(line)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    growth = (result["rss_end"] - result["rss_100"]) / result["rss_100"]
    sys.exit(0 if growth < GROWTH_LIMIT else 1)


if __name__ == "__main__":
    main()
