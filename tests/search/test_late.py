"""Late interaction: word-piece re-scoring of the top fused candidates, with the real MiniLM."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest

from kb.ingest import embedding
from kb.ingest.pipeline import ingest
from kb.services import document_upload
from search import late
from search.retrieval import WORD, SearchOptions, hybrid_search
from search.stats import lexeme_stats_refresh

DEPOT = "# Depot\n\n" + "".join(
    f"## Bay {n}\n\nBay {n} of the depot stores pallets for carrier {n} and opens at {n} in the morning.\n\n"
    for n in range(1, 9)
) + "## Security\n\nThe night guard checks the quartz seal on the east gate every hour.\n"


def add(text: str, name: str) -> None:
    data = text.encode()
    ingest(document_upload(name=name, stream=io.BytesIO(data), size=len(data), enqueue=False).document.pk)


def spans(query: str) -> list[tuple[int, int]]:
    return [m.span() for m in WORD.finditer(query)]


def test_word_weights_ignore_stop_words_and_favour_rare_words(db: None) -> None:
    add(DEPOT, "depot.md")
    lexeme_stats_refresh()
    the, depot, quartz, zebra = late.word_weights(["the", "depot", "quartz", "zebra"])
    assert the == 0.0
    assert 0 < depot < quartz < zebra  # in every chunk < in one chunk < in none


def test_the_passage_with_the_questions_specific_words_scores_higher(db: None) -> None:
    query = "How do I rotate the signing key of the billing webhook?"
    specific = "To rotate the signing key of the billing webhook, open Settings and press Rotate key."
    general = "Webhooks send an HTTP request to your server whenever an event happens in your account."
    near_miss = "The signing key of the payroll export is kept in the vault and never rotated."
    pieces = embedding.embed_query(query)[1]
    scores = late.scores(query, pieces, spans(query), [(1, specific), (2, general), (3, near_miss)])
    assert scores[0] > scores[1] and scores[0] > scores[2]
    assert all(0 < s <= 1.0001 for s in scores)


def test_only_the_top_hits_are_reordered_and_the_rest_keep_their_place(people: dict[str, Any]) -> None:
    add(DEPOT, "depot.md")
    query = "Who checks the quartz seal on the east gate?"
    plain = hybrid_search(user=people["carol"], query=query, options=SearchOptions(late_depth=0, threshold=1.0))
    assert all(h.late_score is None for h in plain.hits) and "late" not in plain.timings_ms

    depth = 4
    result = hybrid_search(user=people["carol"], query=query, options=SearchOptions(late_depth=depth, threshold=1.0))
    assert "late" in result.timings_ms
    fused_head = {h.chunk_id for h in plain.hits[:depth]}
    assert {h.chunk_id for h in result.hits if h.late_score is not None} == fused_head
    # Hits past the depth are untouched: same chunks, same order.
    untouched = [h.chunk_id for h in result.hits if h.late_score is None]
    assert untouched == [h.chunk_id for h in plain.hits if h.chunk_id not in fused_head]
    head = [h for h in result.hits if h.late_score is not None]
    combined = [h.late_score + 1 - h.distance for h in head]
    assert combined == sorted(combined, reverse=True)
    assert "quartz seal" in result.hits[0].content


def test_cached_vectors_follow_the_text_and_the_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(late, "CACHE_CHUNKS", 2)
    monkeypatch.setattr(late, "_cache", type(late._cache)())
    first, = late._chunk_vectors([(7, "The gate opens at seven.")])
    edited, = late._chunk_vectors([(7, "The gate opens at nine in the morning.")])
    assert first.shape != edited.shape or not np.allclose(first, edited)  # same chunk id, new text: recomputed
    again, = late._chunk_vectors([(7, "The gate opens at seven.")])
    assert np.array_equal(first, again)
    late._chunk_vectors([(8, "Pallets wait in bay two."), (9, "Carriers sign at the desk.")])
    assert len(late._cache) == 2


def test_depth_zero_turns_the_stage_off_everywhere(people: dict[str, Any], settings: Any) -> None:
    add(DEPOT, "depot.md")
    assert late.status() == "on (top 20)"
    settings.KB_SEARCH_LATE_DEPTH = 0
    assert late.status() == "off"
    result = hybrid_search(user=people["carol"], query="When does bay 3 open?")
    assert result.hits and all(h.late_score is None for h in result.hits) and "late" not in result.timings_ms
