"""Run an evaluation set against a throwaway index, and write what it found.

The outer half (`run_isolated`) creates an empty database on the live database's
server, runs `manage.py evaluate --inner` against it in a child process, reads the
child's results and drops the database whatever happened: the live knowledge base is
never read or written, and the child's uploads go to a temporary media folder. The
inner half (`run_inner`) migrates that database, creates the set's groups and users,
ingests the corpus through the real pipeline and runs every query as its user.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote, urlencode

from django.conf import settings
from django.db import connection

from lab.evaluation import answers as answers_module
from lab.evaluation import metrics
from search.retrieval import SearchOptions

Log = Callable[[str], None]
DUMP_KEYS = ("id", "set", "user", "query", "intent", "refused", "hits")
HIT_KEYS = ("rank", "doc", "content", "start", "end", "distance", "kind")
CHUNK_KEYS = ("doc", "start", "end", "kind", "tokens", "content")
SSL_OPTIONS = ("sslmode", "sslrootcert", "sslcert", "sslkey", "sslpassword", "target_session_attrs")
JSON_FORMAT = "kb-evaluation/1"


class EvaluationError(Exception):
    """The evaluation could not run; the message says why (shown without a traceback)."""


# The evaluation set ----------------------------------------------------------------


@dataclass(frozen=True)
class EvalSet:
    root: Path
    questions: list[dict[str, Any]]
    ood: list[dict[str, Any]]
    acl: dict[str, Any]

    @property
    def corpus(self) -> Path:
        return self.root / "corpus"

    def documents(self) -> list[str]:
        """Corpus files as paths relative to corpus/ (the form every file of the set uses)."""
        from kb.library.ingest.batch import expand_paths

        return [p.relative_to(self.corpus).as_posix() for p in expand_paths([self.corpus])]


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def load_set(root: Path) -> EvalSet:
    """Read EVAL_DIR; EvaluationError names whatever is missing."""
    wanted = [root / "questions.jsonl", root / "ood.jsonl", root / "acl.json", root / "corpus"]
    missing = [p.name for p in wanted if not p.exists()]
    if missing:
        raise EvaluationError(f"{root} is not an evaluation set: missing {', '.join(missing)} (see docs/EVALUATION.md)")
    try:
        acl = json.loads((root / "acl.json").read_text(encoding="utf-8"))
        eval_set = EvalSet(root, _jsonl(root / "questions.jsonl"), _jsonl(root / "ood.jsonl"), acl)
    except (ValueError, OSError) as exc:
        raise EvaluationError(f"cannot read the evaluation set {root}: {exc}") from None
    strangers = sorted({case["user"] for case in acl.get("cases", [])} - set(acl.get("users", {})))
    if strangers:
        raise EvaluationError(f"acl.json: cases name users that `users` does not list: {', '.join(strangers)}")
    return eval_set


# Retrieval settings ------------------------------------------------------------------


def option_types() -> dict[str, type]:
    defaults = SearchOptions()
    return {f.name: type(getattr(defaults, f.name)) for f in fields(SearchOptions)}


def parse_overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """`key=value` strings as typed SearchOptions fields; a bad key or value is an EvaluationError."""
    types = option_types()
    parsed: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or key not in types:
            raise EvaluationError(f"--set {pair!r}: unknown setting; valid keys: {', '.join(sorted(types))}")
        try:
            parsed[key] = _parse_value(raw, types[key])
        except ValueError:
            raise EvaluationError(f"--set {pair!r}: {raw!r} is not a valid {types[key].__name__}") from None
    return parsed


def _parse_value(raw: str, kind: type) -> Any:
    if kind is bool:
        lowered = raw.lower()
        if lowered in {"1", "true", "yes", "on"}:
            return True
        if lowered in {"0", "false", "no", "off"}:
            return False
        raise ValueError(raw)
    return kind(raw)


# Outer half: an isolated database ------------------------------------------------


def _server_params(server: Mapping[str, Any]) -> dict[str, Any]:
    options = server.get("OPTIONS") or {}
    params = {
        "dbname": server.get("NAME"),
        "user": server.get("USER") or None,
        "password": server.get("PASSWORD") or None,
        "host": server.get("HOST") or None,
        "port": server.get("PORT") or None,
        **{k: options[k] for k in SSL_OPTIONS if k in options},
    }
    return {k: v for k, v in params.items() if v is not None}


def database_url(server: Mapping[str, Any], name: str) -> str:
    """A DATABASE_URL for database `name` on the same server, with the same credentials."""
    user = quote(str(server.get("USER") or ""), safe="")
    password = server.get("PASSWORD")
    auth = f"{user}:{quote(str(password), safe='')}@" if password else (f"{user}@" if user else "")
    host = str(server.get("HOST") or "localhost")
    if host.startswith("/"):
        host = quote(host, safe="")  # a Unix socket directory
    elif ":" in host:
        host = f"[{host}]"
    port = f":{server['PORT']}" if server.get("PORT") else ""
    options = server.get("OPTIONS") or {}
    query = urlencode({k: options[k] for k in SSL_OPTIONS if k in options})
    return f"postgresql://{auth}{host}{port}/{name}" + (f"?{query}" if query else "")


@contextmanager
def scratch_database(server: Mapping[str, Any], *, keep: str | None = None) -> Iterator[str]:
    """Create an empty database on `server` and drop it on the way out, even after a failure.

    With `keep`, the database is named after it, created only when missing, and kept for the next run.
    """
    import psycopg
    from psycopg import sql

    name = f"kb_eval_keep_{keep}" if keep else f"kb_eval_{secrets.token_hex(6)}"
    params = _server_params(server)
    try:
        with psycopg.connect(**params, autocommit=True, connect_timeout=10) as admin:
            exists = keep and admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
            if not exists:
                admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.Error as exc:
        raise EvaluationError(
            f"cannot create the scratch database {name} on the knowledge base's server: {exc}".strip()
            + " (the database role needs CREATEDB, and the server the vector and pg_trgm extensions)"
        ) from None
    if keep:
        yield name
        return
    try:
        yield name
    finally:
        with psycopg.connect(**params, autocommit=True, connect_timeout=10) as admin:
            # FORCE: a child killed mid-query may leave a session behind.
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def run_isolated(*, eval_dir: Path, overrides: Sequence[str], log: Log, answers: bool = False,
                 backend: str | None = None, reuse_index: str | None = None) -> dict[str, Any]:
    """Index and query `eval_dir` in a scratch database; returns the inner run's results."""
    started = time.perf_counter()
    with (scratch_database(connection.settings_dict, keep=reuse_index) as name,
          tempfile.TemporaryDirectory(prefix="kb-eval-") as tmp):
        log(f"scratch database {name} " + ("(kept for the next run)" if reuse_index else "(dropped at the end)"))
        out = Path(tmp) / "results.json"
        media = Path(tmp) / "media"
        env = dict(os.environ)
        env.update(
            DATABASE_URL=database_url(connection.settings_dict, name),
            REDIS_URL=settings.REDIS_URL,
            SECRET_KEY=settings.SECRET_KEY,
            KB_MEDIA_ROOT=str(media),
            PYTHONUNBUFFERED="1",
        )
        command = [sys.executable, str(settings.BASE_DIR / "manage.py"), "evaluate", str(eval_dir), "--inner", str(out)]
        for pair in overrides:
            command += ["--set", pair]
        if answers:
            command += ["--answers", *(["--backend", backend] if backend else [])]
        if reuse_index:
            command += ["--reuse-index", reuse_index]
        # The child reports progress on stderr, which it shares with us.
        child = subprocess.run(command, env=env, cwd=settings.BASE_DIR, stdout=subprocess.PIPE, text=True)
        if child.returncode != 0 or not out.exists():
            tail = (child.stdout or "").strip()[-2000:]
            detail = f": {tail}" if tail else " (its error is above)"
            raise EvaluationError(f"the evaluation run failed (exit {child.returncode}){detail}")
        payload: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    payload["timings"]["total_s"] = time.perf_counter() - started
    return payload


