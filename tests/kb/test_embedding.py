"""The query embedding: one forward pass per question, shared read-only by retrieval and the answer."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kb.ingest import embedding


def test_a_question_is_encoded_once_for_retrieval_and_its_answer(monkeypatch: Any) -> None:
    embedding.embed_query.cache_clear()
    calls: list[list[str]] = []
    model = embedding.model()
    real = model.encode

    def spy(texts: list[str], **options: Any) -> Any:
        calls.append(list(texts))
        return real(texts, **options)

    monkeypatch.setattr(model, "encode", spy)
    question = "How do I rotate the signing key of the billing webhook?"
    vector, pieces = embedding.embed_query(question)
    again, again_pieces = embedding.embed_query(question)
    assert calls == [[question]]
    assert again is vector and again_pieces is pieces
    with pytest.raises(ValueError, match="read-only"):
        pieces[0, 0] = 1.0  # shared between callers: nobody may change it for the others
    for other in ("first other question", "second other question"):
        embedding.embed_query(other)
    embedding.embed_query(question)
    assert calls[-1] == [question]  # only the last two questions are kept


def test_the_query_vector_matches_the_passage_encoding_of_the_same_text() -> None:
    """A query is encoded in fp32 even where batches of passages use bf16: the two stay comparable."""
    text = "The Export dialog offers CSV and PDF."
    vector, pieces = embedding.embed_query(text)
    [batch_vector], [batch_pieces] = embedding.embed_with_pieces([text])
    assert float(vector @ batch_vector) > 0.999
    assert pieces.shape == batch_pieces.shape
    assert np.allclose(np.linalg.norm(pieces, axis=1), 1, atol=1e-3)
