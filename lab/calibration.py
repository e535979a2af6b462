"""Fitting the answer/refuse model (search.answerability) for `manage.py calibrate`.

Plain numpy: Newton's method on an L2-penalised log-likelihood, so a refit is exact and
deterministic; `cross_validate` scores each fold with a model and a cutoff that never saw it.
Serving only loads the fitted model (search.answerability.model_from_json) and decides.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from search.answerability import AnswerabilityError, Model, Signals, sigmoid

# What `manage.py calibrate` fits by default: the signals that do not depend on the corpus's size (the gap and
# the lists' agreement shift with how many passages there are), so a model travels between corpora.
DEFAULT_FEATURES = ("nearest", "late_best", "weakest", "unknown_share", "screen")
DEFAULT_L2 = 10.0  # strong shrinkage: a set has ~20 unanswerable questions


def fit(matrix: np.ndarray, labels: np.ndarray, *, features: Sequence[str], l2: float = DEFAULT_L2,
        cutoff: float = 0.5, weights: np.ndarray | None = None) -> Model:
    """Logistic regression of `labels` (1 = answerable) on standardised `matrix`, L2 penalty `l2`
    on the coefficients (not the bias), by Newton's method: the same data gives the same model.
    `weights`: each sample's weight (default 1), in the standardisation too (a down-weighted prior)."""
    if len(set(labels.tolist())) < 2:
        raise AnswerabilityError("fitting needs both answerable and unanswerable questions")
    if weights is None:
        w_sample, mean, scale = np.ones(len(labels)), matrix.mean(axis=0), matrix.std(axis=0)
    else:
        w_sample = np.asarray(weights, dtype=float)
        mean = np.average(matrix, axis=0, weights=w_sample)
        scale = np.sqrt(np.average((matrix - mean) ** 2, axis=0, weights=w_sample))
    scale[scale < 1e-9] = 1.0
    x = np.hstack([(matrix - mean) / scale, np.ones((len(matrix), 1))])
    penalty = np.eye(x.shape[1]) * l2
    penalty[-1, -1] = 0.0
    w = np.zeros(x.shape[1])
    for _ in range(100):
        p = sigmoid(x @ w)
        gradient = x.T @ (w_sample * (p - labels)) + penalty @ w
        hessian = (x * (w_sample * p * (1 - p))[:, None]).T @ x + penalty + np.eye(x.shape[1]) * 1e-9
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    return Model(tuple(features), tuple(mean.tolist()), tuple(scale.tolist()), tuple(w[:-1].tolist()),
                 float(w[-1]), cutoff)


def folds(groups: Sequence[str], labels: np.ndarray, *, k: int, prior: np.ndarray | None = None) -> np.ndarray:
    """A fold number per sample: whole groups (a question's two phrasings, one document's questions) stay
    together, and unanswerable groups are spread over the folds as evenly as answerable ones.
    Deterministic: groups are dealt round-robin in a fixed shuffled order (seed 0). Samples in `prior`
    get fold -1: always fitted on, never scored."""
    out = np.zeros(len(groups), dtype=int)
    scored = np.ones(len(groups), dtype=bool) if prior is None else ~prior
    for label in (0, 1):
        names = sorted({g for g, y, s in zip(groups, labels, scored, strict=True) if y == label and s})
        order = np.random.default_rng(0).permutation(len(names))
        fold_of = {names[j]: n % k for n, j in enumerate(order)}
        for i, (g, y) in enumerate(zip(groups, labels, strict=True)):
            if y == label and scored[i]:
                out[i] = fold_of[g]
    out[~scored] = -1
    return out


def cutoff_for(probabilities: np.ndarray, labels: np.ndarray, *, target: float,
               weights: np.ndarray | None = None) -> float:
    """The highest cutoff that refuses at most `target` of the answerable samples (of their weight, when each
    has one: lab.verdicts weighs a judge's verdicts so that no one judge moves the cutoff alone)."""
    if weights is None:
        answerable = np.sort(probabilities[labels == 1])
        allowed = math.floor(target * len(answerable))  # this many may fall below the cutoff
        return float(answerable[allowed]) if allowed < len(answerable) else 1.0
    order = np.argsort(probabilities[labels == 1], kind="stable")
    answerable, weight = probabilities[labels == 1][order], np.asarray(weights, dtype=float)[labels == 1][order]
    below = np.concatenate([[0.0], np.cumsum(weight)])  # the weight refused at each sample's probability, and all
    allowed = int(np.searchsorted(below, target * weight.sum() * (1 + 1e-9), side="right")) - 1
    return float(answerable[allowed]) if allowed < len(answerable) else 1.0


@dataclass(frozen=True)
class CrossValidation:
    """Out-of-fold probabilities (each scored by a model fitted without its fold) and the refusal
    rates when each fold's cutoff, too, is chosen on the other folds only."""

    probabilities: np.ndarray
    fold: np.ndarray
    in_domain_refused: float
    ood_refused: float


