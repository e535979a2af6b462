"""Late interaction: word-piece re-scoring of the top fused candidates, with the real MiniLM."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kb.library.ingest.pipeline import ingest
from kb.library.models import Chunk, Document
from kb.library.selectors import documents_stale
from kb.text import embedding
from kb.text.pieces import pack, unpack
from search import late
from search.retrieval import WORD, SearchOptions, hybrid_search
from search.stats import gin_indexes, lexeme_stats_refresh
from tests.factories import ingested_document, uploaded_document

DEPOT = "# Depot\n\n" + "".join(
    f"## Bay {n}\n\nBay {n} of the depot stores pallets for carrier {n} and opens at {n} in the morning.\n\n"
    for n in range(1, 9)
) + "## Security\n\nThe night guard checks the quartz seal on the east gate every hour.\n"


def spans(query: str) -> list[tuple[int, int]]:
    return [m.span() for m in WORD.finditer(query)]


def test_word_weights_ignore_stop_words_and_favour_rare_words(db: None) -> None:
    ingested_document(DEPOT, "depot.md")
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
    scores = late.scores(pieces, late.query_weights(query, spans(query)),
                         embedding.token_vectors([specific, general, near_miss]))
    assert scores[0] > scores[1] and scores[0] > scores[2]
    assert all(0 < s <= 1.0001 for s in scores)


def test_only_the_top_hits_are_reordered_and_the_rest_keep_their_place(people: dict[str, Any]) -> None:
    ingested_document(DEPOT, "depot.md")
    query = "Who checks the quartz seal on the east gate?"
    plain = hybrid_search(user=people["carol"], query=query,
                          options=SearchOptions(late_depth=0, threshold=1.0, answerability=False))
    assert all(h.late_score is None for h in plain.hits) and "late" not in plain.timings_ms

    depth = 4
    result = hybrid_search(user=people["carol"], query=query,
                           options=SearchOptions(late_depth=depth, threshold=1.0, answerability=False))
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


def test_chunk_vectors_come_from_the_index_without_encoding(db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    ingested_document(DEPOT, "depot.md")
    chunks = list(Chunk.objects.order_by("ordinal").values_list("pk", "text"))
    encoded = embedding.token_vectors([text for _, text in chunks])

    def no_encoding(texts: list[str]) -> list[np.ndarray]:
        raise AssertionError(f"encoded {len(texts)} texts at query time")

    monkeypatch.setattr(embedding, "token_vectors", no_encoding)
    stored = late.chunk_vectors(chunks)
    for got, want in zip(stored, encoded, strict=True):
        assert got.shape == want.shape
        assert np.min(np.sum(got * want, axis=1) / np.linalg.norm(got, axis=1)) > 0.999  # int8 keeps the direction


def test_a_chunk_indexed_before_the_stage_is_encoded_and_its_document_is_stale(db: None) -> None:
    ingested_document(DEPOT, "depot.md")
    Chunk.objects.update(late_vectors=None)
    Document.objects.update(late_version=None)
    assert documents_stale().count() == 1
    (cid, text), = Chunk.objects.order_by("ordinal").values_list("pk", "text")[:1]
    vectors, = late.chunk_vectors([(cid, text)])
    assert np.allclose(vectors, embedding.token_vectors([text])[0])


def test_pack_round_trip_is_a_quarter_of_float32() -> None:
    vectors = embedding.token_vectors(["The night guard checks the quartz seal on the east gate every hour."])[0]
    packed = pack(vectors)
    assert len(packed) == 4 + vectors.size  # one float32 scale, then a byte per value
    restored = unpack(packed, vectors.shape[1])
    assert np.abs(restored - vectors).max() <= np.abs(vectors).max() / 254 + 1e-7  # half a quantization step
    assert unpack(pack(np.zeros((0, 384), dtype=np.float32)), 384).shape == (0, 384)


def test_depth_zero_turns_the_stage_off_everywhere(people: dict[str, Any], settings: Any) -> None:
    ingested_document(DEPOT, "depot.md")
    assert late.status() == "on (top 20)"
    settings.KB_SEARCH_LATE_DEPTH = 0
    assert late.status() == "off"
    result = hybrid_search(user=people["carol"], query="When does bay 3 open?")
    assert result.hits and all(h.late_score is None for h in result.hits) and "late" not in result.timings_ms


@pytest.mark.django_db
def test_binary_reads_raise_djangos_database_errors_as_djangos_own_cursors_do() -> None:
    """The edge turns django.db's OperationalError (a restarting server) into a JSON 503; psycopg's own
    exception would escape it as a 500 page."""
    import django.db

    from kb.text.pieces import read_binary

    with pytest.raises(django.db.ProgrammingError):
        read_binary("SELECT late_vectors FROM no_such_table WHERE id = ANY(%s)", [[1]])


def pending_pages_merged(index: str) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT gin_clean_pending_list(%s::regclass)", [index])
        return int(cursor.fetchone()[0])


def test_the_refresh_after_indexing_merges_new_chunks_into_the_indexes_searches_read(db: None) -> None:
    """Searches scan a GIN index's pending list in full: indexing leaves new chunks there, the refresh empties it."""
    indexes = gin_indexes()
    assert {"kb_chunk_search_gin", "kb_chunk_text_trgm", "kb_chunk_acl_gin", "kb_document_acl_gin"} <= set(indexes)
    assert ingest(uploaded_document(DEPOT, "depot.md").pk) == Document.Status.READY  # no refresh after it
    assert sum(pending_pages_merged(index) for index in indexes) > 0  # what an ingest leaves pending
    assert ingest(uploaded_document(DEPOT.replace("Depot", "Warehouse"), "warehouse.md").pk) == Document.Status.READY
    lexeme_stats_refresh()
    assert [pending_pages_merged(index) for index in indexes] == [0] * len(indexes)
