"""Fitting the answerability model: the fit, folds and cross-validation (plain numpy, no database)."""

from __future__ import annotations

import numpy as np
import pytest

from lab import calibration

FEATURES = ("nearest", "weakest")


def _data(seed: int = 1) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Answerable questions are closer and better matched than unanswerable ones, with overlap."""
    rng = np.random.default_rng(seed)
    answerable = np.column_stack([rng.normal(0.40, 0.08, 60), rng.normal(0.45, 0.08, 60)])
    unanswerable = np.column_stack([rng.normal(0.60, 0.08, 20), rng.normal(0.25, 0.08, 20)])
    groups = [f"doc{i // 4}" for i in range(60)] + [f"ood{i}" for i in range(20)]
    return np.vstack([answerable, unanswerable]), np.array([1] * 60 + [0] * 20), groups


def test_fit_is_deterministic_and_separates_the_classes() -> None:
    matrix, labels, _ = _data()
    first = calibration.fit(matrix, labels, features=FEATURES)
    second = calibration.fit(matrix.copy(), labels.copy(), features=FEATURES)
    assert first == second
    # Closer (smaller distance) and better-matched questions are more answerable.
    assert first.coefficients[0] < 0 < first.coefficients[1]
    assert calibration.auc(first.probabilities(matrix), labels) > 0.9


def test_folds_keep_groups_together_and_spread_unanswerable_questions() -> None:
    matrix, labels, groups = _data()
    fold = calibration.folds(groups, labels, k=5)
    for group in set(groups):
        assert len({fold[i] for i, g in enumerate(groups) if g == group}) == 1
    assert sorted(np.bincount(fold[labels == 0]).tolist()) == [4, 4, 4, 4, 4]
    assert (fold == calibration.folds(groups, labels, k=5)).all()


def test_cross_validation_scores_each_fold_with_a_model_that_never_saw_it() -> None:
    matrix, labels, groups = _data()
    cv = calibration.cross_validate(matrix, labels, groups, features=FEATURES, k=5, target=0.05)
    for f in range(5):
        train = cv.fold != f
        model = calibration.fit(matrix[train], labels[train], features=FEATURES)
        np.testing.assert_allclose(cv.probabilities[~train], model.probabilities(matrix[~train]))


def test_cutoff_refuses_at_most_the_target_share_of_answerable_questions() -> None:
    probabilities = np.append(np.linspace(0.01, 0.99, 100), [0.005, 0.5])
    labels = np.append(np.ones(100, dtype=int), [0, 0])
    cutoff = calibration.cutoff_for(probabilities, labels, target=0.08)
    assert (probabilities[labels == 1] < cutoff).mean() == pytest.approx(0.08)
    rows = calibration.frontier(probabilities, labels, targets=(0.0, 0.1))
    assert [r["in_domain_refused"] for r in rows] == [0.0, pytest.approx(0.1)]
    assert [r["ood_refused"] for r in rows] == [0.5, 0.5]


def test_a_weight_counts_as_that_many_copies_and_a_prior_is_fitted_on_but_never_scored() -> None:
    matrix, labels, groups = _data()
    weights = np.where(np.arange(len(labels)) % 2 == 0, 2.0, 1.0)
    copies = np.concatenate([np.arange(len(labels)), np.arange(0, len(labels), 2)])
    weighted = calibration.fit(matrix, labels, features=FEATURES, weights=weights)
    copied = calibration.fit(matrix[copies], labels[copies], features=FEATURES)
    np.testing.assert_allclose(weighted.coefficients, copied.coefficients, rtol=1e-8)
    np.testing.assert_allclose(weighted.mean + weighted.scale, copied.mean + copied.scale, rtol=1e-8)

    data = calibration.Samples([str(i) for i in range(len(labels))], matrix, labels, groups, matrix[:, 0],
                               prior=np.arange(len(labels)) % 3 == 0, prior_weight=0.5)
    fold = calibration.folds(groups, labels, k=3, prior=data.prior)
    assert (fold[data.prior] == -1).all() and set(fold[~data.prior].tolist()) == {0, 1, 2}
    result = calibration.calibrate(data, features=FEATURES, k=3)
    scored = labels[~data.prior]
    assert (result.answerable, result.unanswerable) == (int(scored.sum()), int((scored == 0).sum()))
    assert len(result.cross_validation.probabilities) == len(scored)
    full = calibration.fit(matrix, labels, features=FEATURES, weights=data.weights)
    assert result.model.coefficients == full.coefficients
