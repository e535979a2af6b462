"""Search latency and ANN recall: on the development corpus, then on a synthetic index of 100,000 chunks.

    .venv/bin/python bench/search.py [--chunks 100000] [--queries 140] [--runs 3]

Runs in a scratch database on the knowledge base's PostgreSQL server (dropped at the end).
First the development corpus (../shared/eval) is ingested through the real pipeline and
the whole server-side retrieval (`hybrid_search`: intent, query embedding, candidates,
MMR, late interaction from the stored word-piece vectors, gate) is timed for every
question, `--runs` times. Then synthetic chunks fill the index up to `--chunks`: texts
and word-piece vectors cycle through the real corpus's chunks; vectors are the real chunk
embeddings blended and perturbed with noise (so the index sees clustered, text-like data,
not uniform noise, which HNSW handles very differently); ACLs are spread so the user can
read about a third of the rows. At that size it prints the same end-to-end figure, the
candidate query alone and its lists, the late stage alone, and the dense list's
recall@30 against an exact scan under the same ACL filter. Every figure is the median over
the runs of each run's p50/p95, with the load average beside it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
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

    from kb.runtime.embedded import ensure_services

    ensure_services()  # an entry point, like manage.py: the settings only read where the servers are
    django.setup()
    from django.conf import settings
    from django.db import connection

    from lab.evaluation.runner import database_url, scratch_database

    with scratch_database(connection.settings_dict) as name:
        env = dict(os.environ, DATABASE_URL=database_url(connection.settings_dict, name),
                   REDIS_URL=settings.REDIS_URL, SECRET_KEY=settings.SECRET_KEY, KB_BENCH_INNER="1")
        return subprocess.run([sys.executable, __file__, *argv], env=env).returncode


def seed_texts(corpus: Path) -> list[str]:
    from kb.library.ingest import chunking, extract
    from kb.library.ingest.batch import expand_paths

    texts = []
    for path in expand_paths([corpus]):
        data = path.read_bytes()
        extracted = extract.extract(data=data, mime=extract.detect_mime(filename=path.name, head=data[:8192]),
                                    filename=path.name)
        texts += [d.text for d in chunking.split(extracted, title=path.stem)]
    return texts


def bulk_load(n: int, texts: list[str], base: np.ndarray, packed: list[bytes],
              rng: np.random.Generator) -> tuple[np.ndarray, list[list[str]]]:
    """COPY n chunks with indexes dropped, then rebuild them (as a bulk import would)."""
    import numpy as np
    from django.db import connection
    from pgvector.psycopg import register_vector

    from kb.text.identifiers import searchable

    idents = [searchable(text) for text in texts]
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
                    " embedding_model, chunk_count, token_total, token_max, progress_done, progress_total, stage_seconds,"
                    " headings, version, created_at, updated_at)"
                    " SELECT 'doc ' || g, '', '', 'text/markdown', '', 0, false, false, '{}', 'ready', '', '', 1, '', '',"
                    " '[]', '[]', %s, 0, 0, 0, 0, 0, '{}', '[]', 1, now(), now() FROM generate_series(1, %s) g RETURNING id",
                    ["all-MiniLM-L6-v2", max(1, n // 100)])
        documents = [row[0] for row in cur.fetchall()]
        started = time.perf_counter()
        with cur.copy("COPY kb_chunk (document_id, ordinal, stable_id, kind, audience, breadcrumb, text, content,"
                      " start, \"end\", split_group, tokens, embedding, late_vectors, identifiers, acl) FROM STDIN") as copy:
            for i in range(n):
                text = texts[seeds[i]]
                copy.write_row((documents[i % len(documents)], i // len(documents), f"s{i}", "section", "concept",
                                "bench", text, text, 0, len(text), "", 100, vectors[i], packed[seeds[i]], idents[seeds[i]],
                                acls[i]))
        load_s = time.perf_counter() - started
        started = time.perf_counter()
        cur.execute("SET maintenance_work_mem = '1GB'")
        for definition in indexes:
            cur.execute(definition)
        for view in ("search_lexeme_stats", "search_acl_lexeme_stats", "search_acl_chunk_totals"):
            cur.execute(f"REFRESH MATERIALIZED VIEW {view}")
        # VACUUM too: otherwise autovacuum finds 100,000 new rows (and their TOAST) and scans
        # them while the timings run, as it would not on a table that has been in service a while.
        cur.execute("VACUUM (ANALYZE) kb_chunk")
        index_s = time.perf_counter() - started
        cur.execute("SELECT pg_total_relation_size('kb_chunk')")
        table_bytes = cur.fetchone()[0]
    raw.commit()
    print(f"loaded {n} chunks in {load_s:.1f} s, built {len(indexes)} indexes + statistics + vacuum in {index_s:.1f} s; "
          f"chunk table with indexes and TOAST {table_bytes / 2**30:.2f} GiB; "
          f"late stage's word codes {np.mean([len(p) for p in packed]) / 1024:.1f} KiB per chunk on average")
    return vectors, acls


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f}"


def timed(label: str, runs: int, once: Callable[[], list[float]]) -> None:
    """Print the median over `runs` of each run's p50 and p95 (milliseconds), with the load average."""
    import numpy as np

    p50s, p95s, loads = [], [], []
    for _ in range(runs):
        times = once()
        p50s.append(float(np.percentile(times, 50)))
        p95s.append(float(np.percentile(times, 95)))
        loads.append(load_average())
    print(f"  {label}: p50 {np.median(p50s):.1f} ms, p95 {np.median(p95s):.1f} ms "
          f"(median of {runs} runs; p95 per run {', '.join(f'{v:.1f}' for v in p95s)}; {' · '.join(loads)})")


