"""The query embedding: one forward pass per question, shared read-only by retrieval and the answer."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kb.text import embedding


def test_a_question_is_encoded_once_for_retrieval_and_its_answer(monkeypatch: Any) -> None:
    embedding.embed_query.cache_clear()
    calls: list[int] = []
    encoder = embedding.query_encoder()

    def spy(input_ids: Any) -> Any:
        calls.append(int(input_ids.shape[1]))
        return encoder(input_ids)

    monkeypatch.setattr(embedding, "query_encoder", lambda: spy)
    question = "How do I rotate the signing key of the billing webhook?"
    vector, pieces = embedding.embed_query(question)
    again, again_pieces = embedding.embed_query(question)
    assert calls == [len(pieces) + 2]  # one forward pass: the pieces plus [CLS] and [SEP]
    assert again is vector and again_pieces is pieces
    with pytest.raises(ValueError, match="read-only"):
        pieces[0, 0] = 1.0  # shared between callers: nobody may change it for the others
    kept = embedding.embed_query.cache_info().maxsize
    assert kept is not None
    for n in range(kept - 1):
        embedding.embed_query(f"other question {n}")
    assert embedding.embed_query(question)[0] is vector and len(calls) == kept  # still among the last `kept`
    for n in range(kept):
        embedding.embed_query(f"newer question {n}")
    embedding.embed_query(question)
    assert len(calls) == 2 * kept + 1  # pushed out by `kept` newer ones, then encoded again


@pytest.mark.parametrize("text", [
    "VPN",
    "Why does the nightly export stop at 2 a.m. with error E-4410?",
    "Zażółć gęślą jaźń: czy raport kwartalny jest gotowy?",
    " ".join(["the retention period of audit logs in the admin console"] * 40),  # past the 256-piece limit
])
def test_the_traced_query_encoder_gives_what_the_model_gives(text: str) -> None:
    """The frozen graph must be the same function as the model, at any length (traced on one example):
    for a question, and for the few sentences an answer has to encode (`token_vectors` of a few texts)."""
    embedding.embed_query.cache_clear()
    vector, pieces = embedding.embed_query(text)
    [expected] = embedding.embed([text])
    [encoded] = embedding._encode([text])
    expected_pieces = embedding._unit_pieces(encoded.hidden)
    [few_pieces] = embedding.token_vectors([text])
    assert pieces.shape == expected_pieces.shape == few_pieces.shape
    assert np.abs(vector - expected).max() < 1e-4
    assert np.abs(pieces - expected_pieces).max() < 1e-4
    assert np.abs(few_pieces - expected_pieces).max() < 1e-4


def test_the_query_vector_matches_the_passage_encoding_of_the_same_text() -> None:
    """A query is encoded in fp32 even where batches of passages use bf16: the two stay comparable."""
    text = "The Export dialog offers CSV and PDF."
    vector, pieces = embedding.embed_query(text)
    [batch_vector], [batch_pieces], [batch_ids] = embedding.embed_with_pieces([text])
    assert float(vector @ batch_vector) > 0.999
    assert pieces.shape == batch_pieces.shape
    assert [batch_ids.tolist()] == embedding.piece_ids([text])
    assert np.allclose(np.linalg.norm(pieces, axis=1), 1, atol=1e-3)


def test_passages_encoded_while_someone_waits_are_the_models_pieces_in_one_batch() -> None:
    """The late stage's exact pass and the answer's sources encode passages in one batch (bf16 weights where
    the CPU has native bf16): the same pieces, in the callers' order, as token_vectors gives, to ~1e-4."""
    texts = ["The Export dialog offers CSV and PDF.",
             " ".join(["Audit logs are kept for ninety days in the admin console."] * 30),  # past the window
             "VPN"]
    fast = embedding.passage_token_vectors(texts)
    for got, expected in zip(fast, embedding.token_vectors(texts), strict=True):
        assert got.shape == expected.shape
        assert np.sum(got * expected, axis=1).min() > 0.999
    assert embedding.passage_token_vectors([]) == []
