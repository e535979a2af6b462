"""How often the judgement export finds the right needle for "should have answered" naming a document.

`python bench/needles.py [--eval-dir ../shared/eval]`: the set's corpus is ingested into a scratch database
(bench/_common.py), and for each of its answerable queries chat.review.evalset.needle_candidates ranks the
sentences of the query's `doc`, as the export does when an employee or a reviewer names that document.
Counted per number of passages read, required margin of the best over the next, and phrasing: the set's
needle exactly, a sentence holding it or held by it (the set's sentence boundaries differ from the
extractive reader's), another sentence, none given (the row left out); and the precision of those given.
Prints one table and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench._common import DEV_DIR, corpus_ingest, groups_create, load_average, run_in_scratch_database  # noqa: E402

SCRIPT = Path(__file__).resolve()
PASSAGES = (3, 8)  # nearest passages whose sentences are candidates
MARGINS = (0.0, 0.02, 0.05, 0.1)  # the best candidate's lead over the next, below which none is given


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.settings")
    import django

    from kb.runtime.embedded import ensure_services

    ensure_services()
    django.setup()


def outcome(found: str | None, needle: str) -> str:
    if found is None:
        return "none found"
    if found == needle:
        return "exact"
    return "overlapping" if needle in found or found in needle else "another sentence"


def run_inner(eval_dir: Path) -> dict[str, Any]:
    from django.core.management import call_command

    from chat.review.evalset import needle_candidates
    from kb.library.models import Document

    call_command("migrate", interactive=False, verbosity=0)
    acl = json.loads((eval_dir / "acl.json").read_text(encoding="utf-8"))
    corpus_ingest(acl, groups_create(acl), eval_dir)
    by_name = {d.filename: d for d in Document.objects.filter(status="ready")}
    rows = []
    for line in (eval_dir / "questions.jsonl").read_text(encoding="utf-8").splitlines():
        q = json.loads(line)
        document = by_name[q["doc"].rsplit("/", 1)[1]]
        for passages in PASSAGES:
            ranked = needle_candidates(q["query"], document, passages=passages)
            best = ranked[0][1] if ranked else None
            margin = ranked[0][0] - ranked[1][0] if len(ranked) > 1 else (1.0 if ranked else 0.0)
            rows.append({"phrasing": q["phrasing"], "passages": passages, "outcome": outcome(best, q["needle"]),
                         "margin": margin})
    return {"rows": rows, "load": load_average()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--eval-dir", type=Path, default=DEV_DIR)
    parser.add_argument("--inner", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    _setup()
    if args.inner:
        args.inner.write_text(json.dumps(run_inner(args.eval_dir)))
        return
    result = run_in_scratch_database(SCRIPT, ["--eval-dir", str(args.eval_dir.resolve())])
    kinds = ("exact", "overlapping", "another sentence", "none found")
    print("| passages | margin | phrasing | " + " | ".join(kinds) + " | precision |\n|" + " --- |" * (len(kinds) + 4))
    for passages in PASSAGES:
        for margin in MARGINS:
            for phrasing in ("doc", "ticket"):
                rows = [r for r in result["rows"] if r["passages"] == passages and r["phrasing"] == phrasing]
                found = Counter(r["outcome"] if r["margin"] >= margin else "none found" for r in rows)
                given = len(rows) - found["none found"]
                right = found["exact"] + found["overlapping"]
                print(f"| {passages} | {margin} | {phrasing} | " + " | ".join(f"{found[k]}/{len(rows)}" for k in kinds)
                      + f" | {right}/{given} |")
    print(f"load average at the end: {result['load']} (now {load_average()})")


if __name__ == "__main__":
    main()
