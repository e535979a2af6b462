from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab import calibration
from lab.evaluation import runner
from lab.evaluation.runner import EvaluationError
from search.answerability import SIGNALS, AnswerabilityError


class Command(BaseCommand):
    help = (
        "Fit the answer/refuse model (search.answerability) on an evaluation set's in-domain and out-of-domain "
        "questions, with cross-validation, in a scratch database like `evaluate`; writes the model (JSON for "
        "KB_ANSWERABILITY_FILE) and prints the cross-validated frontier. See docs/RETRIEVAL.md, Refusal."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("eval_dir", type=Path, help="questions.jsonl, ood.jsonl, acl.json, corpus/")
        parser.add_argument("--out", type=Path, default=Path("answerability.json"),
                            help="Write the model, the frontier and every question's signals here")
        parser.add_argument("--plot", type=Path, help="Write the frontier as a PNG")
        parser.add_argument("--folds", type=int, default=5, help="Cross-validation folds (default 5)")
        parser.add_argument("--target", type=float, default=0.05,
                            help="Share of answerable questions the cutoff may refuse on the data it is fitted on "
                                 "(default 0.05)")
        parser.add_argument("--l2", type=float, default=calibration.DEFAULT_L2,
                            help=f"L2 penalty on the standardised coefficients (default {calibration.DEFAULT_L2:g})")
        parser.add_argument("--features", default=",".join(calibration.DEFAULT_FEATURES),
                            help=f"Comma-separated signals (default {','.join(calibration.DEFAULT_FEATURES)}; "
                                 f"known: {','.join(SIGNALS)})")
        parser.add_argument("--samples", type=Path,
                            help="Refit from the signals an earlier --out file holds instead of running retrieval")
        parser.add_argument("--reuse-index", metavar="NAME", help="As for `evaluate`: keep and reuse the index")

    def handle(self, *args: Any, eval_dir: Path, out: Path, plot: Path | None, folds: int, target: float,
               l2: float, features: str, samples: Path | None, reuse_index: str | None, **options: Any) -> str:
        names = tuple(f.strip() for f in features.split(",") if f.strip())
        unknown = sorted(set(names) - set(SIGNALS))
        if unknown or not names:
            raise CommandError(f"--features: unknown {unknown}; choose from {', '.join(SIGNALS)}")
        if not 0 <= target < 1 or l2 < 0:
            raise CommandError("--target must be in [0, 1) and --l2 at least 0")
        if reuse_index and not re.fullmatch(r"[a-z0-9_]{1,30}", reuse_index):
            raise CommandError(f"--reuse-index {reuse_index!r}: use 1-30 lower-case letters, digits or _")
        try:
            eval_set = runner.load_set(eval_dir)
            records = (_saved_records(samples) if samples else
                       runner.run_isolated(eval_dir=eval_dir, overrides=[], log=self._log,
                                           reuse_index=reuse_index)["records"])
            data = calibration.samples(questions=eval_set.questions, ood=eval_set.ood, records=records,
                                         features=names)
            result = calibration.calibrate(data, features=names, k=folds, l2=l2, target=target)
        except (EvaluationError, AnswerabilityError) as exc:
            raise CommandError(str(exc)) from None

        when, commit = runner.now(), runner.git_commit()
        title = f"Answerability on {eval_dir} · {when:%Y-%m-%d %H:%M} UTC · commit {commit or 'unknown'}"
        saved = {r["id"]: r for r in records if r["id"] in set(data.ids)}
        report = {"set": str(eval_dir), "date": when.isoformat(timespec="seconds"), "commit": commit,
                  **result.as_json(),
                  "samples": [{"id": i, "set": saved[i]["set"], "signals": saved[i]["signals"]} for i in data.ids]}
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1, ensure_ascii=False), encoding="utf-8")
        if plot:
            calibration.write_plot(plot, result, title=title)
        return "\n".join([title, calibration.render(result), "",
                          f"Wrote {out}: use it with KB_ANSWERABILITY_FILE={out.resolve()}, or paste its \"model\" "
                          "into KB_ANSWERABILITY_DEFAULT in kb/settings.py"
                          + (f"; frontier plot {plot}" if plot else "")])

    def _log(self, line: str) -> None:
        self.stderr.write(f"calibrate: {line}")


def _saved_records(path: Path) -> list[dict[str, Any]]:
    """The per-question signals of an earlier --out file, as retrieval records."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return [{"id": s["id"], "set": s["set"], "signals": s["signals"]} for s in data["samples"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CommandError(f"--samples {path}: not a `calibrate --out` file ({exc})") from None
