"""Scale benchmark: a company's index of `--chunks` passages on one machine, measured end to end.

    .venv/bin/python bench/scale.py [--chunks 100000] [--runs 3] [--json OUT] [--keep NAME] [--skip-ttft]

Runs in a scratch database on the knowledge base's PostgreSQL server (bench/_common.py; dropped at the
end unless `--keep NAME`, which keeps `kb_eval_keep_NAME` filled for the next run to measure again
without filling it). The fill: the development corpora (../shared/eval, demo/eval-formats,
lab/eval-multilingual) are indexed once through the real pipeline, then grown to `--chunks` rows in
SQL. Each synthetic row is a real row `a` (every column the chunk table has, read at run time, so a
new storage format is copied as it is) with the first sentence of another real row `b` spliced onto
its text and content, and its vectors l2_normalize(a + u b + v c + noise) in each vector column's own
type (c a third real row, u and v pseudo-random weights in [0, 1.25) per row: a continuum over the real
rows' vectors, as a larger real corpus has, not near-copies of each, whose HNSW recall suffers); no two
rows are equal. Rows come 50 to a synthetic document (about 20,000 documents at a
million), whose canonical text is its chunks' contents, so every quote is its slice. Documents are
shared as a company's are: 10% with everyone, 5% with one to three people only, the rest with one of
50 groups of Zipf-like sizes (a fifth of those also with one to three people), among 20,000 people;
the grants (document groups and users) agree with the access lists. Secondary indexes are dropped
before the load and re-created from their own definitions after it (timed one by one), then the
statistics views refreshed and the table vacuumed.

Then `--runs` times: VACUUM (ANALYZE) and REINDEX of the HNSW indexes (timed), the whole server-side
retrieval (`hybrid_search`, as chat runs it) for 50 real questions of the three sets as a user in
one small group, a user in 25 groups and a superuser in every group, and the dense list's
recall@30 under each one's ACL against an exact scan. Then time to first token through the app
(Daphne and make run's workers, bench/ttft.py's phase) for the user in 25 groups, `--runs` phases.
Every figure is the median over the runs, with the load average beside it; bytes on disk and the
servers' memory are printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench._common import (  # noqa: E402 (after the path)
    DEV_DIR,
    AppServer,
    corpus_ingest,
    load_average,
    percentile,
    run_in_scratch_database,
    session_cookie,
)

SCRIPT = Path(__file__).resolve()
CORPORA = ((DEV_DIR, 20), (ROOT / "demo" / "eval-formats", 15), (ROOT / "lab" / "eval-multilingual", 15))  # questions
GROUPS = 50
PEOPLE = 20_000
PER_DOCUMENT = 50
BATCH = 20_000  # synthetic rows per INSERT: a multiple of PER_DOCUMENT, so a document is written in one statement
NOISE = 997  # random unit vectors each synthetic vector takes a quarter of one of (a prime: rows cycle through all)
TARGETS = {"retrieval_p95_ms": 150, "recall_at_30": 0.95, "ttft_p95_ms": 300}


@contextmanager
def phase(timings: dict[str, float], name: str) -> Iterator[None]:
    """Time a phase of the benchmark itself (for planning a bigger run), and say it started."""
    print(f"[{time.strftime('%H:%M:%S')}] {name} … (load {load_average()})", file=sys.stderr, flush=True)
    started = time.perf_counter()
    yield
    timings[name] = round(time.perf_counter() - started, 1)


def _columns(cur: Any, table: str) -> list[tuple[str, str, str]]:
    """(name, type as SQL writes it, udt name) of `table`'s columns that an INSERT may write (no identity, no generated)."""
    cur.execute("SELECT a.attname, format_type(a.atttypid, a.atttypmod), t.typname FROM pg_attribute a"
                " JOIN pg_type t ON t.oid = a.atttypid WHERE a.attrelid = %s::regclass AND a.attnum > 0"
                " AND NOT a.attisdropped AND a.attidentity = '' AND a.attgenerated = '' ORDER BY a.attnum", [table])
    return [(name, kind, udt) for name, kind, udt in cur.fetchall() if name != "id"]


# Inner half: runs against the scratch database only ----------------------------------------


def _people(rng: Any) -> dict[str, Any]:
    """50 groups (the sets' own first), 20,000 people in one or two groups each (Zipf-like sizes), and the three
    askers measured: one in the smallest group, one in every other group (25), a superuser in every group."""
    from django.contrib.auth.models import Group, User

    acl: dict[str, Any] = {"groups": {}}
    for corpus, _ in CORPORA:
        acl["groups"].update(json.loads((corpus / "acl.json").read_text())["groups"])
    names = sorted({g for g in acl["groups"].values() if g != "everyone"})
    names += [f"team-{n:02d}" for n in range(len(names) + 1, GROUPS + 1)]
    groups = [Group.objects.create(name=name) for name in names]
    zipf = _zipf(len(groups))
    people = User.objects.bulk_create([User(username=f"person-{n:05d}", password="!") for n in range(PEOPLE)])  # noqa: S106 (unusable)
    through = User.groups.through
    rows = []
    for person in people:
        chosen = {int(rng.choice(len(groups), p=zipf))}
        if rng.random() < 0.3:
            chosen.add(int(rng.choice(len(groups), p=zipf)))
        rows += [through(user_id=person.pk, group_id=groups[g].pk) for g in chosen]
    through.objects.bulk_create(rows, batch_size=5000)
    small = User.objects.create_user("bench-small")
    small.groups.set([groups[-1]])
    many = User.objects.create_user("bench-many")
    many.groups.set(groups[::2])
    superuser = User.objects.create_superuser("bench-super", email="", password=None)
    superuser.groups.set(groups)
    return {"acl": acl, "groups": {g.name: g for g in groups}, "group_ids": [g.pk for g in groups],
            "people": [p.pk for p in people] + [small.pk, many.pk, superuser.pk],
            "askers": {"one small group": small.pk, "25 groups": many.pk, "superuser, every group": superuser.pk}}


