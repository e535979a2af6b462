from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab.evaluation import metrics, runner
from lab.evaluation.runner import EvaluationError


class Command(BaseCommand):
    help = (
        "Score retrieval on an evaluation set (the layout of docs/EVALUATION.md) in a scratch database that is "
        "dropped afterwards; the live knowledge base is never touched. See docs/EVALUATION.md."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("eval_dir", nargs="?", type=Path, help="questions.jsonl, ood.jsonl, acl.json, corpus/")
        parser.add_argument("--json", type=Path, dest="json_out", help="Write every figure and per-query record here")
        parser.add_argument("--dump", type=Path, help="Write the ranked hits of every query (JSON lines, docs/DESIGN.md)")
        parser.add_argument("--chunks", type=Path, help="Write every indexed chunk (JSON lines, docs/DESIGN.md)")
        parser.add_argument("--plot", type=Path, help="Write distance distributions and the threshold sweep (PNG)")
        parser.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE",
                            help="Override a retrieval setting for this run, e.g. threshold=0.5 or rerank=false")
        parser.add_argument("--compare", nargs=2, type=Path, metavar=("A.json", "B.json"),
                            help="Paired sign test of two earlier --json runs (no EVAL_DIR needed)")
        parser.add_argument("--answers", action="store_true",
                            help="Also answer every query (chat.answering, as /api/ask does) and score the answers")
        parser.add_argument("--backend", help="The answer backend for --answers (default: KB_ANSWER_BACKEND)")
        parser.add_argument("--reuse-index", metavar="NAME",
                            help="Keep the scratch database as kb_eval_keep_NAME and reuse its index on the next "
                                 "run with this NAME (only the queries run again; use a new NAME after changing "
                                 "ingestion or the set)")
        # The child process that works inside the scratch database; not for people.
        parser.add_argument("--inner", type=Path, help=argparse.SUPPRESS)

    def handle(self, *args: Any, eval_dir: Path | None, json_out: Path | None, dump: Path | None,
               chunks: Path | None, plot: Path | None, overrides: list[str], compare: list[Path] | None,
               inner: Path | None, answers: bool, backend: str | None, reuse_index: str | None,
               **options: Any) -> str:
        try:
            if compare:
                return self._compare(*compare)
            if eval_dir is None:
                raise CommandError("give EVAL_DIR, or --compare A.json B.json")
            parsed = runner.parse_overrides(overrides)
            eval_set = runner.load_set(eval_dir)
            if plot:
                _plotting_available()  # before minutes of indexing, not after
            if reuse_index and not re.fullmatch(r"[a-z0-9_]{1,30}", reuse_index):
                raise CommandError(f"--reuse-index {reuse_index!r}: use 1-30 lower-case letters, digits or _")
            if inner is not None:
                run = runner.run_inner(eval_set=eval_set, overrides=parsed, log=self._log, answers=answers,
                                       backend=backend, reuse=bool(reuse_index))
                inner.write_text(json.dumps(run, ensure_ascii=False), encoding="utf-8")
                return ""
            run = runner.run_isolated(eval_dir=eval_dir, overrides=overrides, log=self._log, answers=answers,
                                      backend=backend, reuse_index=reuse_index)
        except EvaluationError as exc:
            raise CommandError(str(exc)) from None

        figures = runner.score(eval_set, run)
        when, commit = runner.now(), runner.git_commit()
        title = runner.report_title(eval_set, when=when, commit=commit, overrides=parsed)
        report = runner.report_json(eval_set, run, figures, when=when, commit=commit)
        if dump:
            runner.write_dump(dump, run["records"])
        if chunks:
            runner.write_chunks(chunks, run["chunks"])
        if json_out:
            json_out.parent.mkdir(parents=True, exist_ok=True)
            json_out.write_text(json.dumps(report, indent=1, ensure_ascii=False), encoding="utf-8")
        if plot:
            from lab.evaluation.plot import write_plot

            write_plot(plot, records=report["records"], sweep=figures["sweep"],
                       threshold=run["options"]["threshold"], title=title)
        return runner.render_table(figures, title=title)

    def _compare(self, a: Path, b: Path) -> str:
        first, second = runner.load_report(a), runner.load_report(b)
        result = metrics.compare_runs(first["records"], second["records"])
        text = runner.render_compare(result, a=str(a), b=str(b))
        if first.get("set") != second.get("set"):
            # Same ids on different sets are different questions: the pairing means nothing.
            text = f"WARNING: A ran on {first.get('set')}, B on {second.get('set')}\n{text}"
        return text

    def _log(self, line: str) -> None:
        self.stderr.write(f"evaluate: {line}")


def _plotting_available() -> None:
    try:
        import matplotlib  # noqa: F401  (only --plot needs it)
    except ImportError:
        raise CommandError("--plot needs matplotlib: pip install matplotlib") from None
