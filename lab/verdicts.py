"""Calibration from this deployment's verdicts (issue 29 item 3): `manage.py calibrate --from-verdicts`
and the admin's "refit from verdicts" propose a model; an admin accepts it (search.answerability).

A verdict's label says whether its question was answerable from the documents its asker may read:
- "helpful" on an answer, "should have answered" on an answer or a refusal: answerable (1);
- "should have refused" on an answer, "helpful" on a refusal (the desk's "right not to answer"): not (0);
- "wrong" says nothing about answerability (a wrong passage picked, a wrong sentence, an answer that does
  not exist), so it is left out, as is an answer whose judges disagree (a reviewer's verdict outranks
  the asker's; disagreeing reviewers leave it out).
Each judged answer's signals are what retrieval saw when it was asked (chat.Message.signals); one with
none (no readable passage at all: refused before any model) is left out, as `calibrate` leaves it out.

Verdicts are weighed per person (issue 47 item 9): a judge's verdicts on one question weigh as one; no
judge holds more than KB_VERDICT_MAX_JUDGE_SHARE of the verdicts' weight (`judge_scales`); and where
judges disagree on the same evidence (one question, the same signals), the weightier side's verdicts
stand and the others' are dropped (`weigh`). An admin may leave judges out of a refit altogether.

The prior is the shipped model's own calibration sample (`lab/data/shipped_prior.json`, the
`calibrate ../shared/eval --out` file of the signals the shipped model is fitted on), each sample
weighted `prior_weight` beside a verdict's 1: it is always fitted on, never scored, and no cutoff is
chosen on it. Candidates (feature sets, the nearest distance alone always among them) are compared by
cross-validation on the verdicts alone; the chosen one is refitted on all of them plus the prior, its
cutoff refusing at most `target` of the answerable verdicts.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

from chat.models import Judgement, Message
from lab import calibration
from search.answerability import SIGNALS, AnswerabilityError, Signals, model_propose
from search.models import AnswerabilityModel

PRIOR_FILE = Path(__file__).resolve().parent / "data" / "shipped_prior.json"
DEFAULT_PRIOR_WEIGHT = 1.0  # a prior sample counts as much as a verdict (docs/measurements/verdict_calibration.md)
NEAREST = ("nearest",)
CANDIDATES: tuple[tuple[str, ...], ...] = (NEAREST, ("nearest", "weakest"), calibration.DEFAULT_FEATURES)
AUC_TIE = 0.005  # candidates this close in cross-validated AUC: the one with fewer signals


@dataclass(frozen=True)
class Verdict:
    """One labelled question: what retrieval saw, 1 if it was answerable, its fold group, who gave the label
    (none: unattributed, e.g. a simulation's) and its weight in the fit."""

    id: str
    signals: Signals
    label: int
    group: str
    judges: tuple[str, ...] = ()
    weight: float = 1.0

    @property
    def evidence(self) -> tuple[str, tuple[float, ...]]:
        """The question and what retrieval saw: verdicts on the same evidence may be compared."""
        return self.group, tuple(round(float(x), 4) for x in self.signals.vector(SIGNALS))

    @property
    def credited(self) -> tuple[str, ...]:
        return self.judges or (f"?{self.id}",)  # an unattributed verdict is a judge of its own


@dataclass(frozen=True)
class JudgeRow:
    """One judge of a refit, for the proposal: how many verdicts and questions, the share of the verdicts'
    weight they hold, how often another judge labelled the same evidence and how often alike, and how many
    of their verdicts were outweighed there."""

    judge: str
    verdicts: int
    questions: int
    share: float
    compared: int
    agreed: int
    outweighed: int

    def as_json(self) -> dict[str, Any]:
        return {"judge": self.judge, "verdicts": self.verdicts, "questions": self.questions,
                "share": round(self.share, 4), "compared": self.compared, "agreed": self.agreed,
                "outweighed": self.outweighed}


def judge_scales(raw: Mapping[str, float], *, max_share: float) -> dict[str, float]:
    """Per judge, the factor their weight is multiplied by so that none holds more than `max_share` of the
    total: the heaviest are lowered to a common level, the rest keep theirs. With fewer judges than the cap
    allows (two at 0.2), no weighting can meet it: then every judge weighs the same, the lightest one's weight."""
    capped: set[str] = set()
    while True:
        free = sum(r for j, r in raw.items() if j not in capped)
        room = 1 - max_share * len(capped)
        if room <= 1e-12 or free <= 0:
            level = min(raw.values())
            return {j: level / r for j, r in raw.items()}
        level = max_share * free / room  # each capped judge then holds exactly max_share of the total
        over = {j for j, r in raw.items() if j not in capped and r > level * (1 + 1e-12)}
        if not over:
            return {j: min(1.0, level / r) if j in capped else 1.0 for j, r in raw.items()}
        capped |= over


@dataclass(frozen=True)
class Weighed:
    """Verdicts as a refit weighs them (those outweighed left out), and the judges behind them."""

    verdicts: list[Verdict]
    judges: list[JudgeRow]
    outweighed: int


def weigh(verdicts: Sequence[Verdict], *, max_share: float) -> Weighed:
    """Each verdict weighted for its judges: a judge's verdicts on one question share one unit (asked and
    judged fifteen times, it is still one question), scaled by `judge_scales`; then, on each piece of evidence
    (one question with the same signals) that judges labelled both ways, the lighter side is left out (a tie:
    both), so one judge cannot overturn what others said of the same answer."""
    per_question = Counter((judge, v.group) for v in verdicts for judge in v.credited)
    raw: dict[str, float] = defaultdict(float)
    for judge, _ in per_question:
        raw[judge] += 1.0
    scales = judge_scales(raw, max_share=max_share) if raw else {}

    def credit(v: Verdict, judge: str) -> float:
        return scales[judge] / per_question[(judge, v.group)]

    weighted = [replace(v, weight=sum(credit(v, j) for j in v.credited)) for v in verdicts]
    by_evidence: dict[Any, list[Verdict]] = defaultdict(list)
    for v in weighted:
        by_evidence[v.evidence].append(v)
    kept: list[Verdict] = []
    outweighed: Counter[str] = Counter()
    compared: Counter[str] = Counter()
    agreed: Counter[str] = Counter()
    for group in by_evidence.values():
        side = {label: sum(v.weight for v in group if v.label == label) for label in (0, 1)}
        winner = None if side[0] == side[1] else int(side[1] > side[0])
        for v in group:
            if winner is None or v.label != winner:
                outweighed.update(v.credited)
            else:
                kept.append(v)
        said = {judge: Counter(v.label for v in group if judge in v.credited).most_common(1)[0][0]
                for judge in {j for v in group for j in v.credited}}
        for judge, label in said.items():  # each other judge of the same evidence: agreeing or not
            others = [other for other in said if other != judge]
            compared[judge] += len(others)
            agreed[judge] += sum(said[other] == label for other in others)
    total = sum(scales[j] * r for j, r in raw.items()) or 1.0
    verdict_counts = Counter(j for v in verdicts for j in v.credited)
    rows = [JudgeRow(judge, verdict_counts[judge], int(raw[judge]), scales[judge] * raw[judge] / total,
                     compared[judge], agreed[judge], outweighed[judge])
            for judge in sorted(raw, key=lambda j: (-verdict_counts[j], j)) if not judge.startswith("?")]
    return Weighed(kept, rows, len(weighted) - len(kept))


def label_of(kind: str, status: str) -> int | None:
    """A verdict's label: 1 answerable, 0 not, None when the verdict does not say (see the module's rules)."""
    refused = status == Message.Status.REFUSED
    if kind == Judgement.Kind.SHOULD_ANSWER or (kind == Judgement.Kind.HELPFUL and not refused):
        return 1
    if (kind == Judgement.Kind.SHOULD_REFUSE and not refused) or (kind == Judgement.Kind.HELPFUL and refused):
        return 0
    return None


def _agreed(labels: Iterable[int | None]) -> int | None:
    found = set(labels)
    return found.pop() if len(found) == 1 else None


def deployment_verdicts(*, leave_out: Iterable[str] = ()) -> list[Verdict]:
    """This deployment's judged answers as labelled samples, oldest first; a question asked again (the same
    words, any case) is one fold group, so its askings never sit on both sides of a fold. `leave_out`: the
    usernames of judges whose verdicts count for nothing (an admin's choice on the proposal)."""
    judged = (Judgement.objects.filter(message__status__in=(Message.Status.DONE, Message.Status.REFUSED))
              .exclude(message__signals={}).exclude(judge__username__in=list(leave_out))
              .values_list("message_id", "role", "kind", "message__status", "message__signals",
                           "message__question__text", "judge__username")
              .order_by("message_id", "pk"))
    by_message: dict[int, dict[str, Any]] = {}
    for message_id, role, kind, status, signals, question, judge in judged:
        row = by_message.setdefault(message_id, {"signals": signals, "question": question or "", "asker": [],
                                                 "reviewer": []})
        row[role].append((judge, label_of(kind, status)))
    verdicts = []
    for message_id, row in by_message.items():
        deciding = row["reviewer"] or row["asker"]
        label = _agreed(label for _, label in deciding)
        if label is not None:
            verdicts.append(Verdict(f"m{message_id}", Signals.from_json(row["signals"]), label,
                                    "q:" + " ".join(row["question"].lower().split()),
                                    tuple(sorted({judge for judge, _ in deciding}))))
    return verdicts


def prior_verdicts(path: Path = PRIOR_FILE, *, leave_out: Iterable[str] = ()) -> list[Verdict]:
    """The shipped model's calibration sample as labelled samples (`leave_out`: ids to drop, for measuring on
    the set the prior came from). The prior is never scored, so its groups only need to be its own."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        rows = [(s["id"], s["set"], s["signals"]) for s in data["samples"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AnswerabilityError(f"the prior {path} is not a `calibrate --out` file ({exc})") from None
    dropped = set(leave_out)
    return [Verdict(f"prior:{i}", Signals.from_json(signals), 1 if kind == "questions" else 0, f"prior:{i}")
            for i, kind, signals in rows if i not in dropped]


def samples(verdicts: Sequence[Verdict], prior: Sequence[Verdict], *, features: Sequence[str],
            prior_weight: float) -> calibration.Samples:
    rows = [*verdicts, *prior]
    matrix = np.array([v.signals.vector(features) for v in rows], dtype=float).reshape(len(rows), len(features))
    return calibration.Samples([v.id for v in rows], matrix, np.array([v.label for v in rows]),
                               [v.group for v in rows], np.array([v.signals.nearest for v in rows]),
                               prior=np.array([False] * len(verdicts) + [True] * len(prior)),
                               prior_weight=prior_weight, sample_weights=np.array([v.weight for v in rows]))


@dataclass(frozen=True)
class Refit:
    """The candidates' cross-validated figures on the verdicts, the chosen one first, and what they were fitted on."""

    candidates: list[tuple[tuple[str, ...], calibration.Calibration]]
    verdicts: int
    questions: int
    prior: int
    prior_weight: float
    prior_file: str
    judges: tuple[JudgeRow, ...] = ()
    max_judge_share: float = 1.0
    outweighed: int = 0
    left_out: tuple[str, ...] = ()

    @property
    def chosen(self) -> calibration.Calibration:
        return self.candidates[0][1]

    def fitted_on(self) -> dict[str, Any]:
        chosen = self.chosen
        return {"verdicts": self.verdicts, "answerable": chosen.answerable, "unanswerable": chosen.unanswerable,
                "questions": self.questions, "prior_samples": self.prior, "prior_weight": self.prior_weight,
                "prior_file": self.prior_file, "folds": chosen.folds, "target": chosen.target,
                "max_judge_share": self.max_judge_share, "outweighed": self.outweighed,
                "judges": [row.as_json() for row in self.judges], "left_out": list(self.left_out)}

    def candidates_json(self) -> list[dict[str, Any]]:
        return [{"features": list(features), "chosen": n == 0, **result.as_json()}
                for n, (features, result) in enumerate(self.candidates)]


def refit(verdicts: Sequence[Verdict], prior: Sequence[Verdict], *, candidates: Iterable[Sequence[str]] = CANDIDATES,
          prior_weight: float = DEFAULT_PRIOR_WEIGHT, k: int = 5, l2: float = calibration.DEFAULT_L2,
          target: float = 0.05, prior_file: str = "", max_judge_share: float | None = None,
          left_out: Iterable[str] = ()) -> Refit:
    """Each candidate cross-validated on the verdicts as `weigh` weighs them (prior in every fold's fit), the
    one with the best AUC chosen (within AUC_TIE: fewer signals), fitted on everything; its cutoff refuses at
    most `target` of the answerable verdicts' weight. Needs answerable and unanswerable verdicts.
    `max_judge_share`: KB_VERDICT_MAX_JUDGE_SHARE by default; `left_out`: recorded, already left out."""
    share = float(settings.KB_VERDICT_MAX_JUDGE_SHARE if max_judge_share is None else max_judge_share)
    weighed = weigh(verdicts, max_share=share)
    verdicts = weighed.verdicts
    labels = {v.label for v in verdicts}
    if labels != {0, 1}:
        raise AnswerabilityError("a refit needs verdicts of both kinds: answerable (helpful, should have answered) "
                                 "and not (should have refused, right not to answer)")
    groups = len({v.group for v in verdicts})
    k = min(k, groups)
    names = list(dict.fromkeys(tuple(c) for c in (NEAREST, *candidates)))
    results = [(names_, calibration.calibrate(samples(verdicts, prior, features=names_, prior_weight=prior_weight),
                                              features=names_, k=k, l2=l2, target=target)) for names_ in names]
    best = max(result.auc for _, result in results)
    ranked = sorted(results, key=lambda pair: (pair[1].auc < best - AUC_TIE, len(pair[0]), -pair[1].auc))
    return Refit(ranked, len(verdicts), groups, len(prior), prior_weight, prior_file, tuple(weighed.judges), share,
                 weighed.outweighed, tuple(sorted(left_out)))


def render(result: Refit) -> str:
    """The proposal for a terminal: what it was fitted on, each candidate cross-validated, the chosen one's frontier."""
    on = result.fitted_on()
    lines = [f"{result.verdicts} judged answers ({on['answerable']} answerable, {on['unanswerable']} not; "
             f"{result.questions} distinct questions) and {result.prior} prior samples weighted {result.prior_weight:g}",
             f"Candidates, cross-validated on the verdicts ({on['folds']} folds; cutoffs refuse at most "
             f"{on['target']:.2f} of answerable verdicts in each fold's fit):",
             "  signals                                      AUC   in-domain refused   OOD refused"]
    judges = [f"Judges (no one above {result.max_judge_share:g} of the verdicts' weight; {result.outweighed} verdicts "
              "outweighed by others' on the same evidence"
              + (f"; left out: {', '.join(result.left_out)}" if result.left_out else "") + "):",
              "  judge                verdicts  questions   share   agrees with others"]
    judges += [f"  {row.judge:<20}{row.verdicts:>9}{row.questions:>11}{row.share:>8.3f}   {row.agreed}/{row.compared}"
               for row in result.judges]
    lines = [lines[0], *judges, *lines[1:]]
    for n, (features, cal) in enumerate(result.candidates):
        cv = cal.cross_validation
        lines.append(f"{'*' if n == 0 else ' '} {','.join(features):<42}{cal.auc:>6.3f}{cv.in_domain_refused:>20.3f}"
                     f"{cv.ood_refused:>14.3f}")
    lines += ["", "Chosen (*): " + calibration.render(result.chosen)]
    return "\n".join(lines)


def propose(*, user: Any = None, prior_weight: float = DEFAULT_PRIOR_WEIGHT, k: int = 5,
            l2: float = calibration.DEFAULT_L2, target: float = 0.05,
            candidates: Iterable[Sequence[str]] = CANDIDATES, prior_path: Path = PRIOR_FILE,
            leave_out: Iterable[str] = (), max_judge_share: float | None = None) -> AnswerabilityModel:
    """Refit from this deployment's verdicts (less those of the judges in `leave_out`) and store the result as
    a proposal (it decides nothing yet)."""
    left_out = tuple(dict.fromkeys(leave_out))
    result = refit(deployment_verdicts(leave_out=left_out), prior_verdicts(prior_path) if prior_weight > 0 else [],
                   candidates=candidates, prior_weight=prior_weight, k=k, l2=l2, target=target,
                   prior_file=prior_path.name if prior_weight > 0 else "", max_judge_share=max_judge_share,
                   left_out=left_out)
    return store(result, user=user)


def store(result: Refit, *, user: Any = None) -> AnswerabilityModel:
    return model_propose(model=result.chosen.model.as_json(), fitted_on=result.fitted_on(),
                         candidates=result.candidates_json(), user=user)


def verdicts_of(records: Sequence[Mapping[str, Any]], labels: Mapping[str, tuple[int, str]]) -> list[Verdict]:
    """Evaluation records as verdicts (bench/verdict_calibration.py simulates a deployment's verdicts with
    them): `labels` maps a question id to its label and fold group."""
    return [Verdict(r["id"], Signals.from_json(r["signals"]), *labels[r["id"]]) for r in records
            if r["id"] in labels and r.get("signals")]