def _zipf(n: int) -> Any:
    import numpy as np

    weights = 1 / np.arange(1, n + 1)
    return weights / weights.sum()


def _document_acls(count: int, group_ids: list[int], people: list[int], rng: Any) -> list[list[str]]:
    """Each synthetic document's readers, as document_principals writes them (sorted principals)."""
    import numpy as np

    from accounts.acl import EVERYONE, group_principal, user_principal

    zipf, everybody = _zipf(len(group_ids)), np.array(people)
    acls = []
    for _ in range(count):
        draw = rng.random()
        named = [user_principal(int(u)) for u in rng.choice(everybody, size=int(rng.integers(1, 4)), replace=False)]
        if draw < 0.10:
            acls.append([EVERYONE])
        elif draw < 0.15:
            acls.append(sorted(named))
        else:
            group = [group_principal(group_ids[int(rng.choice(len(group_ids), p=zipf))])]
            acls.append(sorted(group + named) if rng.random() < 0.2 else group)
    return acls


def _insert_documents(cur: Any, acls: list[list[str]], sources: int) -> None:
    """Synthetic documents copying every column of the real one their first chunk comes from, with their own title,
    access and (filled after the chunks) canonical text; their grants as rows, as the admin would have saved them."""
    from kb.library.models import Document

    overrides = {
        "title": "d.title || ' · ' || s.idx", "sha256": "'scale-' || s.idx", "acl": "s.acl",
        "public": "s.acl = ARRAY['everyone']::varchar[]", "inherit_access": "false", "folder_id": "NULL",
        "source_id": "NULL", "source_path": "''", "source_etag": "''", "pending_acl": "NULL", "canonical_text": "''",
        "pages": "'[]'", "headings": "'[]'", "status": "'ready'", "chunk_count": str(PER_DOCUMENT),
        "created_at": "now()", "updated_at": "now()",
    }
    columns = _columns(cur, "kb_document")
    names = ", ".join(f'"{name}"' for name, _, _ in columns)
    values = ", ".join(overrides.get(name, f'd."{name}"') for name, _, _ in columns)
    cur.execute(f"INSERT INTO kb_document ({names}) SELECT {values}"  # noqa: S608 (column names from the catalogue)
                " FROM unnest(%s::int[], %s::text[]) AS u(idx, acl_text)"
                " CROSS JOIN LATERAL (SELECT u.idx, string_to_array(u.acl_text, ',')::varchar[] AS acl) s"
                " JOIN bench_scale_src sa ON sa.idx = mod(s.idx * %s, %s)"
                " JOIN kb_chunk c ON c.id = sa.id JOIN kb_document d ON d.id = c.document_id",
                [list(range(len(acls))), [",".join(a) for a in acls], PER_DOCUMENT, sources])
    cur.execute("CREATE TABLE bench_scale_doc AS SELECT substr(sha256, 7)::int AS idx, id, acl FROM kb_document"
                " WHERE sha256 LIKE 'scale-%%'")
    cur.execute("CREATE UNIQUE INDEX ON bench_scale_doc (idx)")
    for table, column, prefix in ((Document.groups.through._meta.db_table, "group_id", "g:"),
                                  (Document.users.through._meta.db_table, "user_id", "u:")):
        cur.execute(f"INSERT INTO {table} (document_id, {column}) SELECT d.id, substr(p, 3)::int"  # noqa: S608 (the same)
                    " FROM bench_scale_doc d, unnest(d.acl) p WHERE p LIKE %s", [prefix + "%"])


