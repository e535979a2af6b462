from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab import calibration, verdicts
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
        parser.add_argument("eval_dir", type=Path, nargs="?", help="questions.jsonl, ood.jsonl, acl.json, corpus/")
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
        parser.add_argument("--from-verdicts", action="store_true",
                            help="Instead of a set: refit from this deployment's verdicts plus the shipped prior, the "
                                 "nearest distance alone and --features among the candidates, and store the chosen "
                                 "model as a proposal (it serves once an admin accepts it in the admin)")
        parser.add_argument("--prior-weight", type=float, default=verdicts.DEFAULT_PRIOR_WEIGHT,
                            help="With --from-verdicts: each shipped prior sample's weight beside a verdict's 1; 0: "
                                 f"no prior (default {verdicts.DEFAULT_PRIOR_WEIGHT:g})")

    def handle(self, *args: Any, eval_dir: Path | None, out: Path, plot: Path | None, folds: int, target: float,
               l2: float, features: str, samples: Path | None, reuse_index: str | None, from_verdicts: bool,
               prior_weight: float, **options: Any) -> str:
        names = tuple(f.strip() for f in features.split(",") if f.strip())
        unknown = sorted(set(names) - set(SIGNALS))
        if unknown or not names:
            raise CommandError(f"--features: unknown {unknown}; choose from {', '.join(SIGNALS)}")
        if not 0 <= target < 1 or l2 < 0:
            raise CommandError("--target must be in [0, 1) and --l2 at least 0")
        if from_verdicts:
            if eval_dir or samples or reuse_index or plot:
                raise CommandError("--from-verdicts reads this deployment's verdicts: no set, --samples, "
                                   "--reuse-index or --plot")
            return self._from_verdicts(names, out=out, folds=folds, target=target, l2=l2, prior_weight=prior_weight)
        if eval_dir is None:
            raise CommandError("name an evaluation set, or refit --from-verdicts")
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

    def _from_verdicts(self, names: tuple[str, ...], *, out: Path, folds: int, target: float, l2: float,
                       prior_weight: float) -> str:
        if prior_weight < 0:
            raise CommandError("--prior-weight must be at least 0")
        try:
            prior = verdicts.prior_verdicts() if prior_weight > 0 else []
            result = verdicts.refit(verdicts.deployment_verdicts(), prior,
                                    candidates=(*verdicts.CANDIDATES, names), prior_weight=prior_weight, k=folds,
                                    l2=l2, target=target, prior_file=verdicts.PRIOR_FILE.name if prior else "")
        except AnswerabilityError as exc:
            raise CommandError(str(exc)) from None
        proposal = verdicts.store(result)
        report = {"proposal": proposal.pk, "date": runner.now().isoformat(timespec="seconds"),
                  "commit": runner.git_commit(), "fitted_on": proposal.fitted_on, "candidates": proposal.candidates,
                  "model": proposal.model}
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1, ensure_ascii=False), encoding="utf-8")
        return "\n".join([verdicts.render(result), "",
                          f"Stored as proposal v{proposal.pk} (and written to {out}): nothing changes until an admin "
                          "accepts it (admin: Search › Answerability models)"])

    def _log(self, line: str) -> None:
        self.stderr.write(f"calibrate: {line}")


def _saved_records(path: Path) -> list[dict[str, Any]]:
    """The per-question signals of an earlier --out file, as retrieval records."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return [{"id": s["id"], "set": s["set"], "signals": s["signals"]} for s in data["samples"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CommandError(f"--samples {path}: not a `calibrate --out` file ({exc})") from None