# Inner half: index and query ----------------------------------------------------------


def evaluator_name(acl: Mapping[str, Any]) -> str:
    """A username for the all-groups querying user that no user of the set already has."""
    taken = set(acl.get("users", {}))
    name, i = "evaluator", 1
    while name in taken:
        name, i = f"evaluator-{i}", i + 1
    return name


def _create_people(eval_set: EvalSet, evaluator: str) -> dict[str, Any]:
    from django.contrib.auth.models import Group, User

    groups = {name: Group.objects.create(name=name) for name in metrics.restricted_groups(eval_set.acl)}
    people: dict[str, Any] = {}
    memberships = {**eval_set.acl.get("users", {}), evaluator: list(groups)}
    for username, names in memberships.items():
        user = User.objects.create_user(username)  # no password: nobody logs in to a scratch index
        user.groups.set([groups[g] for g in names if g != metrics.EVERYONE])
        people[username] = user
    return people


def _ingest(eval_set: EvalSet, log: Log) -> dict[str, Any]:
    """Upload the corpus, one folder per directory, each file restricted to its acl.json group."""
    from django.contrib.auth.models import Group

    from kb.library.ingest.batch import ingest_paths
    from kb.library.models import Folder

    doc_groups = eval_set.acl.get("groups", {})
    batches: dict[tuple[str, str], list[Path]] = {}
    for doc in eval_set.documents():
        parent = str(PurePosixPath(doc).parent)
        batches.setdefault((parent, doc_groups.get(doc, metrics.EVERYONE)), []).append(eval_set.corpus / doc)
    summary: dict[str, list[str]] = {"ready": [], "failed": [], "unchanged": [], "pending": []}
    total, done = sum(len(p) for p in batches.values()), 0
    for (parent, group), paths in sorted(batches.items()):
        folder = Folder.objects.get_or_create(name=parent)[0] if parent != "." else None
        restricted = None if group == metrics.EVERYONE else [Group.objects.get(name=group)]

        def progress(name: str) -> None:
            nonlocal done
            done += 1
            log(f"indexed {done}/{total} {Path(name).relative_to(eval_set.corpus).as_posix()}")

        batch = ingest_paths(paths, folder=folder, groups=restricted, sync=True, progress=progress)
        for key in summary:
            summary[key] += [_relative(line, eval_set.corpus) for line in getattr(batch, key)]
    return summary


