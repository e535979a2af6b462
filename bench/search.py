"""Search latency and ANN recall on a synthetic index of 100,000 chunks.

    .venv/bin/python bench/search.py [--chunks 100000] [--queries 140] [--visible 0.3]

Runs in a scratch database on the knowledge base's PostgreSQL server (dropped at the end).
Chunk texts cycle through the real ../shared/eval corpus; vectors are the real chunk
embeddings perturbed with noise (so the index sees clustered, text-like data, not uniform
noise, which HNSW handles very differently); ACLs are spread so a typical user can read
about 30% of the rows. Prints the server-side latency of the production hybrid query
(without embedding the query) and the dense list's recall@30 against an exact scan
under the same ACL filter.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from search.retrieval import SearchOptions

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.settings")
GROUPS = 10


def outer(argv: list[str]) -> int:
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection

    from search.evaluation.runner import database_url, scratch_database

    with scratch_database(connection.settings_dict) as name:
        env = dict(os.environ, DATABASE_URL=database_url(connection.settings_dict, name),
                   REDIS_URL=settings.REDIS_URL, SECRET_KEY=settings.SECRET_KEY, KB_BENCH_INNER="1")
        return subprocess.run([sys.executable, __file__, *argv], env=env).returncode


def seed_texts(corpus: Path) -> list[str]:
    from kb.ingest import chunking, extract
    from kb.ingest.batch import expand_paths

    texts = []
    for path in expand_paths([corpus]):
        data = path.read_bytes()
        extracted = extract.extract(data=data, mime=extract.detect_mime(filename=path.name, head=data[:8192]),
                                    filename=path.name)
        texts += [d.text for d in chunking.split(extracted, title=path.stem)]
    return texts


def bulk_load(n: int, texts: list[str], base: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, list[list[str]]]:
    """COPY n chunks with indexes dropped, then rebuild them (as a bulk import would)."""
    import numpy as np
    from django.db import connection
    from pgvector.psycopg import register_vector

    # Each synthetic vector blends three real chunk embeddings (Dirichlet weights) plus a little
    # noise: a continuum over the real embedding manifold, like a larger real corpus, rather
    # than tight clusters of near-copies whose order is arbitrary. Its text is the main seed's.
    picks = rng.integers(0, len(texts), size=(n, 3))
    weights = rng.dirichlet([0.6, 0.6, 0.6], size=n).astype(np.float32)
    order = np.argsort(-weights, axis=1)
    seeds = picks[np.arange(n), order[:, 0]]
    vectors = np.einsum("nk,nkd->nd", weights, base[picks])
    vectors += 0.2 * rng.normal(size=vectors.shape).astype(np.float32) / np.sqrt(base.shape[1])
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    # 10% public; the rest in one of ten groups. A user in groups 1-2 reads 10% + 90% * 2/10 = 28%.
    acls = [["everyone"] if rng.random() < 0.10 else [f"g:{rng.integers(1, GROUPS + 1)}"] for _ in range(n)]

    raw = connection.connection
    register_vector(raw)
    with raw.cursor() as cur:
        cur.execute("SELECT indexdef FROM pg_indexes WHERE tablename = 'kb_chunk' AND indexname LIKE 'kb_chunk_%%'"
                    " AND indexdef NOT LIKE '%%UNIQUE%%'")
        indexes = [row[0] for row in cur.fetchall()]
        for definition in indexes:
            cur.execute("DROP INDEX " + definition.split(" INDEX ", 1)[1].split(" ON ", 1)[0])
        cur.execute("INSERT INTO kb_document (title, file, filename, mime_type, sha256, size, inherit_access, public, acl,"
                    " status, failed_stage, failure_reason, attempts, audience_default, canonical_text, pages, warnings,"
                    " embedding_model, chunk_count, token_total, token_max, progress_done, progress_total, created_at, updated_at)"
                    " SELECT 'doc ' || g, '', '', 'text/markdown', '', 0, false, false, '{}', 'ready', '', '', 1, '', '',"
                    " '[]', '[]', %s, 0, 0, 0, 0, 0, now(), now() FROM generate_series(1, %s) g RETURNING id",
                    ["all-MiniLM-L6-v2", max(1, n // 100)])
        documents = [row[0] for row in cur.fetchall()]
        started = time.perf_counter()
        with cur.copy("COPY kb_chunk (document_id, ordinal, stable_id, kind, audience, breadcrumb, text, content,"
                      " start, \"end\", split_group, tokens, embedding, acl) FROM STDIN") as copy:
            for i in range(n):
                text = texts[seeds[i]]
                copy.write_row((documents[i % len(documents)], i // len(documents), f"s{i}", "section", "concept",
                                "bench", text, text, 0, len(text), "", 100, vectors[i], acls[i]))
        load_s = time.perf_counter() - started
        started = time.perf_counter()
        cur.execute("SET maintenance_work_mem = '1GB'")
        for definition in indexes:
            cur.execute(definition)
        cur.execute("REFRESH MATERIALIZED VIEW search_lexeme_stats")
        cur.execute("ANALYZE kb_chunk")
        index_s = time.perf_counter() - started
    raw.commit()
    print(f"loaded {n} chunks in {load_s:.1f} s, built {len(indexes)} indexes + statistics in {index_s:.1f} s")
    return vectors, acls


def inner(args: argparse.Namespace) -> None:
    import django

    django.setup()
    import json

    import numpy as np
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from kb.ingest import embedding
    from search.retrieval import SearchOptions

    call_command("migrate", verbosity=0)
    rng = np.random.default_rng(7)
    corpus = ROOT.parent / "shared" / "eval" / "corpus"
    texts = seed_texts(corpus)
    base = embedding.embed(texts)
    vectors, acls = bulk_load(args.chunks, texts, base, rng)

    questions = [json.loads(line)["query"] for line in (corpus.parent / "questions.jsonl").open()][: args.queries]
    query_vectors = embedding.embed(questions)
    principals = ["everyone", "u:1", "g:1", "g:2"]
    visible = np.array([bool(set(a) & set(principals)) for a in acls])
    print(f"user can read {visible.mean():.1%} of {len(acls)} chunks; ef_search {settings.KB_SEARCH_EF_SEARCH}, "
          f"iterative scan relaxed_order; {len(questions)} queries")

    with connection.cursor() as cur:
        cur.execute("SELECT min(id) FROM kb_chunk")
        first = cur.fetchone()[0]
    ids = np.arange(len(acls)) + first  # identity ids follow COPY order in a fresh table
    exact_top = []
    for v in query_vectors:
        sims = vectors[visible] @ v
        exact_top.append(set(ids[visible][np.argsort(-sims)[:30]].tolist()))
    for ef in args.ef:
        for share in args.select_share:
            for n in args.candidates:
                options = SearchOptions(ef_search=ef, lexical_select_share=share, candidates=n)
                measure(options, principals, questions, query_vectors, exact_top)
    measure_late(SearchOptions(), principals, questions, query_vectors)


def measure_late(options: SearchOptions, principals: list[str], questions: list[str],
                 query_vectors: np.ndarray) -> None:
    """The late-interaction stage on each query's top fused hits, with a cold cache (the worst case)."""
    import numpy as np

    from kb.ingest import embedding
    from search import late
    from search.retrieval import WORD, _candidates

    times = []
    for q, v in zip(questions, query_vectors, strict=True):
        rows = _candidates(principals=principals, query=q, vector=v, options=options)[: options.late_depth]
        pieces = embedding.embed_query(q)[1]  # comes with the query's embedding in production
        late._cache.clear()
        started = time.perf_counter()
        late.scores(q, pieces, [m.span() for m in WORD.finditer(q)], [(row[0], row[8]) for row in rows])
        times.append((time.perf_counter() - started) * 1000)
    print(f"-- late interaction on the top {options.late_depth} hits (chunks' pieces encoded, "
          f"cold cache): p50 {np.percentile(times, 50):.0f} ms, p95 {np.percentile(times, 95):.0f} ms")