def cross_validate(matrix: np.ndarray, labels: np.ndarray, groups: Sequence[str], *, features: Sequence[str],
                   k: int = 5, l2: float = DEFAULT_L2, target: float = 0.05, weights: np.ndarray | None = None,
                   prior: np.ndarray | None = None) -> CrossValidation:
    """Scored on the samples outside `prior` only (the prior is in every fold's fit, weighted by `weights`,
    and no cutoff is chosen on it); the rates count those samples."""
    fold = folds(groups, labels, k=k, prior=prior)
    scored = fold >= 0
    probabilities = np.zeros(len(labels))
    refused = np.zeros(len(labels), dtype=bool)
    for f in range(k):
        test = fold == f
        train = ~test
        if not test.any():
            continue
        model = fit(matrix[train], labels[train], features=features, l2=l2,
                    weights=None if weights is None else weights[train])
        chosen = train & scored
        cutoff = cutoff_for(model.probabilities(matrix[chosen]), labels[chosen], target=target,
                            weights=None if weights is None else weights[chosen])
        probabilities[test] = model.probabilities(matrix[test])
        refused[test] = probabilities[test] < cutoff
    return CrossValidation(probabilities[scored], fold[scored], float(refused[scored & (labels == 1)].mean()),
                           float(refused[scored & (labels == 0)].mean()))


def frontier(probabilities: np.ndarray, labels: np.ndarray,
             targets: Sequence[float] = (0.02, 0.05, 0.08, 0.10, 0.15, 0.20)) -> list[dict[str, float]]:
    """At cutoffs that refuse about each target share of answerable questions: the shares refused."""
    rows = []
    for target in targets:
        cutoff = cutoff_for(probabilities, labels, target=target)
        refused = probabilities < cutoff
        rows.append({"target": target, "cutoff": cutoff, "in_domain_refused": float(refused[labels == 1].mean()),
                     "ood_refused": float(refused[labels == 0].mean())})
    return rows


def auc(probabilities: np.ndarray, labels: np.ndarray) -> float:
    """Probability that an answerable sample scores above an unanswerable one (ties count half)."""
    pos, neg = probabilities[labels == 1], probabilities[labels == 0]
    if not len(pos) or not len(neg):
        return float("nan")
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


# Calibration ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Samples:
    """One row per question of a calibration set: its signals, 1 if answerable, and its fold group.
    `prior` marks samples that are only fitted on, with weight `prior_weight` each (lab.verdicts: the
    shipped model's samples beside a deployment's verdicts); every figure is of the others. `sample_weights`
    weigh the others in the fit and the cutoff (lab.verdicts.weigh); the figures count them once each."""

    ids: list[str]
    matrix: np.ndarray
    labels: np.ndarray
    groups: list[str]
    nearest: np.ndarray
    prior: np.ndarray | None = None
    prior_weight: float = 1.0
    sample_weights: np.ndarray | None = None  # each scored sample's own (lab.verdicts: per judge); default 1

    @property
    def scored(self) -> np.ndarray:
        return np.ones(len(self.labels), dtype=bool) if self.prior is None else ~self.prior

    @property
    def weights(self) -> np.ndarray | None:
        if self.prior is None and self.sample_weights is None:
            return None
        own = np.ones(len(self.labels)) if self.sample_weights is None else np.asarray(self.sample_weights, dtype=float)
        return own if self.prior is None else np.where(self.prior, self.prior_weight, own)


def samples(*, questions: Sequence[Mapping[str, Any]], ood: Sequence[Mapping[str, Any]],
            records: Sequence[Mapping[str, Any]], features: Sequence[str]) -> Samples:
    """The set's in-domain questions (grouped by their document, so a document's questions, both phrasings
    included, never sit on both sides of a fold) and out-of-domain ones (each its own group), with the
    signals retrieval recorded for them. A question with no readable passage at all is left out: it is
    refused before any model is asked."""
    docs = {q["id"]: str(q.get("doc") or q.get("gt") or q["id"]) for q in questions}
    wanted = {**{q["id"]: (1, f"doc:{docs[q['id']]}") for q in questions},
              **{q["id"]: (0, f"ood:{q['id']}") for q in ood}}
    ids, rows, labels, groups, nearest = [], [], [], [], []
    for record in records:
        if record.get("set") not in {"questions", "ood"} or record["id"] not in wanted or not record.get("signals"):
            continue
        signals = Signals.from_json(record["signals"])
        label, group = wanted[record["id"]]
        ids.append(record["id"])
        rows.append(signals.vector(features))
        labels.append(label)
        groups.append(group)
        nearest.append(signals.nearest)
    if len(set(labels)) < 2:
        raise AnswerabilityError("a calibration set needs answerable (questions.jsonl) and unanswerable "
                                 "(ood.jsonl) questions that retrieval found passages for")
    return Samples(ids, np.array(rows, dtype=float).reshape(len(rows), len(features)), np.array(labels),
                   groups, np.array(nearest))