def _relative(line: str, corpus: Path) -> str:
    return line.replace(f"{corpus}/", "")


def _doc_paths() -> dict[int, str]:
    from kb.library.models import Document

    return {
        d.pk: (f"{d.folder.name}/{d.filename}" if d.folder else d.filename)
        for d in Document.objects.select_related("folder")
    }


def _chunks(paths: Mapping[int, str]) -> list[dict[str, Any]]:
    from kb.library.models import Chunk

    rows = Chunk.objects.order_by("document_id", "ordinal").values_list(
        "document_id", "start", "end", "kind", "tokens", "content"
    )
    chunks = [dict(zip(CHUNK_KEYS, (paths[doc], *rest), strict=True)) for doc, *rest in rows]
    return sorted(chunks, key=lambda c: (c["doc"], c["start"]))


def _queries(eval_set: EvalSet, evaluator: str) -> list[dict[str, Any]]:
    """Every query of the set, in dump order: questions and ood as the evaluator, ACL cases as their users."""
    out = [{"id": q["id"], "set": "questions", "user": evaluator, "query": q["query"]} for q in eval_set.questions]
    out += [{"id": q["id"], "set": "ood", "user": evaluator, "query": q["query"]} for q in eval_set.ood]
    out += [
        {"id": case_id, "set": "acl", "user": case["user"], "query": case["query"]}
        for case_id, case in metrics.acl_case_ids(eval_set.acl)
    ]
    return out


def _existing_index(evaluator: str) -> dict[str, Any] | None:
    """People and ingestion summary of an index a previous --reuse-index run built here, or None."""
    from django.contrib.auth.models import User
    from django.db.utils import ProgrammingError

    try:
        if not User.objects.filter(username=evaluator).exists():
            return None
    except ProgrammingError:  # not migrated yet
        return None
    people = {u.username: u for u in User.objects.all()}
    ready = list(_doc_paths().values())
    return {"people": people, "ingest": {"ready": ready, "failed": [], "unchanged": [], "pending": []}}


