"""Late interaction: word-piece re-scoring of the top fused candidates, with the real MiniLM."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kb.library.ingest.pipeline import ingest
from kb.library.models import Chunk, Document
from kb.library.selectors import documents_stale
from kb.text import embedding
from kb.text.pieces import MAGIC, expand, pack, spelled, stop_words, unpack, words
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


def test_chunk_vectors_are_one_coarse_vector_per_content_word_read_without_encoding(
        db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    ingested_document(DEPOT, "depot.md")
    chunks = list(Chunk.objects.order_by("ordinal").values_list("pk", "text"))
    exact = embedding.token_vectors([t for _, t in chunks])  # in fp32, as ingest encoded so few chunks
    tokens = [[embedding.tokenizer().id_to_token(i) for i in ids] for ids in embedding.piece_ids([t for _, t in chunks])]

    def no_encoding(texts: list[str]) -> list[np.ndarray]:
        raise AssertionError(f"encoded {len(texts)} texts at query time")

    monkeypatch.setattr(embedding, "token_vectors", no_encoding)
    monkeypatch.setattr(embedding, "passage_token_vectors", no_encoding)
    stored = late.chunk_vectors(chunks)
    stop = stop_words({spelled(t, places) for t in tokens for places in words(t)})  # no lexeme in English
    assert {"the", "of", "."} <= stop and not {"quartz", "pallets", "bay"} & stop
    for got, pieces, spelled_tokens in zip(stored, exact, tokens, strict=True):
        content = [places for places in words(spelled_tokens) if spelled(spelled_tokens, places) not in stop]
        assert len(got) == len(content) < len(pieces)  # stop words and punctuation left out, a vector a word
        means = np.stack([pieces[places].mean(axis=0) for places in content])
        cosines = np.sum(got * means, axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(means, axis=1)
        assert cosines.min() > 0.6 and np.median(cosines) > 0.75  # sign bits keep the direction, roughly
        assert (np.sign(got) == np.where(means >= 0, 1, -1)).all()


def test_a_chunk_in_the_format_before_is_read_as_its_pieces_and_its_document_is_stale(db: None) -> None:
    """Until the background re-index replaces it, a chunk stored in the int8 format before is scored on its pieces;
    one with nothing stored is encoded."""
    ingested_document(DEPOT, "depot.md")
    (cid, text), = Chunk.objects.order_by("ordinal").values_list("pk", "text")[:1]
    pieces = embedding.token_vectors([text])[0]
    scale = float(np.abs(pieces).max()) / 127
    int8_format = np.array([scale], dtype="<f4").tobytes() + np.rint(pieces / scale).astype(np.int8).tobytes()
    Chunk.objects.update(late_vectors=int8_format)
    Document.objects.update(late_version=1)
    assert documents_stale().count() == 1
    vectors, = late.chunk_vectors([(cid, text)])
    assert vectors.shape == pieces.shape and np.abs(vectors - pieces).max() <= scale / 2 + 1e-6
    Chunk.objects.update(late_vectors=None)
    vectors, = late.chunk_vectors([(cid, text)])
    assert vectors.shape == pieces.shape and np.sum(vectors * pieces, axis=1).min() > 0.999  # encoded (bf16 here)


def test_exact_pieces_are_encoded_once_per_text(db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The answer scores the sentences of the passages retrieval has just scored exactly: not encoded twice. An
    edited chunk (its text, under the same id) is encoded again."""
    encoded: list[str] = []
    real = embedding.passage_token_vectors

    def counting(texts: list[str]) -> list[np.ndarray]:
        encoded.extend(texts)
        return real(texts)

    monkeypatch.setattr(embedding, "passage_token_vectors", counting)
    first, = late.exact_pieces([(-1, "The night guard checks the quartz seal.")])
    again, = late.exact_pieces([(-1, "The night guard checks the quartz seal.")])
    edited, = late.exact_pieces([(-1, "The day guard checks the quartz seal.")])
    assert encoded == ["The night guard checks the quartz seal.", "The day guard checks the quartz seal."]
    assert again is first and not first.vectors.flags.writeable
    assert first.ids == embedding.piece_ids(["The night guard checks the quartz seal."])[0] != edited.ids