def _chunk_sql(cur: Any, sources: int) -> str:
    """The INSERT … SELECT that writes synthetic rows [%(lo)s, %(hi)s): every column of the chunk table, copied
    from row `a` but for the few that make a row its own (those that exist in this schema)."""
    sep = r"E'\n\n'"
    overrides = {
        "document_id": "sd.id", "ordinal": f"mod(g.i, {PER_DOCUMENT})", "stable_id": "'scale-' || g.i",
        "text": "v.text", "content": "v.content", "acl": "sd.acl", "page": "NULL", "part": "NULL", "parts": "NULL",
        "split_group": "''", "tokens": "a.tokens + length(v.spliced) / 4",
        # The chunk's place in its document's canonical text: the contents before it, each followed by a blank line.
        "start": "sum(length(v.content) + 2) OVER w - length(v.content) - 2",
        "end": "sum(length(v.content) + 2) OVER w - 2",
    }
    columns = _columns(cur, "kb_chunk")
    noise: set[int] = set()
    for name, kind, udt in columns:
        if udt in ("vector", "halfvec"):
            dims = int(kind.split("(")[1].rstrip(")"))
            noise.add(dims)
            def weight(seed: int, dims: int = dims) -> str:  # a pseudo-random weight in [0, 1.25) per row
                return f"array_fill(mod(g.i::bigint * {seed}, 1000)::real / 800, ARRAY[{dims}])::vector"

            overrides[name] = (f'CASE WHEN a."{name}" IS NULL THEN NULL ELSE l2_normalize(a."{name}"::vector'
                               f' + coalesce(b."{name}"::vector, a."{name}"::vector) * {weight(7919)}'
                               f' + coalesce(c."{name}"::vector, a."{name}"::vector) * {weight(104729)}'
                               f' + n{dims}.v)::{kind} END')
    names = ", ".join(f'"{name}"' for name, _, _ in columns)
    values = ", ".join(overrides.get(name, f'a."{name}"') for name, _, _ in columns)
    # a: row i mod s; b: a different row for each of the s rows that share an `a`, so rows are unique below s*(s-1).
    return (f"INSERT INTO kb_chunk ({names}) SELECT {values}"  # noqa: S608 (column names from the catalogue)
            " FROM generate_series(%(lo)s, %(hi)s - 1) g(i)"
            f" JOIN bench_scale_src sa ON sa.idx = mod(g.i, {sources})"
            f" JOIN bench_scale_src sb ON sb.idx = mod(g.i / {sources} + mod(g.i, {sources}) + 1, {sources})"
            f" JOIN bench_scale_src sc ON sc.idx = mod(g.i * 31 + 7, {sources})"
            " JOIN kb_chunk a ON a.id = sa.id JOIN kb_chunk b ON b.id = sb.id JOIN kb_chunk c ON c.id = sc.id"
            f" JOIN bench_scale_doc sd ON sd.idx = g.i / {PER_DOCUMENT}"
            + "".join(f" JOIN bench_scale_noise_{d} n{d} ON n{d}.idx = mod(g.i * 7, {NOISE})" for d in sorted(noise)) +
            " CROSS JOIN LATERAL (SELECT left(split_part(b.content, '. ', 1), 300) AS spliced) s"
            f" CROSS JOIN LATERAL (SELECT a.text || {sep} || s.spliced AS text,"
            f" a.content || {sep} || s.spliced AS content, s.spliced) v"
            " WINDOW w AS (PARTITION BY sd.id ORDER BY g.i)")


def _dependents_sql(cur: Any, sources: int) -> list[str]:
    """Copies of the rows other tables hold for a real chunk (per-sentence vectors, say), for the synthetic rows
    from id %(first)s on: whatever the storage format keeps beside the chunk row."""
    cur.execute("SELECT c.conrelid::regclass::text, a.attname FROM pg_constraint c"
                " JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]"
                " WHERE c.contype = 'f' AND c.confrelid = 'kb_chunk'::regclass AND c.conrelid <> 'kb_chunk'::regclass")
    statements = []
    for table, column in cur.fetchall():
        cur.execute(f"SELECT EXISTS (SELECT 1 FROM {table})")  # noqa: S608 (a table name from the catalogue)
        if not cur.fetchone()[0]:
            continue  # answers, citations, judgements: none in a fresh index
        columns = _columns(cur, table)
        names = ", ".join(f'"{name}"' for name, _, _ in columns)
        values = ", ".join("c.id" if name == column else f't."{name}"' for name, _, _ in columns)
        statements.append(f"INSERT INTO {table} ({names}) SELECT {values} FROM kb_chunk c"  # noqa: S608 (the same)
                          f" JOIN bench_scale_src sa ON sa.idx = mod(substr(c.stable_id, 7)::int, {sources})"
                          f' JOIN {table} t ON t."{column}" = sa.id'
                          " WHERE c.id >= %(first)s AND c.stable_id LIKE 'scale-%%'")
    return statements


def _noise_tables(cur: Any, rng: Any) -> None:
    import numpy as np

    cur.execute("SELECT DISTINCT a.atttypmod FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid"
                " WHERE a.attrelid = 'kb_chunk'::regclass AND t.typname IN ('vector', 'halfvec') AND NOT a.attisdropped")
    for (dims,) in cur.fetchall():
        noise = rng.normal(size=(NOISE, dims))
        noise *= 0.25 / np.linalg.norm(noise, axis=1, keepdims=True)
        cur.execute(f"CREATE TABLE bench_scale_noise_{dims} (idx int PRIMARY KEY, v vector({dims}))")
        with cur.copy(f"COPY bench_scale_noise_{dims} (idx, v) FROM STDIN") as copy:
            for i, row in enumerate(noise):
                copy.write_row((i, "[" + ",".join(f"{x:.6f}" for x in row) + "]"))