@dataclass(frozen=True)
class Calibration:
    model: Model
    cross_validation: CrossValidation
    frontier: list[dict[str, float]]  # out-of-fold probabilities
    baseline: list[dict[str, float]]  # the nearest distance alone, at the same targets
    auc: float
    baseline_auc: float
    answerable: int
    unanswerable: int
    folds: int
    target: float

    def as_json(self) -> dict[str, Any]:
        cv = self.cross_validation
        return {
            "model": self.model.as_json(),
            "cross_validated": {"folds": self.folds, "target": self.target, "auc": self.auc,
                                "in_domain_refused": cv.in_domain_refused, "ood_refused": cv.ood_refused},
            "frontier": self.frontier,
            "baseline": {"auc": self.baseline_auc, "frontier": self.baseline},
            "answerable": self.answerable,
            "unanswerable": self.unanswerable,
        }


def calibrate(data: Samples, *, features: Sequence[str], k: int = 5, l2: float = DEFAULT_L2,
              target: float = 0.05) -> Calibration:
    """Cross-validated figures for fitting `features` on `data`, and the model fitted on all of it, whose
    cutoff refuses at most `target` of the answerable questions it was fitted on (the same rule each
    fold's cutoff follows, so the cross-validated rates estimate what the model does on new questions).
    Prior samples are fitted on but neither scored nor used for a cutoff."""
    scored = data.scored
    groups = len({g for g, s in zip(data.groups, scored, strict=True) if s})
    if k < 2 or k > groups:
        raise AnswerabilityError(f"{k} folds need at least {k} question groups (there are {groups})")
    cv = cross_validate(data.matrix, data.labels, data.groups, features=features, k=k, l2=l2, target=target,
                        weights=data.weights, prior=data.prior)
    model = fit(data.matrix, data.labels, features=features, l2=l2, weights=data.weights)
    labels = data.labels[scored]
    weights = data.weights
    cutoff = cutoff_for(model.probabilities(data.matrix[scored]), labels, target=target,
                        weights=None if weights is None else weights[scored])
    model = replace(model, cutoff=min(max(cutoff, 1e-6), 1 - 1e-6))  # settings need 0 < cutoff < 1
    closeness = -data.nearest[scored]
    return Calibration(model, cv, frontier(cv.probabilities, labels), frontier(closeness, labels),
                       auc(cv.probabilities, labels), auc(closeness, labels),
                       int(labels.sum()), int((labels == 0).sum()), k, target)


def render(result: Calibration) -> str:
    """The calibration report for a terminal."""
    cv, m = result.cross_validation, result.model
    lines = [
        f"{result.answerable} answerable and {result.unanswerable} unanswerable questions · {result.folds} folds "
        "(a document's questions stay in one fold)",
        "",
        f"Cross-validated, each fold's model and cutoff fitted on the other folds (target {result.target:.2f}):",
        f"  in-domain refused {cv.in_domain_refused:.3f}   out-of-domain refused {cv.ood_refused:.3f}   "
        f"AUC {result.auc:.3f} (nearest distance alone: {result.baseline_auc:.3f})",
        "",
        "Frontier over out-of-fold probabilities (and the nearest distance alone at the same in-domain share):",
        "  in-domain refused (target)   cutoff   OOD refused   | distance only: in-domain refused  OOD refused",
    ]
    for row, base in zip(result.frontier, result.baseline, strict=True):
        lines.append(f"  {row['in_domain_refused']:.3f} ({row['target']:.2f})"
                     f"{row['cutoff']:>16.3f}{row['ood_refused']:>12.3f}   |"
                     f"{base['in_domain_refused']:>33.3f}{base['ood_refused']:>13.3f}")
    lines += ["", "Model fitted on every question (standardised signals; positive = more answerable):"]
    lines += [f"  {name:<14} {coef:+.3f}   (mean {mean:.4f}, scale {scale:.4f})"
              for name, coef, mean, scale in zip(m.features, m.coefficients, m.mean, m.scale, strict=True)]
    lines.append(f"  bias {m.bias:+.3f}, cutoff {m.cutoff:.4f}")
    return "\n".join(lines)


def write_plot(path: Any, result: Calibration, *, title: str) -> None:
    """The frontier as a PNG: out-of-domain refused against in-domain refused, model and distance alone."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    for rows, label in ((result.frontier, "answerability model (out-of-fold)"),
                        (result.baseline, "nearest distance alone")):
        ax.plot([r["in_domain_refused"] for r in rows], [r["ood_refused"] for r in rows], marker="o", label=label)
    cv = result.cross_validation
    ax.scatter([cv.in_domain_refused], [cv.ood_refused], marker="*", s=160, color="black", zorder=3,
               label="cutoffs chosen on the other folds")
    ax.axvline(0.08, color="grey", linestyle=":", linewidth=1)
    ax.axhline(0.80, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("in-domain questions refused")
    ax.set_ylabel("out-of-domain questions refused")
    ax.set_xlim(0, max(0.25, *(r["in_domain_refused"] for r in result.frontier)))
    ax.set_ylim(0, 1.02)
    ax.set_title(title, fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
