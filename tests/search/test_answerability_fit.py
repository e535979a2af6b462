"""The answerability model's fitting, folds and cross-validation (plain numpy, no database)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from search import answerability
from search.answerability import AnswerabilityError, Signals

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
    first = answerability.fit(matrix, labels, features=FEATURES)
    second = answerability.fit(matrix.copy(), labels.copy(), features=FEATURES)
    assert first == second
    # Closer (smaller distance) and better-matched questions are more answerable.
    assert first.coefficients[0] < 0 < first.coefficients[1]
    assert answerability.auc(first.probabilities(matrix), labels) > 0.9


def test_folds_keep_groups_together_and_spread_unanswerable_questions() -> None:
    matrix, labels, groups = _data()
    fold = answerability.folds(groups, labels, k=5)
    for group in set(groups):
        assert len({fold[i] for i, g in enumerate(groups) if g == group}) == 1
    assert sorted(np.bincount(fold[labels == 0]).tolist()) == [4, 4, 4, 4, 4]
    assert (fold == answerability.folds(groups, labels, k=5)).all()


def test_cross_validation_scores_each_fold_with_a_model_that_never_saw_it() -> None:
    matrix, labels, groups = _data()
    cv = answerability.cross_validate(matrix, labels, groups, features=FEATURES, k=5, target=0.05)
    for f in range(5):
        train = cv.fold != f
        model = answerability.fit(matrix[train], labels[train], features=FEATURES)
        np.testing.assert_allclose(cv.probabilities[~train], model.probabilities(matrix[~train]))


def test_cutoff_refuses_at_most_the_target_share_of_answerable_questions() -> None:
    probabilities = np.append(np.linspace(0.01, 0.99, 100), [0.005, 0.5])
    labels = np.append(np.ones(100, dtype=int), [0, 0])
    cutoff = answerability.cutoff_for(probabilities, labels, target=0.08)
    assert (probabilities[labels == 1] < cutoff).mean() == pytest.approx(0.08)
    rows = answerability.frontier(probabilities, labels, targets=(0.0, 0.1))
    assert [r["in_domain_refused"] for r in rows] == [0.0, pytest.approx(0.1)]
    assert [r["ood_refused"] for r in rows] == [0.5, 0.5]


def test_a_model_from_settings_is_validated() -> None:
    good = {"features": ["nearest"], "mean": [0.5], "scale": [0.1], "coefficients": [-2.0], "bias": 1.0,
            "cutoff": 0.4}
    model = answerability.model_from_json(good)
    near = Signals(nearest=0.3, gap=0, late_best=0, weakest=0, unknown_share=0, agreement=0, screen=0)
    far = Signals(nearest=0.8, gap=0, late_best=0, weakest=0, unknown_share=0, agreement=0, screen=0)
    assert model.probability(near) > model.cutoff > model.probability(far)
    with pytest.raises(AnswerabilityError, match="unknown answerability signals"):
        answerability.model_from_json({**good, "features": ["colour"]})
    with pytest.raises(AnswerabilityError, match="same length"):
        answerability.model_from_json({**good, "coefficients": [1.0, 2.0]})
    with pytest.raises(AnswerabilityError, match="needs features"):
        answerability.model_from_json({"features": ["nearest"]})


def test_the_refusal_reason_says_why_and_names_no_passage_and_no_indexed_word() -> None:
    """The reason is stored with the answer, and reviewers with other access read it: it names no passage
    (a restricted title read by the asker would reach them) and does not say which words the index holds
    (the statistics cover every document, so that would tell anyone what restricted documents contain)."""
    signals = Signals(nearest=0.7, gap=0.01, late_best=0.2, weakest=0.1, unknown_share=0.5, agreement=0.0,
                      screen=0.0, unknown_words=("sourdough", "starter"))
    reason = answerability.refusal_reason(signals, probability=0.12, cutoff=0.5, threshold=0.56)
    assert reason.startswith("NO ANSWER: the documents you can read do not seem to answer this (confidence 0.12")
    assert "the nearest passage is at cosine distance 0.700, above the threshold 0.560" in reason
    assert "sourdough" not in reason and "starter" not in reason
    # Close but not answered: its distance is not held against it.
    closer = answerability.refusal_reason(replace(signals, nearest=0.4), probability=0.12, cutoff=0.5,
                                          threshold=0.56)
    assert "cosine" not in closer and "ask with the words your documents use" in closer


def test_signals_saved_with_the_removed_relevance_signal_still_read() -> None:
    saved = {"nearest": 0.4, "gap": 0.1, "late_best": 0.6, "weakest": 0.5, "unknown_share": 0.0, "agreement": 0.3,
             "screen": 0.0, "relevance": 0.77, "unknown_words": ["fifa"]}
    signals = Signals.from_json(saved)
    assert signals.nearest == 0.4 and signals.unknown_words == ("fifa",)
    assert signals.as_json() == {k: v for k, v in saved.items() if k != "relevance"}