def _secondary_indexes(cur: Any) -> list[tuple[str, str]]:
    """(name, definition) of the chunk table's indexes that no constraint needs: dropped for the load."""
    cur.execute("SELECT i.indexname, i.indexdef FROM pg_indexes i WHERE i.tablename = 'kb_chunk'"
                " AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexname::regclass)"
                " ORDER BY i.indexname")
    return list(cur.fetchall())


def _state(stage: str, figures: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Read (or, with `figures`, write) what a stage of the fill left in the scratch database, so that a kept
    database (--keep) resumes a fill that stopped, or measures a finished one again without filling it."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS bench_scale_state (stage text PRIMARY KEY, figures jsonb)")
        if figures is not None:
            cur.execute("INSERT INTO bench_scale_state VALUES (%s, %s) ON CONFLICT (stage) DO UPDATE"
                        " SET figures = excluded.figures", [stage, json.dumps(figures)])
            return figures
        cur.execute("SELECT figures FROM bench_scale_state WHERE stage = %s", [stage])
        row = cur.fetchone()
    return None if row is None else dict(row[0] if isinstance(row[0], dict) else json.loads(row[0]))


def ingest(timings: dict[str, float]) -> dict[str, Any]:
    """People and groups, and the development corpora through the real pipeline (stage `ingested`)."""
    import numpy as np

    from kb.library.models import Chunk

    with phase(timings, "people and groups"):
        people = _people(np.random.default_rng(51))
    with phase(timings, "development corpora through the pipeline"):
        documents = sum(corpus_ingest(people["acl"], people["groups"], corpus) for corpus, _ in CORPORA)
    figures = {"real_documents": documents, "real_chunks": Chunk.objects.count(), "askers": people["askers"],
               "fill_timings_s": dict(timings)}
    return dict(_state("ingested", figures) or {})


def _undo_growth(cur: Any) -> None:
    """What a growth that stopped half-way wrote: its work tables, synthetic rows and documents."""
    from kb.library.models import Document

    cur.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'bench^_scale^_%%' ESCAPE '^'"
                " AND tablename <> 'bench_scale_state'")
    for (table,) in cur.fetchall():
        cur.execute(f"DROP TABLE {table}")
    cur.execute("SELECT c.conrelid::regclass::text, a.attname FROM pg_constraint c"
                " JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]"
                " WHERE c.contype = 'f' AND c.confrelid = 'kb_chunk'::regclass")
    for table, column in cur.fetchall():
        cur.execute(f'DELETE FROM {table} WHERE "{column}" IN'  # noqa: S608 (names from the catalogue)
                    " (SELECT id FROM kb_chunk WHERE stable_id LIKE 'scale-%%')")
    cur.execute("DELETE FROM kb_chunk WHERE stable_id LIKE 'scale-%%'")
    for through in (Document.groups.through, Document.users.through):
        cur.execute(f"DELETE FROM {through._meta.db_table} WHERE document_id IN"  # noqa: S608 (a model's table)
                    " (SELECT id FROM kb_document WHERE sha256 LIKE 'scale-%%')")
    cur.execute("DELETE FROM kb_document WHERE sha256 LIKE 'scale-%%'")


