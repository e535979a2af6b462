"""The multilingual space against today's MiniLM-only index: ingest throughput, query latency, bytes per chunk.

    .venv/bin/python bench/multilingual.py [CORPUS_DIR] [--runs 3] [--queries 60] [--english]
        (default corpus: lab/eval-multilingual/corpus, fetched by lab/eval-multilingual/fetch.py;
         questions: that set's questions.jsonl, both phrasings)

Runs in a scratch database on the knowledge base's PostgreSQL server (dropped at the end). Each run,
in the same process and on the same texts: ingests the corpus through the real pipeline with
KB_MULTILINGUAL off (today: MiniLM only) and times `hybrid_search` on the questions with the
multilingual list off, deletes it, then ingests it again with the space on (chunks also embedded by
multilingual-e5-small: those not in English, every one with --english) and times the questions with both
dense lists. Prints chunks/s, the
multilingual encoder's share of the ingest time, query p50/p95 and the embedding's share, and bytes per
chunk (the row's columns as stored, plus each HNSW index's share), each as the ratio new / today;
medians over the runs with the load average beside each run.
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
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.settings")
SET = ROOT / "lab" / "eval-multilingual"

from bench._common import load_average, percentile, rerun_in_scratch_database  # noqa: E402

# What a chunk stores besides its vectors: counted in both layouts (TOASTed values at their stored size).
COLUMNS = ("text", "content", "breadcrumb", "embedding", "late_vectors", "identifiers", "search", "acl")


def outer(corpus: Path, runs: int, queries: int, english: bool) -> int:
    command = [sys.executable, __file__, str(corpus), "--runs", str(runs), "--queries", str(queries)]
    return rerun_in_scratch_database(command + (["--english"] if english else []))


def _questions(limit: int) -> list[str]:
    lines = [json.loads(line) for line in (SET / "questions.jsonl").read_text().splitlines() if line.strip()]
    texts = [q[key] for q in lines for key in ("query", "ticket_query") if q.get(key)]
    return texts[:limit]


def _bytes_per_chunk(chunks: Any) -> dict[str, float]:
    """Mean stored bytes per chunk: the columns both layouts hold, the multilingual vector, and each HNSW
    index's size over the chunk count (the table holds only this run's chunks)."""
    from django.db import connection

    count = chunks.count()
    sizes = " + ".join(f"coalesce(pg_column_size({column}), 0)" for column in COLUMNS)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT avg({sizes}), avg(coalesce(pg_column_size(multilingual_embedding), 0)) "  # noqa: S608 (constant columns)
                       "FROM kb_chunk")
        row, multi = cursor.fetchone()
        cursor.execute("SELECT pg_relation_size('kb_chunk_embedding_hnsw'), pg_relation_size('kb_chunk_multilingual_hnsw')")
        dense_index, multi_index = cursor.fetchone()
    return {"row": float(row), "multilingual": float(multi), "dense_index": dense_index / max(count, 1),
            "multilingual_index": multi_index / max(count, 1)}


def _query_times(user: Any, questions: list[str], *, multi: bool) -> tuple[list[float], list[float]]:
    """Whole-retrieval and embedding milliseconds per question (each question's vectors not cached)."""
    from kb.text import embedding, multilingual
    from search.retrieval import SearchOptions, hybrid_search

    embedding.embed_query.cache_clear()
    multilingual.embed_query.cache_clear()
    options = SearchOptions(multilingual=multi)
    for question in questions[:3]:  # untimed: the first question traces the query encoder
        hybrid_search(user=user, query=f"{question} (warm-up)", options=options)
    totals, embeds = [], []
    for question in questions:
        result = hybrid_search(user=user, query=question, options=options)
        totals.append(result.timings_ms["total"])
        embeds.append(result.timings_ms["embed"])
    return totals, embeds


def _index(corpus: Path, run: int, *, multi: bool, english: bool = False) -> dict[str, Any]:
    """Ingest the corpus into a fresh folder with the space on or off (`english`: English chunks in it too);
    chunks/s and the multilingual encoder's seconds."""
    from django.conf import settings

    from kb.library.ingest.batch import ingest_paths
    from kb.library.models import Chunk, Document, Folder

    settings.KB_MULTILINGUAL, settings.KB_MULTILINGUAL_ENGLISH = multi, english
    folder = Folder.objects.create(name=f"bench-{run}-{'multilingual' if multi else 'today'}")
    started = time.perf_counter()
    ingest_paths([corpus], folder=folder, sync=True)  # ends with one statistics refresh
    seconds = time.perf_counter() - started
    documents = Document.objects.filter(folder=folder)
    chunks = Chunk.objects.filter(document__in=documents)
    e5 = sum(d.stage_seconds.get("embed_multilingual", 0.0) for d in documents)
    return {"folder": folder, "chunks": chunks.count(), "seconds": seconds, "e5_seconds": e5,
            "rate": chunks.count() / seconds, "bytes": _bytes_per_chunk(chunks), "load": load_average()}


def inner(corpus: Path, runs: int, queries: int, english: bool) -> None:
    import django

    from kb.runtime.embedded import ensure_services

    ensure_services()
    django.setup()
    import torch
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from kb.text import embedding, multilingual

    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user("bench")  # no password: it only searches
    questions = _questions(queries)
    started = time.perf_counter()
    multilingual.embed_passages(["warm up"])
    e5_load = time.perf_counter() - started
    embedding.embed(["warm up"])
    print(f"corpus: {corpus} · {len(questions)} questions · torch threads {torch.get_num_threads()}, "
          f"OMP_NUM_THREADS {os.environ.get('OMP_NUM_THREADS', 'unset')}, OMP_WAIT_POLICY "
          f"{os.environ.get('OMP_WAIT_POLICY')}, {os.cpu_count()} CPUs; e5 load + first passage {e5_load * 1000:.0f} ms")
    figures: dict[str, list[float]] = {k: [] for k in ("ingest", "p50", "p95", "bytes", "e5_share")}
    for run in range(1, runs + 1):
        today = _index(corpus, run, multi=False)
        today_ms, today_embed = _query_times(user, questions, multi=False)
        today["folder"].delete()
        new = _index(corpus, run, multi=True, english=english)
        new_ms, new_embed = _query_times(user, questions, multi=True)
        new["folder"].delete()
        old_bytes = today["bytes"]["row"] + today["bytes"]["dense_index"]
        new_bytes = (new["bytes"]["row"] + new["bytes"]["dense_index"] + new["bytes"]["multilingual"]
                     + new["bytes"]["multilingual_index"])
        ratios = {"ingest": new["rate"] / today["rate"], "p50": percentile(new_ms, 50) / percentile(today_ms, 50),
                  "p95": percentile(new_ms, 95) / percentile(today_ms, 95), "bytes": new_bytes / old_bytes,
                  "e5_share": new["e5_seconds"] / new["seconds"]}
        for key, value in ratios.items():
            figures[key].append(value)
        print(f"run {run}: {today['chunks']} chunks")
        print(f"  ingest: today {today['rate']:.1f} chunks/s ({today['seconds']:.1f} s, load {today['load']}) · "
              f"multilingual {new['rate']:.1f} chunks/s ({new['seconds']:.1f} s, e5 {new['e5_seconds']:.1f} s, "
              f"load {new['load']}) · ratio {ratios['ingest']:.2f}")
        print(f"  query p50/p95: today {percentile(today_ms, 50):.1f}/{percentile(today_ms, 95):.1f} ms "
              f"(embed p50 {percentile(today_embed, 50):.1f}) · multilingual {percentile(new_ms, 50):.1f}/"
              f"{percentile(new_ms, 95):.1f} ms (embed p50 {percentile(new_embed, 50):.1f}) · ratio "
              f"{ratios['p50']:.2f}/{ratios['p95']:.2f} (load {load_average()})")
        print(f"  bytes per chunk: today {old_bytes:,.0f} (row {today['bytes']['row']:,.0f} + HNSW "
              f"{today['bytes']['dense_index']:,.0f}) · multilingual {new_bytes:,.0f} (+ vector "
              f"{new['bytes']['multilingual']:,.0f} + its HNSW {new['bytes']['multilingual_index']:,.0f}) · ratio "
              f"{ratios['bytes']:.2f}")
    print(f"median of {runs} runs (new / today): ingest throughput {statistics.median(figures['ingest']):.2f}, "
          f"query p50 {statistics.median(figures['p50']):.2f}, p95 {statistics.median(figures['p95']):.2f}, "
          f"bytes per chunk {statistics.median(figures['bytes']):.2f}; e5 share of ingest time "
          f"{statistics.median(figures['e5_share']):.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", nargs="?", type=Path, default=SET / "corpus")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--english", action="store_true", help="English chunks in the space too (KB_MULTILINGUAL_ENGLISH)")
    args = parser.parse_args()
    if os.environ.get("KB_BENCH_INNER"):
        inner(args.corpus, args.runs, args.queries, args.english)
    else:
        sys.exit(outer(args.corpus, args.runs, args.queries, args.english))
