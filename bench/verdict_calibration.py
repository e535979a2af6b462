"""Calibration from simulated verdicts against the shipped model (issue 29 item 3).

`python bench/verdict_calibration.py [SET ...] [--splits 5] [--share 0.3] [--samples SET=FILE ...]`: for each
evaluation set (default ../shared/eval and demo/eval-formats), retrieval runs once over every question as
`manage.py evaluate` runs it (lab.evaluation.runner, in a kept scratch index) and records its signals. Then, per
random split, the verdicts of a random `share` of the ground truths (a question's phrasings together) and of the
out-of-domain questions are simulated — in-domain ones judged "helpful", out-of-domain ones "should have refused" —
and refitted as `calibrate --from-verdicts` refits them (lab.verdicts.refit: candidates cross-validated on the
verdicts, the shipped prior weighted). Printed per set: in-domain and out-of-domain refused on the other
questions, by the refit, by the shipped model (KB_ANSWERABILITY_DEFAULT) and by the shipped model with only its
cutoff chosen on the verdicts (the same rule), per split and their mean, with the load average. On ../shared/eval
the prior is the set itself: its held-out questions are left out of the prior, but the shipped model was fitted
on them (its figures there are not held out). `--samples SET=FILE` reads a `calibrate --out` file's signals
instead of running retrieval.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench._common import DEV_DIR, load_average  # noqa: E402

FORMATS_DIR = ROOT / "demo" / "eval-formats"


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.settings")
    import django

    from kb.runtime.embedded import ensure_services

    ensure_services()
    django.setup()


def records_of(eval_dir: Path, samples: Path | None) -> list[dict[str, Any]]:
    """Every question's retrieval record with its signals: evaluate's run in a kept scratch index, or a saved file."""
    from lab.evaluation import runner

    if samples is not None:
        import json

        return [{"id": s["id"], "set": s["set"], "signals": s["signals"]}
                for s in json.loads(samples.read_text(encoding="utf-8"))["samples"]]
    name = "verdicts_" + "".join(c if c.isalnum() else "_" for c in eval_dir.resolve().name.lower())[:20]
    run = runner.run_isolated(eval_dir=eval_dir, overrides=[], log=lambda line: print(f"  {line}", file=sys.stderr),
                              reuse_index=name)
    return list(run["records"])


def split(eval_set: Any, rng: np.random.Generator, share: float) -> tuple[set[str], set[str]]:
    """The question ids whose verdicts are simulated, and the held-out rest (a ground truth's phrasings together)."""
    gts: dict[str, list[str]] = {}
    for q in eval_set.questions:
        gts.setdefault(str(q.get("gt") or q["id"]), []).append(q["id"])
    names = sorted(gts)
    ood = sorted(q["id"] for q in eval_set.ood)
    picked = [names[i] for i in rng.permutation(len(names))[: round(share * len(names))]]
    judged = {i for gt in picked for i in gts[gt]}
    judged |= {ood[i] for i in rng.permutation(len(ood))[: max(1, round(share * len(ood)))]}
    return judged, ({i for ids in gts.values() for i in ids} | set(ood)) - judged


def refused(model: Any, records: dict[str, dict[str, Any]], ids: set[str], answerable: set[str]) -> tuple[float, float]:
    """In-domain and out-of-domain refused among `ids`: no readable passage, or below the model's cutoff."""
    from search.answerability import Signals

    def refuses(i: str) -> bool:
        signals = records.get(i, {}).get("signals")
        return not signals or model.probability(Signals.from_json(signals)) < model.cutoff

    inside = [refuses(i) for i in sorted(ids & answerable)]
    outside = [refuses(i) for i in sorted(ids - answerable)]
    return float(np.mean(inside)), float(np.mean(outside))


def measure(eval_dir: Path, *, splits: int, share: float, samples: Path | None, prior_weight: float,
            target: float) -> list[str]:
    from django.conf import settings

    from lab import calibration, verdicts
    from lab.evaluation import runner
    from search.answerability import model_from_json

    eval_set = runner.load_set(eval_dir)
    records = {r["id"]: r for r in records_of(eval_dir, samples) if r.get("set") in ("questions", "ood")}
    answerable = {q["id"] for q in eval_set.questions}
    labels = {**{q["id"]: (1, f"gt:{q.get('gt') or q['id']}") for q in eval_set.questions},
              **{q["id"]: (0, f"ood:{q['id']}") for q in eval_set.ood}}
    shipped = model_from_json(settings.KB_ANSWERABILITY_DEFAULT)
    own_prior = eval_dir.resolve() == DEV_DIR.resolve()
    lines = [f"## {eval_dir} ({len(answerable)} in-domain, {len(eval_set.ood)} out-of-domain; verdicts on "
             f"{share:.0%}, measured on the rest; prior weight {prior_weight:g}, target {target:.2f})", "",
             "| split | verdicts (in/out) | chosen signals | CV AUC | refit: in-domain refused | refit: OOD refused "
             "| shipped: in-domain refused | shipped: OOD refused | shipped, cutoff from the verdicts: in / OOD |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    figures = []
    for seed in range(splits):
        judged, held = split(eval_set, np.random.default_rng(seed), share)
        simulated = verdicts.verdicts_of([records[i] for i in sorted(judged) if i in records], labels)
        prior = verdicts.prior_verdicts(leave_out=held if own_prior else ())
        result = verdicts.refit(simulated, prior, prior_weight=prior_weight, target=target)
        mine = refused(result.chosen.model, records, held, answerable)
        theirs = refused(shipped, records, held, answerable)
        recut = refused(replace(shipped, cutoff=calibration.cutoff_for(
            np.array([shipped.probability(v.signals) for v in simulated]), np.array([v.label for v in simulated]),
            target=target)), records, held, answerable)
        figures.append((*mine, *theirs, *recut))
        n_in = sum(v.label for v in simulated)
        lines.append(f"| {seed} | {n_in}/{len(simulated) - n_in} | {','.join(result.candidates[0][0])} | "
                     f"{result.chosen.auc:.3f} | {mine[0]:.3f} | {mine[1]:.3f} | {theirs[0]:.3f} | {theirs[1]:.3f} | "
                     f"{recut[0]:.3f} / {recut[1]:.3f} |")
    mean = np.mean(figures, axis=0)
    lines.append(f"| mean | | | | **{mean[0]:.3f}** | **{mean[1]:.3f}** | {mean[2]:.3f} | {mean[3]:.3f} | "
                 f"{mean[4]:.3f} / {mean[5]:.3f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sets", nargs="*", type=Path, default=[DEV_DIR, FORMATS_DIR])
    parser.add_argument("--splits", type=int, default=5)
    parser.add_argument("--share", type=float, default=0.3, help="Share of each set's questions with verdicts")
    parser.add_argument("--samples", action="append", default=[], metavar="SET=FILE",
                        help="A `calibrate --out` file's signals for SET instead of running retrieval")
    parser.add_argument("--prior-weight", type=float)
    parser.add_argument("--target", type=float, default=0.05)
    args = parser.parse_args()
    _setup()
    from lab import verdicts

    saved = {Path(k).resolve(): Path(v) for k, v in (s.split("=", 1) for s in args.samples)}
    weight = verdicts.DEFAULT_PRIOR_WEIGHT if args.prior_weight is None else args.prior_weight
    print(f"load average before: {load_average()}")
    for eval_dir in args.sets:
        lines = measure(eval_dir, splits=args.splits, share=args.share, samples=saved.get(eval_dir.resolve()),
                        prior_weight=weight, target=args.target)
        print("\n".join(["", *lines]))
    print(f"\nload average after: {load_average()}")


if __name__ == "__main__":
    main()