def test_the_exact_pass_orders_the_top_hits_on_exact_pieces(people: dict[str, Any]) -> None:
    """Coarse codes order the late stage's candidates; its first late_exact are scored on exact pieces, so their
    late scores equal late.scores over the pieces encoded at query time."""
    ingested_document(DEPOT, "depot.md")
    query = "Who checks the quartz seal on the east gate?"
    result = hybrid_search(user=people["carol"], query=query,
                           options=SearchOptions(late_depth=8, late_exact=3, threshold=1.0, answerability=False))
    head = result.hits[:3]
    texts = dict(Chunk.objects.values_list("pk", "text"))
    pieces = embedding.embed_query(query)[1]
    exact = late.scores(pieces, late.query_weights(query, spans(query)),
                        [p.vectors for p in late.exact_pieces([(h.chunk_id, texts[h.chunk_id]) for h in head])])
    assert [h.late_score for h in head] == pytest.approx(exact, abs=1e-6)
    combined = [h.late_score + 1 - h.distance for h in head]
    assert combined == sorted(combined, reverse=True) and "quartz seal" in head[0].content
    coarse = late.scores(pieces, late.query_weights(query, spans(query)), late.chunk_vectors(
        [(h.chunk_id, texts[h.chunk_id]) for h in result.hits[3:8]]))
    assert [h.late_score for h in result.hits[3:8]] == pytest.approx(coarse, abs=1e-6)


def test_pack_keeps_a_word_a_vector_in_sign_bits() -> None:
    text = "The night guard checks the quartz seal on the east gate every hour."
    vectors = embedding.token_vectors([text])[0]
    tokens = [embedding.tokenizer().id_to_token(i) for i in embedding.piece_ids([text])[0]]
    packed = pack(vectors, tokens, stop={"the", "on", "every", "."})
    kept = [places for places in words(tokens) if spelled(tokens, places) not in {"the", "on", "every", "."}]
    assert len(packed) == len(MAGIC) + 2 + len(kept) * (2 + vectors.shape[1] // 8)  # 50 bytes a word
    restored = unpack(packed, vectors.shape[1])
    assert restored.shape == (len(kept), vectors.shape[1])
    means = np.stack([vectors[places].mean(axis=0) for places in kept])
    assert (np.sign(restored) == np.where(means >= 0, 1, -1)).all()
    assert np.allclose(np.abs(restored).mean(axis=1), np.abs(means).mean(axis=1), rtol=1e-3)
    assert unpack(pack(vectors, tokens, stop=set(spelled(tokens, p) for p in words(tokens))), 384).shape == (0, 384)
    assert unpack(np.array([0.5], dtype="<f4").tobytes() + bytes([2]) * 384, 384).tolist() == [[1.0] * 384]  # int8


def test_expand_gives_each_word_piece_its_words_code_and_refuses_codes_of_other_words() -> None:
    """The answer reads a chunk it has not encoded on its coarse codes, a piece at a time: each piece of a kept
    word carries that word's code, a stop word's pieces carry nothing."""
    text = "The night guard checks the quartz seal on the east gate every hour."
    vectors = embedding.token_vectors([text])[0]
    tokens = [embedding.tokenizer().id_to_token(i) for i in embedding.piece_ids([text])[0]]
    stop = {"the", "on", "every", "."}
    packed = pack(vectors, tokens, stop)
    codes = unpack(packed, vectors.shape[1])
    per_piece = expand(packed, tokens, stop, vectors.shape[1])
    assert per_piece is not None and per_piece.shape == vectors.shape
    kept = [places for places in words(tokens) if spelled(tokens, places) not in stop]
    for code, places in zip(codes, kept, strict=True):
        assert (per_piece[places] == code).all()
    dropped = sorted(set(range(len(tokens))) - {i for places in kept for i in places})
    assert dropped and not per_piece[dropped].any()
    assert expand(packed, tokens, {"the"}, vectors.shape[1]) is None  # another stop list: other words kept
    assert expand(packed, tokens[:-3], stop, vectors.shape[1]) is None  # the chunk read differently


def test_depth_zero_turns_the_stage_off_everywhere(people: dict[str, Any], settings: Any) -> None:
    ingested_document(DEPOT, "depot.md")
    assert late.status() == "on (top 20)"
    settings.KB_SEARCH_LATE_DEPTH = 0
    assert late.status() == "off"
    result = hybrid_search(user=people["carol"], query="When does bay 3 open?")
    assert result.hits and all(h.late_score is None for h in result.hits)
    assert "sql" in result.timings_ms and "late" not in result.timings_ms


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
    assert {"kb_chunk_search_gin", "kb_chunk_identifiers_trgm", "kb_chunk_acl_gin", "kb_document_acl_gin"} <= set(indexes)
    assert ingest(uploaded_document(DEPOT, "depot.md").pk) == Document.Status.READY  # no refresh after it
    assert sum(pending_pages_merged(index) for index in indexes) > 0  # what an ingest leaves pending
    assert ingest(uploaded_document(DEPOT.replace("Depot", "Warehouse"), "warehouse.md").pk) == Document.Status.READY
    lexeme_stats_refresh()
    assert [pending_pages_merged(index) for index in indexes] == [0] * len(indexes)
