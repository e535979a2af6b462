"""What a /metrics scrape costs as the stored answers grow (issue 51, item 4).

    .venv/bin/python bench/metrics_scrape.py [--sizes 10000 100000 1000000] [--runs 3] [--json OUT]

In a scratch database (bench/_common.py), stored answers are added in bulk with SQL generate_series, each
after its question as chat.services stores them: 85% answered, 10% refused (both with a first-token and a
total time), 5% failed (no times), over the last 90 days, in conversations of 10 questions. At each size
(ascending, the table grows between them; VACUUM ANALYZE after each fill, as autovacuum would leave an
old table) it scrapes /metrics through Django's test client `--runs` times after one warm-up and prints
the median, the slowest, the queries a scrape ran and the load average; then what counting one finished
answer in Redis costs (the price of a flat scrape, paid once per answer). The scrape reads the real
embedded Redis too (kb_queue_depth, and the answer counters chat.answer_counters keeps there).

Nothing here touches the live knowledge base, and the answers inserted in SQL never pass through
chat.services, so the counters they would have bumped stay as they are: what is measured is what a
scrape costs, which is the point.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench._common import load_average, run_in_scratch_database  # noqa: E402 (after the path)

SCRIPT = Path(__file__).resolve()
TOKEN = "bench-metrics-token"  # noqa: S105 (a scratch database's scrape token)
PER_CONVERSATION = 10

FILL = """
WITH questions AS (
    INSERT INTO chat_message (conversation_id, role, text, status, intent, refusal_reason, error, backend, model,
                              notice, match, source_documents, unsupported, signals, job_id, rating, created_at,
                              worker)
    SELECT %(conversation)s + (g - %(first)s) / %(per)s, 'user', 'How do I export the shipments of week ' || g, 'done',
           '', '', '', '', '', '', '', '{}', '[]', '{}', gen_random_uuid(), 0,
           now() - interval '90 days' * (1 - g::float / %(last)s), ''
    FROM generate_series(%(first)s, %(last)s) AS g
    RETURNING id, conversation_id, created_at
), drawn AS (
    SELECT id, conversation_id, created_at, random() AS outcome, 150 + 2500 * random() ^ 3 AS first_ms,
           400 + 20000 * random() ^ 2 AS rest_ms
    FROM questions
)
INSERT INTO chat_message (conversation_id, role, question_id, text, status, intent, refusal_reason, error, backend,
                          model, notice, match, source_documents, unsupported, signals, job_id, rating, created_at,
                          started_at, finished_at, first_token_ms, total_ms, retrieval_ms, worker)
SELECT conversation_id, 'assistant', id, 'Open Shipments and choose Export [1].',
       CASE WHEN outcome < 0.85 THEN 'done' WHEN outcome < 0.95 THEN 'refused' ELSE 'failed' END,
       'question', '', CASE WHEN outcome < 0.95 THEN '' ELSE 'internal error' END, 'extractive', '', '', 'quoted',
       '{}', '[]', '{}', gen_random_uuid(), 0, created_at, created_at,
       created_at + make_interval(secs => (first_ms + rest_ms) / 1000),
       CASE WHEN outcome < 0.95 THEN first_ms END, CASE WHEN outcome < 0.95 THEN first_ms + rest_ms END,
       first_ms / 3, 'bench@host'
