"""Bytes per passage against retrieval and answer quality (issue 51 item 1).

    .venv/bin/python bench/storage.py [--sets ../shared/eval demo/eval-formats lab/eval-multilingual]
                                      [--options coarse exact3 exact8 nolate] [--out DIR]

For each evaluation set, `manage.py evaluate SET --answers --reuse-index storage_<set>` builds the index once
with the running code (kept as kb_eval_keep_storage_<set>; later runs only query) and is the baseline: the
default late stage (coarse word codes for the top KB_SEARCH_LATE_DEPTH, the first KB_SEARCH_LATE_EXACT scored
again on exact word pieces). The bytes are what the index holds: `pg_total_relation_size` of the chunk table
(rows, TOAST, every index) over its rows, then each column's stored size and each index's share. Each option is
the same evaluation with one setting changed (`evaluate --set`), paired with the baseline per question: R@1,
R@4, MRR, needle in answer, passage cited (option's figure, +wins/−losses, exact two-sided sign test), with
the query and first-token times (p50/p95) and the load average beside them.

Options: `coarse` (no exact pass: late_exact=0), `exactN` (late_exact=N), `nolate` (no late stage:
late_depth=0). The answerability signals and the answer's sentences read exact word pieces in every option.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.settings")

from bench._common import DEV_DIR, load_average  # noqa: E402

SETS = [DEV_DIR, ROOT / "demo" / "eval-formats", ROOT / "lab" / "eval-multilingual"]
OPTIONS = ["coarse", "exact3", "exact8", "nolate"]
FIGURES = ("R@1", "R@4", "MRR", "needle", "cited")


def overrides(option: str) -> list[str]:
    if option == "coarse":
        return ["late_exact=0"]
    if option == "nolate":
        return ["late_depth=0"]
    if m := re.fullmatch(r"exact(\d+)", option):
        return [f"late_exact={m.group(1)}"]
    raise SystemExit(f"unknown option {option!r}: coarse, exactN or nolate")


def evaluate(eval_dir: Path, name: str, out: Path, settings: Sequence[str] = ()) -> dict[str, Any]:
    command = [sys.executable, str(ROOT / "manage.py"), "evaluate", str(eval_dir), "--answers", "--reuse-index", name,
               "--json", str(out)]
    for setting in settings:
        command += ["--set", setting]
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    report: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return report


def stored_bytes(conninfo: dict[str, Any], database: str) -> dict[str, float]:
    """Per chunk: the table's total (rows, TOAST, indexes), its rows with TOAST, each column's stored size and
    each index's share."""
    import psycopg

    def one(sql: str, params: Sequence[Any] = ()) -> Any:
        row = db.execute(sql, params).fetchone()
        assert row is not None  # noqa: S101 (aggregates always return a row)
        return row[0]

    with psycopg.connect(**conninfo | {"dbname": database}) as db:
        rows = one("SELECT greatest(count(*), 1) FROM kb_chunk")
        out = {"chunks": float(rows), "total": one("SELECT pg_total_relation_size('kb_chunk')") / rows,
               "table": one("SELECT pg_table_size('kb_chunk')") / rows}
        for (index,) in db.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'kb_chunk' ORDER BY 1"):
            out[f"index {index}"] = one("SELECT pg_relation_size(%s::regclass)", [index]) / rows
        columns = [c for (c,) in db.execute("SELECT column_name FROM information_schema.columns "
                                            "WHERE table_name = 'kb_chunk' ORDER BY ordinal_position")]
        for column in columns:
            out[f"column {column}"] = float(one(f'SELECT avg(coalesce(pg_column_size("{column}"), 0)) FROM kb_chunk')  # noqa: S608 (catalog names)
                                            or 0)
    return out


def totals(report: dict[str, Any]) -> dict[str, list[float]]:
    rows = [r for r in report["records"] if r["set"] == "questions"]
    return {
        "R@1": [float(r.get("rank") is not None and r["rank"] <= 1) for r in rows],
        "R@4": [float(r.get("rank") is not None and r["rank"] <= 4) for r in rows],
        "MRR": [1 / r["rank"] if r.get("rank") else 0.0 for r in rows],
        "needle": [float(bool(r.get("answer", {}).get("needle"))) for r in rows],
        "cited": [float(bool(r.get("answer", {}).get("cited"))) for r in rows],
    }