def run_inner(*, eval_set: EvalSet, overrides: Mapping[str, Any], log: Log, answers: bool = False,
              backend: str | None = None, reuse: bool = False) -> dict[str, Any]:
    """Migrate the (empty, scratch) database, build the index, run every query. Never call it on a live database.

    `answers`: also answer every query (with `backend`, default the configured one). `reuse`: the database holds an index an
    earlier run of this set built; only the queries run again.
    """
    from django.core.management import call_command

    from kb.library.access import visible_documents
    from search.retrieval import hybrid_search

    timings: dict[str, Any] = {}
    started = time.perf_counter()
    call_command("migrate", interactive=False, verbosity=0, stdout=StringIO())
    timings["migrate_s"] = time.perf_counter() - started

    evaluator = evaluator_name(eval_set.acl)
    existing = _existing_index(evaluator) if reuse else None
    started = time.perf_counter()
    if existing:
        log("reusing the index built by an earlier run")
        people, ingest = existing["people"], existing["ingest"]
    else:
        people = _create_people(eval_set, evaluator)
        ingest = _ingest(eval_set, log)
    timings["ingest_s"] = time.perf_counter() - started
    paths = _doc_paths()
    chunks = _chunks(paths)

    options = SearchOptions(**overrides)
    visible = {name: set(visible_documents(user).values_list("pk", flat=True)) for name, user in people.items()}
    queries = _queries(eval_set, evaluator)
    records, outside_acl = [], 0
    started = time.perf_counter()
    try:
        answerer = answers_module.answerer(backend) if answers else None
    except (RuntimeError, ImportError, TypeError, ValueError) as exc:
        raise EvaluationError(f"--answers{f' --backend {backend}' if backend else ''}: {exc}") from None
    for i, query in enumerate(queries, 1):
        began = time.perf_counter()
        result = hybrid_search(user=people[query["user"]], query=query["query"], options=options)
        elapsed = (time.perf_counter() - began) * 1000
        answer = (answerer.answer(user=people[query["user"]], query=query["query"], result=result, started=began,
                                  paths=paths) if answerer else None)
        outside_acl += sum(1 for hit in result.hits if hit.document_id not in visible[query["user"]])
        hits = []
        for rank, hit in enumerate(result.hits, 1):
            line: dict[str, Any] = {
                "rank": rank, "doc": paths[hit.document_id], "content": hit.content, "start": hit.start,
                "end": hit.end, "distance": hit.distance, "kind": hit.kind,
            }
            if hit.passed:
                line["passed"] = True
            hits.append(line)
        records.append({
            **query, "intent": result.intent, "refused": not result.answerable, "hits": hits,
            "nearest": result.nearest_distance, "ms": elapsed, **({"answer": answer} if answer else {}),
            "signals": result.signals.as_json() if result.signals else None, "probability": result.probability,
            "space": result.space,
        })
        if i % 25 == 0 or i == len(queries):
            log(f"queried {i}/{len(queries)}")
    timings["queries_s"] = time.perf_counter() - started
    return {
        "evaluator": evaluator,
        "options": asdict(options),
        "overrides": dict(overrides),
        "backend": answerer.backend if answerer else None,
        "ingest": ingest,
        "records": records,
        "chunks": chunks,
        "outside_acl": outside_acl,
        "timings": timings,
    }


# Scoring and writing ---------------------------------------------------------------------


def score(eval_set: EvalSet, run: Mapping[str, Any]) -> dict[str, Any]:
    """The report's figures for an inner run, plus timings and ingestion problems."""
    figures = metrics.score_run(
        questions=eval_set.questions, ood=eval_set.ood, acl=eval_set.acl, records=run["records"],
        chunks=run["chunks"], evaluator=run["evaluator"], threshold=run["options"]["threshold"],
    )
    query_ms = [r["ms"] for r in run["records"]]
    figures["timings"] = {
        **run["timings"],
        "query_p50_ms": metrics.percentile(query_ms, 50),
        "query_p95_ms": metrics.percentile(query_ms, 95),
    }
    figures["ingest"] = dict(run["ingest"])
    figures["leaks"]["outside_db_acl"] = run["outside_acl"]
    if run.get("backend"):
        figures["answers"] = answers_module.score_answers(questions=eval_set.questions, ood=eval_set.ood,
                                                   records=run["records"])
        figures["answers"]["backend"] = run["backend"]
    return figures