def retrieval_times(user: Any, questions: list[str]) -> list[float]:
    """Server-side retrieval as chat runs it: hybrid_search's own total (intent, embedding, SQL, MMR, late, gate)."""
    from search.retrieval import hybrid_search

    return [hybrid_search(user=user, query=q).timings_ms["total"] for q in questions]


def inner(args: argparse.Namespace) -> None:
    import django

    from kb.runtime.embedded import ensure_services

    ensure_services()  # an entry point, like manage.py: the settings only read where the servers are
    django.setup()
    import json

    import numpy as np
    import torch
    from django.conf import settings
    from django.contrib.auth.models import Group, User
    from django.core.management import call_command
    from django.db import connection

    from accounts.acl import user_principals
    from kb.library.ingest.batch import ingest_paths
    from kb.library.ingest.pipeline import late_codes
    from kb.library.models import Chunk
    from kb.runtime.launcher import query_environment
    from kb.text import embedding
    from search.retrieval import SearchOptions

    call_command("migrate", verbosity=0)
    rng = np.random.default_rng(7)
    corpus = ROOT.parent / "shared" / "eval" / "corpus"
    questions = [json.loads(line)["query"] for line in (corpus.parent / "questions.jsonl").open()][: args.queries]
    # Group ids 1-3 are the synthetic rows' g:1-g:3 too: the user reads 10% + 90% * 3/10 of them.
    groups = {name: Group.objects.create(name=name) for name in ("engineering", "finance", "hr")}
    user = User.objects.create_user("bench-reader")
    user.groups.set(groups.values())
    for folder in sorted(p for p in corpus.iterdir() if p.is_dir()):
        ingest_paths([folder], groups=[groups[folder.name]] if folder.name in groups else None, sync=True)
    # Timed as the processes that serve queries run (kb.runtime.launcher.query_environment).
    torch.set_num_threads(int(query_environment()["OMP_NUM_THREADS"]))
    print(f"development corpus: {Chunk.objects.count()} chunks; {len(questions)} queries; {os.cpu_count()} CPUs; "
          f"{torch.get_num_threads()} torch thread(s)")
    for q in questions[:5]:  # warm: model, connections, caches
        retrieval_times(user, [q])
    timed("retrieval, server side (embedding, candidates, MMR, late stage, gate)", args.runs,
          lambda: retrieval_times(user, questions))

    texts = seed_texts(corpus)
    base, pieces, piece_ids = embedding.embed_with_pieces(texts)
    vectors, acls = bulk_load(args.chunks - Chunk.objects.count(), texts, base, late_codes(pieces, piece_ids), rng)
    principals = user_principals(user)
    query_vectors = embedding.embed(questions)
    visible = np.array([bool(set(a) & set(principals)) for a in acls])
    print(f"{Chunk.objects.count()} chunks; the user can read {visible.mean():.1%} of the synthetic ones; "
          f"ef_search {settings.KB_SEARCH_EF_SEARCH}, iterative scan relaxed_order")
    for q in questions[:5]:
        retrieval_times(user, [q])
    timed("retrieval, server side (embedding, candidates, MMR, late stage, gate)", args.runs,
          lambda: retrieval_times(user, questions))

    with connection.cursor() as cur:
        cur.execute("SELECT min(id) FROM kb_chunk WHERE breadcrumb = 'bench'")
        first = cur.fetchone()[0]
    ids = np.arange(len(acls)) + first  # identity ids follow COPY order in a fresh table
    # Exact top 30 over every row the user may read: the real chunks (all readable) and the visible synthetic ones.
    real = list(Chunk.objects.exclude(breadcrumb="bench").values_list("pk", "embedding"))
    readable_ids = np.concatenate([np.array([pk for pk, _ in real]), ids[visible]])
    readable = np.vstack([np.array([e for _, e in real], dtype=np.float32), vectors[visible]])
    exact_top = [set(readable_ids[np.argsort(-(readable @ v))[:30]].tolist()) for v in query_vectors]
    for ef in args.ef:
        for rows in args.select_rows:
            for n in args.candidates:
                options = SearchOptions(ef_search=ef, lexical_select_rows=rows, candidates=n)
                measure(options, principals, questions, query_vectors, exact_top, args.runs)
    measure_late(SearchOptions(), principals, questions, query_vectors, args.runs)