def measure(options: SearchOptions, principals: list[str], questions: list[str], query_vectors: np.ndarray,
            exact_top: list[set[int]]) -> None:
    from dataclasses import replace

    import numpy as np
    from django.db import connection

    from search.retrieval import _candidate_query, _candidates

    def query(part: SearchOptions, q: str, v: np.ndarray) -> tuple[str, dict[str, Any]]:
        return _candidate_query(principals=principals, query=q, vector=v, options=part)

    def run(part: SearchOptions, q: str, v: np.ndarray) -> list[tuple[Any, ...]]:
        with connection.cursor() as cur:
            cur.execute(*query(part, q, v))
            rows: list[tuple[Any, ...]] = cur.fetchall()
            return rows

    with connection.cursor() as cur:  # for the raw subqueries below; _candidates sets its own
        cur.execute("SELECT set_config('hnsw.ef_search', %s, false)", [str(options.ef_search)])
    print(f"-- ef_search {options.ef_search}, lexical select share {options.lexical_select_share}, "
          f"{options.candidates} candidates per list")
    for q, v in zip(questions[:5], query_vectors[:5], strict=True):  # warm caches
        _candidates(principals=principals, query=q, vector=v, options=options)
    parts = {"dense only": replace(options, lexical=False, identifiers=False),
             "lexical only": replace(options, dense=False, identifiers=False)}
    for label, part in parts.items():
        times = []
        for q, v in zip(questions, query_vectors, strict=True):
            started = time.perf_counter()
            run(part, q, v)
            times.append((time.perf_counter() - started) * 1000)
        print(f"  {label}: p50 {np.percentile(times, 50):.1f} ms, p95 {np.percentile(times, 95):.1f} ms")
        if os.environ.get("KB_BENCH_EXPLAIN"):
            slowest = int(np.argmax(times))
            sql, params = query(part, questions[slowest], query_vectors[slowest])
            with connection.cursor() as cur:
                cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
                plan = [r[0][:160] for r in cur.fetchall()]
            print(f"    slowest: {questions[slowest]!r}\n    " + "\n    ".join(plan))
    timings, recalls = [], []
    for q, v, exact in zip(questions, query_vectors, exact_top, strict=True):
        started = time.perf_counter()
        _candidates(principals=principals, query=q, vector=v, options=options)
        timings.append((time.perf_counter() - started) * 1000)
        got = {row[0] for row in run(parts["dense only"], q, v)[:30]}
        recalls.append(len(got & exact) / 30)
    t = np.array(timings)
    print(f"  hybrid query (dense + IDF lexical + trigram, ACL in each): p50 {np.percentile(t, 50):.1f} ms, "
          f"p95 {np.percentile(t, 95):.1f} ms, max {t.max():.1f} ms")
    print(f"  dense recall@30 vs exact scan under the same ACL: mean {np.mean(recalls):.3f}, "
          f"p5 {np.percentile(recalls, 5):.3f}, min {np.min(recalls):.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=140)
    parser.add_argument("--ef", type=lambda v: [int(x) for x in v.split(",")], default=None,
                        help="ef_search values to measure, comma-separated (default: the configured one)")
    parser.add_argument("--select-share", type=lambda v: [float(x) for x in v.split(",")], default=None)
    parser.add_argument("--candidates", type=lambda v: [int(x) for x in v.split(",")], default=None,
                        help="candidates per list to measure, comma-separated (default: the configured number)")
    arguments = parser.parse_args()
    if os.environ.get("KB_BENCH_INNER"):
        import django

        django.setup()
        from django.conf import settings

        arguments.ef = arguments.ef or [settings.KB_SEARCH_EF_SEARCH]
        arguments.select_share = arguments.select_share or [settings.KB_SEARCH_LEXICAL_SELECT_SHARE]
        arguments.candidates = arguments.candidates or [settings.KB_SEARCH_CANDIDATES]
    if os.environ.get("KB_BENCH_INNER"):
        inner(arguments)
    else:
        sys.exit(outer(sys.argv[1:]))