def query_summaries(eval_set: EvalSet, run: Mapping[str, Any], figures: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One small record per query for --json: enough to pair two runs query by query."""
    questions = {q["id"]: q for q in eval_set.questions}
    ood = {o["id"]: o for o in eval_set.ood}
    cases = {case_id: case for case_id, case in metrics.acl_case_ids(eval_set.acl)}
    leaks_by_case = {c["id"]: c["leaks"] for c in figures["acl"]["cases"]}
    out = []
    for record in run["records"]:
        summary = {k: record[k] for k in ("id", "set", "user", "query", "intent", "refused", "nearest", "ms")}
        if record["set"] == "questions":
            q = questions[record["id"]]
            rank = figures["ranks"][record["id"]]
            answer = record["hits"][rank - 1]["distance"] if rank else None
            summary.update(gt=q["gt"], phrasing=q["phrasing"], rank=rank, answer_distance=answer,
                           refusal_correct=not record["refused"],
                           **{k: q[k] for k in ("lang", "doc_lang") if k in q})
        elif record["set"] == "ood":
            summary.update(refusal_correct=record["refused"], **{k: ood[record["id"]][k] for k in ("lang",)
                                                                 if k in ood[record["id"]]})
        else:
            must_find = cases[record["id"]].get("must_find")
            summary.update(must_find=must_find, leaks=leaks_by_case[record["id"]],
                           refusal_correct=record["refused"] if must_find is None else not record["refused"])
        summary["docs"] = [h["doc"] for h in record["hits"]]
        summary.update(signals=record.get("signals"), space=record.get("space"))  # what decided answer/refuse
        if "answer" in record:
            summary["answer"] = _dump_answer(record["answer"])
            summary["answer"].update(first_token_ms=record["answer"]["first_token_ms"],
                                     unsupported=record["answer"].get("unsupported", []),
                                     match=record["answer"].get("match"),
                                     match_signals=record["answer"].get("match_signals"),
                                     **figures.get("answers", {}).get("per_question", {}).get(record["id"], {}))
        out.append(summary)
    return out


def _jsonl_write(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def dump_lines(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Records in exactly the dump shape of docs/DESIGN.md#dump-format (run-only keys such as timings left out)."""
    lines = []
    for record in records:
        line = {k: record[k] for k in DUMP_KEYS if k != "hits"}
        line["hits"] = [{**{k: h[k] for k in HIT_KEYS}, **({"passed": True} if h.get("passed") else {})}
                        for h in record["hits"]]
        if "answer" in record:
            line["answer"] = _dump_answer(record["answer"])
        lines.append(line)
    return lines


def _dump_answer(answer: Mapping[str, Any]) -> dict[str, Any]:
    """The dump's answer: what a reader got, with the citations' locators (no scoring aids)."""
    return {"text": answer["text"], "refused": answer["refused"],
            "citations": [dict(c) for c in answer["citations"]]}


def write_dump(path: Path, records: Sequence[Mapping[str, Any]]) -> None:
    _jsonl_write(path, dump_lines(records))


def write_chunks(path: Path, chunks: Sequence[Mapping[str, Any]]) -> None:
    _jsonl_write(path, [{k: c[k] for k in CHUNK_KEYS} for c in chunks])


def git_commit() -> str | None:
    try:
        found = subprocess.run(["git", "rev-parse", "--short", "HEAD"],  # noqa: S607  (git from PATH)
                               cwd=settings.BASE_DIR, capture_output=True, text=True, timeout=10)
    except OSError:
        return None
    return found.stdout.strip() or None


def report_json(eval_set: EvalSet, run: Mapping[str, Any], figures: Mapping[str, Any], *, when: datetime,
                commit: str | None) -> dict[str, Any]:
    return {
        "format": JSON_FORMAT,
        "set": str(eval_set.root),
        "date": when.isoformat(timespec="seconds"),
        "commit": commit,
        "evaluator": run["evaluator"],
        "options": run["options"],
        "overrides": run["overrides"],
        "figures": {k: v for k, v in figures.items() if k != "ranks"}
        | ({"answers": {k: v for k, v in figures["answers"].items() if k != "per_question"}}
           if "answers" in figures else {}),
        "records": query_summaries(eval_set, run, figures),
    }


def load_report(path: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EvaluationError(f"cannot read {path}: {exc}") from None
    if data.get("format") != JSON_FORMAT or not isinstance(data.get("records"), list):
        raise EvaluationError(f"{path} is not an `evaluate --json` file ({JSON_FORMAT})")
    return data


# The printed report ------------------------------------------------------------------------


def _cell(r: Mapping[str, Any]) -> str:
    return f"{r['rate']:.3f} [{r['ci'][0]:.2f},{r['ci'][1]:.2f}]"


def _share(r: Mapping[str, Any]) -> str:
    return f"{r['count']}/{r['n']} = {r['rate']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]"


def render_table(figures: Mapping[str, Any], *, title: str) -> str:
    """The human report: every figure of the JSON, laid out for a terminal."""
    c = figures["counts"]
    lines = [
        title,
        f"{c['documents']} documents, {c['chunks']} chunks · {c['questions']} questions "
        f"({c['ground_truths']} ground truths) · {c['ood']} out-of-domain · {c['acl_cases']} ACL cases",
    ]
    ingest = figures["ingest"]
    for key in ("failed", "unchanged", "pending"):
        lines += [f"  NOT INDEXED ({key}): {item}" for item in ingest.get(key, [])]
    lines += ["", "Retrieval: a hit is a returned chunk that contains the whole needle · Wilson 95% intervals",
              f"{'slice':<20}{'n':>5}  " + "".join(f"{f'R@{k}':<20}" for k in metrics.KS) + "MRR"]
    for name, block in figures["retrieval"].items():
        cells = "".join(f"{_cell(block[f'R@{k}']):<20}" for k in metrics.KS)
        lines.append(f"{name:<20}{block['n']:>5}  {cells}{block['MRR']:.3f}")

    d, t = figures["destroyed"], figures["truncated"]
    lines += [
        "",
        f"Answers destroyed (no chunk holds the needle whole): {d['count']}/{d['of']}"
        + (f"  {', '.join(d['gts'])}" if d["gts"] else ""),
        f"Truncated chunks (over the {t['window']}-token window): {t['count']}/{t['of']}",
        f"Intent accuracy: {_share(figures['intent'])}   "
        + ", ".join(f"{k} {v}" for k, v in sorted(figures["intent"]["confusion"].items())),
    ]
    r = figures["refusal"]
    lines += [
        "",
        f"Refusal as configured (the answerability model; the distance threshold {r['threshold']:.3f} "
        "where it is off, and in the sweep)",
        f"  out-of-domain refused   {_share(r['ood_refused'])}",
        *(f"    {kind:<20}  {v['count']}/{v['n']}" for kind, v in r["ood_by_kind"].items()),
        f"  in-domain refused       {_share(r['in_domain_refused'])}",
        *_sweep_lines(figures["sweep"], r["threshold"]),
    ]
    if "languages" in figures:
        lines += _language_lines(figures["languages"])
    a = figures["acl"]
    lines += ["", f"ACL cases: {a['leaks']} leaks · must_find found in top {metrics.DEPTH}: "
                  f"{a['must_find']['count']}/{a['must_find']['n']} · refused when nothing may be found: "
                  f"{a['refused_when_null']['count']}/{a['refused_when_null']['n']}"]
    for case in a["cases"]:
        if case["must_find"]:
            outcome = f"found {case['must_find']}" if case["found"] else f"MISSED {case['must_find']}"
        else:
            outcome = "refused" if case["refused"] else "ANSWERED (should refuse)"
        lines.append(f"  {case['id']:<7}{case['user']:<10}leaks {case['leaks']:<3} {outcome}")
    leaks = figures["leaks"]
    by_set = ", ".join(f"{k} {v}" for k, v in leaks["by_set"].items())
    lines += [
        "",
        f"Permission leaks over every query: {leaks['total']} in {leaks['hits_checked']} hits ({by_set}); "
        f"hits outside the user's readable documents in the database: {leaks['outside_db_acl']}",
    ]
    if "answers" in figures:
        lines += answers_module.render_answers(figures["answers"], backend=figures["answers"]["backend"])
    tm = figures["timings"]
    lines += [
        "",
        f"Timings: migrate {tm['migrate_s']:.1f} s · ingest {tm['ingest_s']:.1f} s · "
        f"query p50 {tm['query_p50_ms']:.1f} ms / p95 {tm['query_p95_ms']:.1f} ms · "
        f"total {tm.get('total_s', 0):.1f} s",
    ]
    return "\n".join(lines)


def _language_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The multilingual table: recall and refusals per question language, document language, cross-language."""
    def count(r: Mapping[str, Any] | None) -> str:
        return f"{r['count']}/{r['n']}" if r else "-"

    lines = ["", "Languages (lang: the question's, doc_lang: the answer's document's; cross-language: they differ)",
             f"{'slice':<20}{'n':>5}  " + "".join(f"{f'R@{k}':<8}" for k in metrics.KS)
             + f"{'MRR':<8}{'in-domain refused':<20}out-of-domain refused"]
    for row in rows:
        recall = ("".join(f"{row[f'R@{k}']['rate']:<8.3f}" for k in metrics.KS) + f"{row['MRR']:<8.3f}"
                  if row["n"] else " " * 8 * (len(metrics.KS) + 1))
        lines.append(f"{row['slice']:<20}{row['n']:>5}  {recall}{count(row.get('in_domain_refused')):<20}"
                     f"{count(row.get('ood_refused'))}")
    return lines


def _sweep_lines(sweep: Sequence[Mapping[str, float]], threshold: float) -> list[str]:
    """A few rows of the threshold sweep around the configured value, and the bluff-free edge."""
    safe = [row for row in sweep if row["ood_answered"] == 0]
    lines = ["  sweep (refused = no candidate within the threshold):  threshold  in-domain refused  OOD answered"]
    wanted = {round(threshold + d, 4) for d in (-0.10, -0.05, 0.0, 0.05, 0.10)}
    for row in sweep:
        if row["threshold"] in wanted:
            mark = "  <- configured" if abs(row["threshold"] - threshold) < 1e-9 else ""
            lines.append(f"{'':>56}{row['threshold']:.3f}      {row['in_domain_refused']:.3f}"
                         f"              {row['ood_answered']:.3f}{mark}")
    if safe:
        edge = max(safe, key=lambda row: row["threshold"])
        lines.append(f"  highest threshold with no out-of-domain query answered: {edge['threshold']:.3f} "
                     f"(in-domain refused there: {edge['in_domain_refused']:.3f})")
    return lines


def render_compare(result: Mapping[str, Any], *, a: str, b: str) -> str:
    lines = [
        f"Paired comparison: A = {a}", f"                   B = {b}",
        f"{result['paired_questions']} answerable queries in both"
        + (f" ({result['only_in_a']} only in A, {result['only_in_b']} only in B)"
           if result["only_in_a"] or result["only_in_b"] else ""),
        "",
        f"{'metric':<18}{'A':>8}{'B':>8}{'A wins':>9}{'B wins':>9}{'ties':>7}   sign test p (two-sided, exact)",
    ]
    for name, m in result["metrics"].items():
        counts = f"{m['wins']:>9}{m['losses']:>9}{m['ties']:>7}"
        lines.append(f"{name:<18}{m['a']:>8.3f}{m['b']:>8.3f}{counts}   {m['p']:.4g}")
    return "\n".join(lines)


def report_title(eval_set: EvalSet, *, when: datetime, commit: str | None, overrides: Mapping[str, Any]) -> str:
    settings_note = " · " + ", ".join(f"{k}={v}" for k, v in overrides.items()) if overrides else ""
    return (f"Evaluation of {eval_set.root} · {when.strftime('%Y-%m-%d %H:%M')} UTC · "
            f"commit {commit or 'unknown'}{settings_note}")


def now() -> datetime:
    return datetime.now(UTC)