def measure_late(options: SearchOptions, principals: list[str], questions: list[str],
                 query_vectors: np.ndarray, runs: int) -> None:
    """The late-interaction stage alone on each query's top fused hits: read their stored vectors, score."""
    from kb.text import embedding
    from search import late
    from search.retrieval import WORD, _candidates

    heads = [_candidates(principals=principals, query=q, vector=v, options=options)[: options.late_depth]
             for q, v in zip(questions, query_vectors, strict=True)]
    pieces = [embedding.embed_query(q)[1] for q in questions]  # comes with the query's embedding in production

    def once() -> list[float]:
        times = []
        for q, rows, p in zip(questions, heads, pieces, strict=True):
            started = time.perf_counter()
            weights = late.query_weights(q, [m.span() for m in WORD.finditer(q)])
            late.scores(p, weights, late.chunk_vectors([(row["chunk_id"], row["text"]) for row in rows]))
            times.append((time.perf_counter() - started) * 1000)
        return times

    timed(f"late interaction on the top {options.late_depth} hits (stored vectors read and scored)", runs, once)


def measure(options: SearchOptions, principals: list[str], questions: list[str], query_vectors: np.ndarray,
            exact_top: list[set[int]], runs: int) -> None:
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
    print(f"-- ef_search {options.ef_search}, lexical select rows {options.lexical_select_rows}, "
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
    def hybrid() -> list[float]:
        times = []
        for q, v in zip(questions, query_vectors, strict=True):
            started = time.perf_counter()
            _candidates(principals=principals, query=q, vector=v, options=options)
            times.append((time.perf_counter() - started) * 1000)
        return times

    timed("candidate query alone (dense + IDF lexical + trigram, ACL in each; no embedding)", runs, hybrid)
    recalls = [len({row[0] for row in run(parts["dense only"], q, v)[:30]} & exact) / 30
               for q, v, exact in zip(questions, query_vectors, exact_top, strict=True)]
    print(f"  dense recall@30 vs exact scan under the same ACL: mean {np.mean(recalls):.3f}, "
          f"p5 {np.percentile(recalls, 5):.3f}, min {np.min(recalls):.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=140)
    parser.add_argument("--runs", type=int, default=3, help="repetitions of every timing (medians are printed)")
    parser.add_argument("--ef", type=lambda v: [int(x) for x in v.split(",")], default=None,
                        help="ef_search values to measure, comma-separated (default: the configured one)")
    parser.add_argument("--select-rows", type=lambda v: [int(x) for x in v.split(",")], default=None,
                        help="lexical select budgets (KB_SEARCH_LEXICAL_SELECT_ROWS) to measure, comma-separated")
    parser.add_argument("--candidates", type=lambda v: [int(x) for x in v.split(",")], default=None,
                        help="candidates per list to measure, comma-separated (default: the configured number)")
    arguments = parser.parse_args()
    if os.environ.get("KB_BENCH_INNER"):
        import django

        from kb.runtime.embedded import ensure_services

        ensure_services()  # an entry point, like manage.py: the settings only read where the servers are
        django.setup()
        from django.conf import settings

        arguments.ef = arguments.ef or [settings.KB_SEARCH_EF_SEARCH]
        arguments.select_rows = arguments.select_rows or [settings.KB_SEARCH_LEXICAL_SELECT_ROWS]
        arguments.candidates = arguments.candidates or [settings.KB_SEARCH_CANDIDATES]
    if os.environ.get("KB_BENCH_INNER"):
        inner(arguments)
    else:
        sys.exit(outer(sys.argv[1:]))
