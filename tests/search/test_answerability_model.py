"""The answerability decision's parts without a database: the model read from settings, the
refusal reason, and signals read back from JSON."""

from __future__ import annotations

from dataclasses import replace

import pytest

from search import answerability
from search.answerability import AnswerabilityError, Signals


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
    # Saved before the multilingual space: its nearest distance reads as 1.0, as with the space off.
    assert signals.as_json() == {**{k: v for k, v in saved.items() if k != "relevance"}, "multilingual_nearest": 1.0}