def paired(base: dict[str, Any], other: dict[str, Any]) -> dict[str, tuple[float, int, int, float]]:
    """Per figure: (option's count minus the baseline's, wins, losses, sign test p) over the set's questions."""
    from lab.evaluation.metrics import sign_test

    def flags(report: dict[str, Any]) -> dict[str, dict[str, float]]:
        rows = [r for r in report["records"] if r["set"] == "questions"]
        values = totals(report)
        return {figure: {r["id"]: values[figure][i] for i, r in enumerate(rows)} for figure in FIGURES}

    mine, theirs = flags(other), flags(base)
    result = {}
    for figure in FIGURES:
        a, b = mine[figure], theirs[figure]
        wins = sum(1 for k in a if a[k] > b.get(k, 0.0) + 1e-9)
        losses = sum(1 for k in a if a[k] < b.get(k, 0.0) - 1e-9)
        result[figure] = (round(sum(a.values()) - sum(b.values()), 3), wins, losses, sign_test(wins, losses))
    return result


def timings(report: dict[str, Any]) -> str:
    figures = report["figures"]
    query, answers = figures["timings"], figures.get("answers", {})
    return (f"{query['query_p50_ms']:.0f}/{query['query_p95_ms']:.0f} | "
            f"{answers.get('first_token_p50_ms', float('nan')):.0f}/{answers.get('first_token_p95_ms', float('nan')):.0f}")


def run(sets: Sequence[Path], options: Sequence[str], out: Path) -> None:
    import django

    from kb.runtime.embedded import ensure_services

    ensure_services()
    django.setup()
    from django.db import connection

    from lab.evaluation.runner import _server_params, git_commit

    conninfo = {k: v for k, v in _server_params(connection.settings_dict).items() if k != "dbname"}
    conninfo["dbname"] = "postgres"
    out.mkdir(parents=True, exist_ok=True)
    print(f"# storage, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {git_commit()}")
    for eval_dir in sets:
        tag = re.sub(r"\W", "_", eval_dir.resolve().name)[:16]
        name = f"storage_{tag}"
        started = time.perf_counter()
        base = evaluate(eval_dir, name, out / f"{tag}-default.json")
        sizes = stored_bytes(conninfo, f"kb_eval_keep_{name}")
        print(f"\n## {eval_dir}: {sizes['total']:.0f} bytes per passage ({sizes['chunks']:.0f} chunks; rows with TOAST "
              f"{sizes['table']:.0f}; baseline run {time.perf_counter() - started:.0f} s, load {load_average()})\n")
        print(" · ".join(f"{key} {value:.0f}" for key, value in sizes.items() if key.startswith(("index", "column"))
                         and value >= 16))
        print("\n| option | R@1 | R@4 | MRR | needle | cited | query ms p50/p95 | first token ms p50/p95 | load |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        base_totals = {f: sum(v) for f, v in totals(base).items()}
        n = len(totals(base)["R@1"])
        print("| default | " + " | ".join(f"{base_totals[f] / (n if f == 'MRR' else 1):.3g}" for f in FIGURES)
              + f" | {timings(base)} | {load_average()} |", flush=True)
        for option in options:
            report = evaluate(eval_dir, name, out / f"{tag}-{option}.json", overrides(option))
            pairs = paired(base, report)
            cells = [f"{(base_totals[f] + pairs[f][0]) / (n if f == 'MRR' else 1):.3g} "
                     f"(+{pairs[f][1]}/−{pairs[f][2]}, p={pairs[f][3]:.2f})" for f in FIGURES]
            print(f"| {option} | " + " | ".join(cells) + f" | {timings(report)} | {load_average()} |", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", type=Path, default=SETS)
    parser.add_argument("--options", nargs="+", default=OPTIONS)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "storage", help="the evaluate --json files")
    arguments = parser.parse_args()
    run(arguments.sets, arguments.options, arguments.out)