def grow(args: argparse.Namespace, figures: dict[str, Any], timings: dict[str, float]) -> dict[str, Any]:
    """Grow the index to `--chunks` rows in SQL with its secondary indexes dropped, re-create them, refresh the
    statistics and VACUUM (stage `filled`); what each step took."""
    import numpy as np
    from django.contrib.auth.models import Group, User
    from django.db import connection

    rng = np.random.default_rng(52)
    real = figures["real_chunks"]
    synthetic = max(0, args.chunks - real)
    if synthetic > real * (real - 1):
        raise SystemExit(f"{real} real chunks make at most {real * (real - 1)} distinct synthetic rows")
    connection.ensure_connection()
    raw = connection.connection
    notices: list[str] = []
    raw.add_notice_handler(lambda notice: notices.append(str(notice.message_primary)))
    with raw.cursor() as cur:
        _undo_growth(cur)
        if "indexes" not in figures:  # read once: a resumed fill finds them dropped
            figures["indexes"] = _secondary_indexes(cur)
            _state("ingested", figures)
        indexes = figures["indexes"]
        cur.execute("CREATE TABLE bench_scale_src AS SELECT (row_number() OVER (ORDER BY id) - 1)::int AS idx, id"
                    " FROM kb_chunk")
        cur.execute("CREATE UNIQUE INDEX ON bench_scale_src (idx)")
        _noise_tables(cur, rng)
        with phase(timings, "synthetic documents and their grants"):
            people = list(User.objects.order_by("pk").values_list("pk", flat=True))
            group_ids = list(Group.objects.order_by("pk").values_list("pk", flat=True))
            acls = _document_acls(-(-synthetic // PER_DOCUMENT), group_ids, people, rng)
            _insert_documents(cur, acls, real)
        for name, _ in indexes:
            cur.execute(f'DROP INDEX IF EXISTS "{name}"')
        insert, dependents = _chunk_sql(cur, real), _dependents_sql(cur, real)
        with phase(timings, "bulk load"):
            for lo in range(0, synthetic, BATCH):
                hi = min(lo + BATCH, synthetic)
                cur.execute("SELECT coalesce(max(id), 0) + 1 FROM kb_chunk")
                first = cur.fetchone()[0]
                cur.execute(insert, {"lo": lo, "hi": hi})
                for statement in dependents:
                    cur.execute(statement, {"first": first})
                print(f"  {hi}/{synthetic} rows (load {load_average()})", file=sys.stderr, flush=True)
            cur.execute("UPDATE kb_document d SET canonical_text = t.text, size = octet_length(t.text) FROM ("
                        r"  SELECT document_id, string_agg(content, E'\n\n' ORDER BY ordinal) AS text FROM kb_chunk"
                        "   WHERE stable_id LIKE 'scale-%%' GROUP BY document_id) t WHERE t.document_id = d.id")
        cur.execute("SHOW maintenance_work_mem")
        figures["maintenance_work_mem_server"] = cur.fetchone()[0]
        cur.execute("SELECT set_config('maintenance_work_mem', %s, false),"
                    " set_config('max_parallel_maintenance_workers', %s, false)",
                    [args.maintenance_work_mem, str(args.parallel_workers)])
        built: dict[str, float] = {}
        notices.clear()  # only the builds' (pgvector says when a graph outgrows maintenance_work_mem)
        with phase(timings, "indexes re-created"):
            for name, definition in indexes:
                started = time.perf_counter()
                cur.execute(definition)
                built[name] = round(time.perf_counter() - started, 1)
        with phase(timings, "statistics views refreshed"):
            for view in ("search_lexeme_stats", "search_acl_lexeme_stats", "search_acl_chunk_totals"):
                cur.execute(f"REFRESH MATERIALIZED VIEW {view}")
        with phase(timings, "first VACUUM (ANALYZE)"):
            cur.execute("VACUUM (ANALYZE) kb_chunk")
        cur.execute("DROP TABLE bench_scale_src, bench_scale_doc")
        cur.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'bench_scale_noise_%%'")
        for (table,) in cur.fetchall():
            cur.execute(f"DROP TABLE {table}")
        cur.execute("SELECT d.canonical_text, c.content, c.start, c.\"end\" FROM kb_chunk c"
                    " JOIN kb_document d ON d.id = c.document_id WHERE c.stable_id LIKE 'scale-%%' ORDER BY c.id DESC LIMIT 1")
        sample = cur.fetchone()
        if sample and sample[0][sample[2]:sample[3]] != sample[1]:
            raise SystemExit("a synthetic chunk's content is not its document's canonical_text[start:end]")
    figures.update(synthetic_chunks=synthetic, index_build_s=built, build_notices=notices, load_at_build=load_average(),
                   synthetic_documents=len(acls), distinct_acls=len({tuple(a) for a in acls}),
                   fill_timings_s={**figures["fill_timings_s"], **timings})
    return dict(_state("filled", figures) or {})


def _settings(cur: Any) -> dict[str, str]:
    names = ("shared_buffers", "work_mem", "maintenance_work_mem", "effective_cache_size", "max_parallel_workers",
             "max_parallel_maintenance_workers", "hnsw.ef_search", "hnsw.iterative_scan", "hnsw.max_scan_tuples")
    values = {}
    for name in names:
        cur.execute("SELECT current_setting(%s, true)", [name])
        values[name] = cur.fetchone()[0]
    cur.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    values["pgvector"] = cur.fetchone()[0]
    cur.execute("SELECT version()")
    values["postgresql"] = cur.fetchone()[0].split(" on ")[0]
    return values


def disk(cur: Any) -> dict[str, Any]:
    """Bytes on disk: the chunk table whole (row, TOAST, every index) and per row, each index, the database."""
    cur.execute("SELECT (SELECT count(*) FROM kb_chunk), pg_total_relation_size('kb_chunk'), pg_relation_size('kb_chunk'),"
                " pg_table_size('kb_chunk') - pg_relation_size('kb_chunk'), pg_indexes_size('kb_chunk'),"
                " pg_database_size(current_database())")
    rows, total, heap, toast, indexes, database = cur.fetchone()
    cur.execute("SELECT indexname, pg_relation_size(indexname::regclass) FROM pg_indexes WHERE tablename = 'kb_chunk'"
                " ORDER BY 2 DESC")
    return {"rows": rows, "chunk_table_bytes": total, "bytes_per_chunk": total / max(rows, 1), "heap_bytes": heap,
            "toast_bytes": toast, "index_bytes": indexes, "database_bytes": database, "indexes": dict(cur.fetchall())}


def _tree_memory(root: Any) -> dict[str, Any]:
    """RSS (and PSS where /proc lets us read it) summed over a process and its descendants, in bytes. RSS counts
    the shared memory each process touched once per process; PSS shares it out."""
    import psutil

    rss, pss, readable = 0, 0, True
    processes = [root, *root.children(recursive=True)]
    for process in processes:
        try:
            rss += process.memory_info().rss
            pss += process.memory_full_info().pss
        except psutil.AccessDenied:  # another system user's processes (the embedded PostgreSQL's, as root)
            readable = False
        except psutil.NoSuchProcess:
            continue
    return {"processes": len(processes), "rss_bytes": rss, "pss_bytes": pss if readable else None}


def postgres_memory(cur: Any) -> dict[str, Any]:
    import psutil

    cur.execute("SELECT pg_backend_pid()")
    postmaster = psutil.Process(cur.fetchone()[0]).parent()
    return _tree_memory(postmaster)


def questions() -> list[str]:
    """50 real questions: evenly spread over each development set's ground truths."""
    asked = []
    for corpus, count in CORPORA:
        lines = [json.loads(line)["query"] for line in (corpus / "questions.jsonl").open() if line.strip()]
        asked += lines[:: max(1, len(lines) // count)][:count]
    return asked


def _dense(principals: list[str], query: str, vector: Any, *, exact: bool) -> list[int]:
    """The dense list as retrieval builds it under the ACL (its own SQL and per-connection HNSW settings), or
    the exact answer to the same query with index scans off."""
    from dataclasses import replace

    from django.db import connection, transaction

    from search.retrieval import SearchOptions, _candidate_query

    options = replace(SearchOptions(), lexical=False, identifiers=False, memory=False)
    sql, params = _candidate_query(principals=principals, query=query, vector=vector, options=options)
    with transaction.atomic(), connection.cursor() as cur:
        if exact:
            cur.execute("SET LOCAL enable_indexscan = off")
        cur.execute(sql, params)
        return [row[0] for row in cur.fetchall()]


def measure_run(args: argparse.Namespace, askers: dict[str, Any], asked: list[str], hnsw: list[str]) -> dict[str, Any]:
    """One run: VACUUM, REINDEX of the HNSW indexes (at the build's settings), then each asker's retrieval
    times and dense recall@30."""
    from django.db import connection

    from accounts.acl import user_principals
    from kb.text import embedding
    from search.retrieval import hybrid_search

    result: dict[str, Any] = {}
    with connection.cursor() as cur:
        cur.execute("SELECT set_config('maintenance_work_mem', %s, false),"
                    " set_config('max_parallel_maintenance_workers', %s, false)",
                    [args.maintenance_work_mem, str(args.parallel_workers)])
        started = time.perf_counter()
        cur.execute("VACUUM (ANALYZE) kb_chunk")
        result["vacuum_s"] = time.perf_counter() - started
        result["reindex_s"] = {}
        for name in hnsw:
            started = time.perf_counter()
            cur.execute(f'REINDEX INDEX "{name}"')
            result["reindex_s"][name] = time.perf_counter() - started
    result["load_maintenance"] = load_average()
    vectors = [embedding.embed_query(q)[0] for q in asked]
    for q in asked:  # warm: the fresh graph's pages, the rows' TOAST, both encoders, each language's analysis
        hybrid_search(user=list(askers.values())[-1], query=q)
    for label, user in askers.items():
        times = [hybrid_search(user=user, query=q).timings_ms for q in asked]
        principals = user_principals(user)
        recalls, kept = [], []
        for q, v in zip(asked, vectors, strict=True):
            found = _dense(principals, q, v, exact=False)
            exact = _dense(principals, q, v, exact=True)
            kept.append(len(found))
            recalls.append(len(set(found[:30]) & set(exact[:30])) / max(1, min(30, len(exact))))
        result[label] = {"total_ms": [t["total"] for t in times], "sql_ms": [t["sql"] for t in times],
                         "embed_ms": [t["embed"] for t in times], "late_ms": [t.get("late", 0.0) for t in times],
                         "recall": recalls, "kept_min": min(kept), "load": load_average()}
    return result


def measure_ttft(asker: Any, asked: list[str], runs: int) -> dict[str, Any]:
    """Time to first token through the app for `asker`: bench/ttft.py's quiet phase, `runs` times."""
    from django.db import connection

    from accounts.tokens import token_create
    from bench.ttft import _ask, _phase

    _, token = token_create(user=asker)
    cookie = session_cookie(asker)
    connection.close()  # the children get the database's connections
    server = AppServer(dict(os.environ, KB_ANSWER_BACKEND="extractive", DEBUG="0"))
    base = f"http://127.0.0.1:{server.port}"
    try:
        for question in asked[:5]:  # warm-up: models, connections
            _ask(base, token, cookie, question)
        phases = [_phase(base, token, cookie, asked) for _ in range(runs)]
        import psutil

        memory = {name: _tree_memory(psutil.Process(process.pid))
                  for name, process in [("web", server.web), *server.workers.items()]}
    finally:
        server.stop()
    return {"phases": phases, "app_memory": memory}


def inner(args: argparse.Namespace) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", interactive=False, verbosity=0)
    timings: dict[str, float] = {}
    figures = _state("filled")
    if figures is None:
        figures = _state("ingested") or ingest(timings)
        figures = grow(args, figures, {})
    elif figures["real_chunks"] + figures["synthetic_chunks"] != args.chunks:
        raise SystemExit(f"the kept database holds {figures['real_chunks'] + figures['synthetic_chunks']} chunks, "
                         f"not {args.chunks}: use another --keep name")
    else:
        print("kept database: filled before; measuring again", file=sys.stderr)
    askers = {label: User.objects.get(pk=pk) for label, pk in figures["askers"].items()}
    asked = questions()

    import torch

    from accounts.acl import user_principals
    from kb.runtime.launcher import query_environment

    torch.set_num_threads(int(query_environment()["OMP_NUM_THREADS"]))  # as the processes that serve queries run
    with connection.cursor() as cur:
        result: dict[str, Any] = {"fill": figures, "settings": _settings(cur.cursor), "disk_after_fill": disk(cur),
                                  "questions": len(asked), "cpus": os.cpu_count()}
        cur.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'kb_chunk' AND indexdef LIKE '%%USING hnsw%%'")
        hnsw = [row[0] for row in cur.fetchall()]
        result["readable"] = {}
        for label, user in askers.items():
            cur.execute("SELECT count(*) FILTER (WHERE acl && %s::varchar[]), count(*) FROM kb_chunk", [user_principals(user)])
            readable, total = cur.fetchone()
            result["readable"][label] = readable / total
    runs = []
    with phase(timings, f"{args.runs} measured runs (VACUUM, REINDEX, retrieval, recall)"):
        for run in range(args.runs):
            runs.append(measure_run(args, askers, asked, hnsw))
            print(f"run {run + 1}/{args.runs} done (load {load_average()})", file=sys.stderr, flush=True)
    result["runs"] = runs
    with connection.cursor() as cur:
        result["postgres_memory"] = postgres_memory(cur.cursor)
        result["disk"] = disk(cur.cursor)
    if not args.skip_ttft:
        with phase(timings, f"time to first token through the app, {args.runs} phases"):
            result["ttft"] = measure_ttft(askers["25 groups"], asked, args.runs)
    result["timings_s"] = timings
    return result


# Outer half: the report ------------------------------------------------------------------


def _median(values: list[float]) -> float:
    return statistics.median(values)


def report(result: dict[str, Any]) -> list[str]:
    gib, mib = 2**30, 2**20
    fill_figures, s, d = result["fill"], result["settings"], result["disk"]
    runs = result["runs"]
    lines = [
        f"{d['rows']:,} chunks ({fill_figures['real_chunks']:,} indexed from the development corpora, "
        f"{fill_figures['synthetic_chunks']:,} grown from them in {fill_figures['synthetic_documents']:,} documents, "
        f"{fill_figures['distinct_acls']:,} distinct access lists); {result['questions']} questions; {result['cpus']} CPUs; "
        f"{len(runs)} run(s); {s['postgresql']}, pgvector {s['pgvector']}",
        f"server settings: shared_buffers {s['shared_buffers']}, work_mem {s['work_mem']}, effective_cache_size "
        f"{s['effective_cache_size']}, hnsw.ef_search {s['hnsw.ef_search']}, iterative_scan {s['hnsw.iterative_scan']}, "
        f"max_scan_tuples {s['hnsw.max_scan_tuples']}; index builds at maintenance_work_mem "
        f"{result['build_settings']['maintenance_work_mem']}, max_parallel_maintenance_workers "
        f"{result['build_settings']['parallel_workers']} (server default maintenance_work_mem "
        f"{fill_figures['maintenance_work_mem_server']})",
    ]
    if "fill_timings_s" in fill_figures:
        lines.append("fill (one run, load " + fill_figures["load_at_build"] + "): " + ", ".join(
            f"{name} {seconds:.0f} s" for name, seconds in fill_figures["fill_timings_s"].items()))
        lines.append("  indexes re-created after the load: " + ", ".join(
            f"{name} {seconds:.1f} s" for name, seconds in fill_figures["index_build_s"].items()))
        for notice in fill_figures["build_notices"]:
            lines.append(f"  notice: {notice}")
    lines += [
        f"bytes on disk: chunk table {d['chunk_table_bytes'] / gib:.2f} GiB = {d['bytes_per_chunk'] / 1024:.1f} KiB per "
        f"chunk (heap {d['heap_bytes'] / gib:.2f}, TOAST {d['toast_bytes'] / gib:.2f}, indexes {d['index_bytes'] / gib:.2f} "
        f"GiB); database {d['database_bytes'] / gib:.2f} GiB",
        "  indexes: " + ", ".join(f"{name} {size / mib:.0f} MiB" for name, size in d["indexes"].items()),
        f"VACUUM (ANALYZE) kb_chunk: {_median([r['vacuum_s'] for r in runs]):.1f} s (per run "
        + ", ".join(f"{r['vacuum_s']:.1f}" for r in runs)
        + "; load " + ", ".join(r["load_maintenance"] for r in runs) + ")",
    ]
    for name in runs[0]["reindex_s"]:
        per_run = [r["reindex_s"][name] for r in runs]
        lines.append(f"REINDEX {name}: {_median(per_run):.1f} s (per run {', '.join(f'{v:.1f}' for v in per_run)})")
    pg = result["postgres_memory"]
    lines.append(f"PostgreSQL memory: {pg['processes']} processes, RSS {pg['rss_bytes'] / mib:.0f} MiB summed"
                 + (f", PSS {pg['pss_bytes'] / mib:.0f} MiB" if pg["pss_bytes"] else " (PSS not readable)")
                 + f"; shared_buffers {s['shared_buffers']}")
    lines.append(f"retrieval server side (hybrid_search total), median over runs of each run's p50/p95; "
                 f"target p95 <= {TARGETS['retrieval_p95_ms']} ms, recall@30 >= {TARGETS['recall_at_30']}:")
    for label, share in result["readable"].items():
        p50 = _median([percentile(r[label]["total_ms"], 50) for r in runs])
        p95s = [percentile(r[label]["total_ms"], 95) for r in runs]
        parts = ", ".join(f"{part} p50 {_median([percentile(r[label][key], 50) for r in runs]):.1f}/p95 "
                          f"{_median([percentile(r[label][key], 95) for r in runs]):.1f}"
                          for part, key in (("embedding", "embed_ms"), ("SQL", "sql_ms"), ("late stage", "late_ms")))
        recall = _median([statistics.mean(r[label]["recall"]) for r in runs])
        worst = min(min(r[label]["recall"]) for r in runs)
        lines += [
            f"  {label} (reads {share:.1%}): p50 {p50:.1f} ms, p95 {_median(p95s):.1f} ms "
            f"({'met' if _median(p95s) <= TARGETS['retrieval_p95_ms'] else 'NOT met'}; p95 per run "
            f"{', '.join(f'{v:.1f}' for v in p95s)}; load {', '.join(r[label]['load'] for r in runs)})",
            f"      {parts}",
            f"      dense recall@30 vs exact scan under the ACL: mean {recall:.3f} "
            f"({'met' if recall >= TARGETS['recall_at_30'] else 'NOT met'}), worst question {worst:.3f}, "
            f"fewest results kept {min(r[label]['kept_min'] for r in runs)}",
        ]
    if "ttft" in result:
        phases = result["ttft"]["phases"]
        p95s = [percentile(p["ttft_ms"], 95) for p in phases]
        lines.append(f"time to first token through the app (user in 25 groups): p50 "
                     f"{_median([percentile(p['ttft_ms'], 50) for p in phases]):.1f} ms, p95 {_median(p95s):.1f} ms "
                     f"({'met' if _median(p95s) <= TARGETS['ttft_p95_ms'] else 'NOT met'}, target "
                     f"{TARGETS['ttft_p95_ms']}; p95 per run {', '.join(f'{v:.1f}' for v in p95s)}; "
                     f"{phases[0]['refused']} refused per run; load {', '.join(p['load'] for p in phases)})")
        lines.append("      where: " + ", ".join(
            f"{name} p50 {_median([percentile(p[key], 50) for p in phases]):.1f}/p95 "
            f"{_median([percentile(p[key], 95) for p in phases]):.1f}"
            for name, key in (("question stored", "stored_ms"), ("queued", "queued_ms"),
                              ("worker to first token", "worker_first_token_ms"), ("delivered", "delivered_ms"))))
        lines.append("  app memory: " + ", ".join(f"{name} RSS {m['rss_bytes'] / mib:.0f} MiB"
                                                  for name, m in result["ttft"]["app_memory"].items()))
    lines.append("benchmark phases: " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in result["timings_s"].items()))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000, help="passages in the scratch index")
    parser.add_argument("--runs", type=int, default=3, help="repetitions of every timing (medians are printed)")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    parser.add_argument("--keep", help="keep the filled scratch database kb_eval_keep_KEEP, and reuse it when it exists")
    parser.add_argument("--skip-ttft", action="store_true", help="leave out time to first token through the app")
    parser.add_argument("--maintenance-work-mem", default="2GB",
                        help="maintenance_work_mem for the index builds (an HNSW graph built outside it is much slower)")
    parser.add_argument("--parallel-workers", type=int, default=1,
                        help="max_parallel_maintenance_workers for the index builds (2 cores: the leader and one)")
    parser.add_argument("--inner", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.chunks < 1 or args.runs < 1:
        parser.error("--chunks and --runs must be at least 1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.settings")
    os.environ["KB_ASKS_PER_MINUTE"] = "0"  # three askers ask every question: no per-user budget
    import django

    from kb.runtime.embedded import ensure_services

    ensure_services()  # an entry point, like manage.py: the settings only read where the servers are
    django.setup()
    if args.inner:
        result = inner(args)
        result["build_settings"] = {"maintenance_work_mem": args.maintenance_work_mem,
                                    "parallel_workers": args.parallel_workers}
        args.inner.write_text(json.dumps(result))
        return
    extra = ["--chunks", str(args.chunks), "--runs", str(args.runs), "--maintenance-work-mem", args.maintenance_work_mem,
             "--parallel-workers", str(args.parallel_workers), *(["--skip-ttft"] if args.skip_ttft else [])]
    result = run_in_scratch_database(SCRIPT, extra, keep=args.keep)
    for line in report(result):
        print(line)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