FROM drawn
"""


def _fill(first: int, last: int, owner_id: int) -> None:
    """Questions first..last and their answers, in new conversations of PER_CONVERSATION questions."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(max(id), 0) + 1 FROM chat_conversation")
        conversation = cursor.fetchone()[0]
        cursor.execute(
            "INSERT INTO chat_conversation (id, owner_id, title, created_at, updated_at) "
            "SELECT c, %s, 'Shipments', now(), now() FROM generate_series(%s, %s) AS c",
            [owner_id, conversation, conversation + (last - first) // PER_CONVERSATION])
        cursor.execute("SELECT setval(pg_get_serial_sequence('chat_conversation', 'id'), "
                       "(SELECT max(id) FROM chat_conversation))")
        cursor.execute(FILL, {"first": first, "last": last, "conversation": conversation,
                             "per": PER_CONVERSATION})


def _scrape(client: Any) -> tuple[float, int]:
    """One scrape's wall time (ms) and the queries it ran."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
        elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise SystemExit(f"/metrics answered {response.status_code}: {response.content[:200]!r}")
    return elapsed, len(queries)


def run_inner(sizes: list[int], runs: int) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    call_command("migrate", interactive=False, verbosity=0)
    setup_test_environment()  # the test client's host
    owner = User.objects.create_user("bench-asker")
    client = Client()
    rows, stored = [], 0
    for size in sorted(sizes):
        started = time.perf_counter()
        _fill(stored + 1, size, owner.pk)
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE chat_message")
            cursor.execute("SELECT pg_total_relation_size('chat_message')")
            table_bytes = cursor.fetchone()[0]
        fill_s = time.perf_counter() - started
        stored = size
        _scrape(client)  # warm-up: connections, the plan cache, the page cache
        timings = [_scrape(client) for _ in range(runs)]
        ms = [t for t, _ in timings]
        rows.append({"answers": size, "fill_s": round(fill_s, 1), "table_mib": round(table_bytes / 2**20),
                     "median_ms": round(statistics.median(ms), 2), "max_ms": round(max(ms), 2),
                     "queries": timings[-1][1], "load": load_average()})
        print(f"{size:>9} answers: scrape median {rows[-1]['median_ms']} ms (load {rows[-1]['load']})",
              file=sys.stderr)
    return {"runs": runs, "rows": rows, "count_us": _counting_cost()}


def _counting_cost(answers: int = 1000) -> float:
    """What the counters cost the answer instead: chat.answer_counters.answer_finished's median, in microseconds (the
    scratch database's hash is deleted afterwards)."""
    import redis
    from django.conf import settings

    from chat import answer_counters

    took = []
    for i in range(answers):
        started = time.perf_counter()
        answer_counters.answer_finished("done", first_token_ms=150.0 + i, total_ms=2000.0 + i)
        took.append((time.perf_counter() - started) * 1e6)
    redis.Redis.from_url(settings.REDIS_URL).delete(answer_counters.answers_key())
    return round(statistics.median(took), 1)


def report(result: dict[str, Any]) -> list[str]:
    lines = [f"/metrics scrape, median of {result['runs']} after a warm-up", "",
             "| stored answers | chat_message (MiB) | scrape median (ms) | slowest (ms) | queries | load (1/5 min) |",
             "| ---: | ---: | ---: | ---: | ---: | --- |"]
    for row in result["rows"]:
        lines.append(f"| {row['answers']:,} | {row['table_mib']} | {row['median_ms']} | {row['max_ms']} "
                     f"| {row['queries']} | {row['load']} |")
    lines += ["", f"Counting a finished answer (chat.answer_counters.answer_finished, median of 1,000): {result['count_us']} µs"]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000],
                        help="stored answers at which to scrape (the table grows from one to the next)")
    parser.add_argument("--runs", type=int, default=3, help="timed scrapes at each size (the median is printed)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--inner", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.runs < 1 or min(args.sizes) < 1:
        parser.error("--runs and every --sizes must be at least 1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.settings")
    os.environ["KB_METRICS_TOKEN"] = TOKEN
    import django

    if args.inner:
        django.setup()
        args.inner.write_text(json.dumps(run_inner(args.sizes, args.runs)))
        return
    from kb.runtime.embedded import ensure_services

    ensure_services()  # an entry point, like manage.py: the settings only read where the servers are
    django.setup()
    result = run_in_scratch_database(SCRIPT, ["--sizes", *map(str, args.sizes), "--runs", str(args.runs)])
    print("\n".join(report(result)))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
