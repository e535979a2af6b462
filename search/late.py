"""Late interaction: re-score the top fused candidates word piece by word piece.

A single vector per chunk blurs a 200-token passage into one point, so the passage that
answers a question often sits a few places below neighbours on the same topic. Matching
each query word piece to its closest piece in the passage (MaxSim, as ColBERT does, here
with the embedding model's own contextual vectors) sees which passage covers the
question's specific words. Query pieces are weighted by their word's IDF from
`search_lexeme_stats`: stop words count for nothing and a word the corpus never uses
counts most, so a passage is not rewarded for matching "how do I". The final score adds
the chunk's cosine similarity, so the stage refines the dense ranking rather than
replacing it. The chunks' word-piece vectors are computed once, at ingest, in the same
forward pass as their embedding, and stored next to them: a query only reads them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from django.conf import settings
from django.db import connection

from kb.text import embedding, language
from kb.text.pieces import read_binary, unpack
from search.stats import CHUNK_TOTAL_SQL, idf_sql, readable_languages


def status() -> str:
    depth = settings.KB_SEARCH_LATE_DEPTH
    return f"on (top {depth})" if depth else "off"


def word_weights(words: Sequence[str], configs: Sequence[str] | None = None) -> list[float]:
    """IDF of each word (its rarest lexeme); 0 for a stop word or punctuation. Each word is read with the
    text search configurations `configs` (by default those of the languages the words are detected in,
    kb.text.language.question_configs) and weighs the most any of them gives it."""
    if not words:
        return []
    if configs is None:
        configs = [c for c, _ in language.question_configs(" ".join(words), readable_languages(None))]
    rows = [(i, config, language.analysed(word, config)) for i, word in enumerate(words, 1) for config in configs]
    if not rows:
        return [0.0] * len(words)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT i, max({idf_sql(ndoc="coalesce(s.ndoc, 0)", total="n.total")})
            FROM unnest(%s::int[], %s::regconfig[], %s::text[]) AS q(i, config, word)
            CROSS JOIN LATERAL unnest(tsvector_to_array(to_tsvector(q.config, q.word))) AS l(lexeme)
            LEFT JOIN search_lexeme_stats s ON s.word = l.lexeme
            CROSS JOIN (SELECT greatest(coalesce({CHUNK_TOTAL_SQL}, 1), 1) AS total) n
            GROUP BY i
            """,
            [[r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]],
        )
        found = {int(i): float(idf) for i, idf in cursor.fetchall()}
    return [found.get(i, 0.0) for i in range(1, len(words) + 1)]


def query_weights(query: str, word_spans: Sequence[tuple[int, int]], idf: Sequence[float] | None = None) -> np.ndarray:
    """One weight per word piece of the query: the IDF of the word it belongs to (`idf`, where the caller
    has already read `word_weights` of those words)."""
    pieces = embedding.word_pieces(query)
    weights = word_weights([query[a:b] for a, b in word_spans]) if idf is None else idf
    out = np.zeros(len(pieces), dtype=np.float32)
    for p, (start, _) in enumerate(pieces):
        for w, (a, b) in enumerate(word_spans):
            if a <= start < b:
                out[p] = weights[w]
                break
    return out


def chunk_vectors(chunks: Sequence[tuple[int, str]]) -> list[np.ndarray]:
    """Coarse word vectors of each (chunk id, text), as stored at ingest (kb.text.pieces), read in one query: the
    first pass's. A chunk stored without them (indexed before the stage existed) is scored on its exact pieces."""
    stored = dict(read_binary("SELECT id, late_vectors FROM kb_chunk WHERE id = ANY(%s) AND late_vectors IS NOT NULL",
                              [[cid for cid, _ in chunks]]))
    exact = iter(exact_pieces([(cid, text) for cid, text in chunks if cid not in stored]))
    dimensions = settings.KB_EMBEDDING_DIMENSIONS
    return [unpack(stored[cid], dimensions) if cid in stored else next(exact).vectors for cid, _ in chunks]


class Pieces(NamedTuple):
    """A text's word-piece ids and their unit contextual vectors (read-only: callers share them)."""

    ids: list[int]
    vectors: np.ndarray


EXACT_KEPT = 64  # texts whose exact pieces a process keeps: ~14 MiB at ~141 pieces of 384 float32
_exact: OrderedDict[tuple[int, str], Pieces] = OrderedDict()


def exact_pieces(chunks: Sequence[tuple[int, str]]) -> list[Pieces]:
    """The word pieces of each (chunk id, text), encoded here: what the late stage's exact pass and the answer's
    sentence scoring read (they are not stored: kb.text.pieces says why). The process keeps the last EXACT_KEPT,
    since the answer scores the sentences of the passages retrieval has just scored, moments later."""
    missing = list(dict.fromkeys(key for key in chunks if key not in _exact))
    if missing:
        texts = [text for _, text in missing]
        for key, ids, vectors in zip(missing, embedding.piece_ids(texts), embedding.passage_token_vectors(texts), strict=True):
            vectors.flags.writeable = False
            _exact[key] = Pieces(ids[: len(vectors)], vectors)
    for key in chunks:
        _exact.move_to_end(key)
    while len(_exact) > max(EXACT_KEPT, len(chunks)):
        _exact.popitem(last=False)
    return [_exact[key] for key in chunks]


def held_pieces(chunks: Sequence[tuple[int, str]]) -> list[Pieces | None]:
    """`exact_pieces` of each (chunk id, text) that this process holds (None for the others), encoding none."""
    return [_exact.get(key) for key in chunks]


def scores(query_vectors: np.ndarray, weights: np.ndarray, chunks: Sequence[np.ndarray]) -> list[float]:
    """IDF-weighted mean over query pieces (`embedding.embed_query`'s second value, weighted by `query_weights`)
    of the best cosine with any piece of each chunk (`chunk_vectors`, or `embedding.token_vectors` of any text)."""
    weights = weights[: len(query_vectors)]  # the model truncates a very long query
    if not len(chunks) or not weights.any():
        return [0.0] * len(chunks)
    weights = weights / weights.sum()
    query_vectors = query_vectors[: len(weights)]
    return [float((query_vectors @ vectors.T).max(axis=1) @ weights) if len(vectors) else 0.0 for vectors in chunks]
