"""Word vectors for the late stage's first, coarse pass, computed in the embedding pass and stored with each chunk.

A chunk stores one vector per content word (the mean of its word pieces' contextual vectors; stop words and
punctuation, which the query side weighs 0, are left out) as sign bits with one float16 scale: ~50 bytes a
word, ~2.8 KB a chunk, where every word piece in int8 took 54 KB. Those codes only order the late stage's
candidates; the few it keeps on top are scored again on their exact word pieces, encoded at query time
(search.late.exact_pieces), and the answer's sentences are scored on those too. Measured on the development
sets (docs/measurements/late_storage.md): sign bits alone cost R@1 and most of the answers' needles; the
exact pass on top gives both back.

Layout: MAGIC, the word count (little-endian uint16), one float16 scale per word, then each word's sign bits
(dimensions / 8 bytes). An index written in the format before (every word piece in int8) has no MAGIC; the
index version names the format, so its documents show stale and are re-indexed in the background.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

# Part of the index version: bump it when what is stored here changes, so documents
# indexed before are shown stale and re-indexed.
LATE_VERSION = 2

MAGIC = b"L2\x00\x00"  # as a float32 an old format's scale can never be (a denormal ~1.8e-41)
_COUNT = np.dtype("<u2")
_SCALE = np.dtype("<f2")


def words(tokens: Sequence[str]) -> list[list[int]]:
    """The word pieces' places grouped into words: a piece spelled "##…" continues the word before it."""
    grouped: list[list[int]] = []
    for i, token in enumerate(tokens):
        if token.startswith("##") and grouped:
            grouped[-1].append(i)
        else:
            grouped.append([i])
    return grouped


def spelled(tokens: Sequence[str], places: Sequence[int]) -> str:
    return "".join(tokens[i].removeprefix("##") for i in places)


def pack(vectors: np.ndarray, tokens: Sequence[str], stop: Collection[str]) -> bytes:
    """A chunk's word-piece `vectors` (pieces x dimensions) and their `tokens`, as one coded vector per word
    not in `stop` (spelled as `spelled` gives it)."""
    kept = [places for places in words(tokens) if spelled(tokens, places) not in stop]
    means = np.stack([vectors[places].mean(axis=0) for places in kept]) if kept else np.zeros((0, vectors.shape[1]))
    scales = np.abs(means).mean(axis=1).astype(_SCALE)
    signs = np.packbits(means >= 0, axis=1)
    return b"".join((MAGIC, np.array([len(kept)], dtype=_COUNT).tobytes(), scales.tobytes(), signs.tobytes()))


def expand(data: bytes | memoryview, tokens: Sequence[str], stop: Collection[str], dimensions: int) -> np.ndarray | None:
    """One vector per word piece of a chunk whose pieces are `tokens` (as the model read it): the coded vector
    `pack` stored for the piece's word, zeros for a stop word (`stop` as `pack` was given it), so code that reads
    word pieces can read the coarse codes. None where the words do not match the codes (the chunk was read
    differently). Data in the format before holds every piece already."""
    codes = unpack(data, dimensions)
    if not bytes(data[: len(MAGIC)]) == MAGIC:
        return codes if len(codes) == len(tokens) else None
    kept = [places for places in words(tokens) if spelled(tokens, places) not in stop]
    if len(kept) != len(codes):
        return None
    out = np.zeros((len(tokens), dimensions), dtype=np.float32)
    for code, places in zip(codes, kept, strict=True):
        out[places] = code
    return out


def stop_words(spellings: Collection[str]) -> set[str]:
    """The words with no lexeme in PostgreSQL's English configuration: what `pack` leaves out, which the query
    side weighs 0 (search.late). Other languages' stop words are kept, at a few bytes each."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT w FROM unnest(%s::text[]) AS w WHERE length(to_tsvector('english', w)) = 0",
                       [sorted(spellings)])
        return {w for (w,) in cursor.fetchall()}


def unpack(data: bytes | memoryview, dimensions: int) -> np.ndarray:
    """The word vectors `pack` stored (words x dimensions, float32). Data in the format before (every word piece,
    int8 after one float32 scale) gives its pieces: finer than the coarse codes, read until the background
    re-index of stale documents (kb.library.services.documents_refresh_stale) has replaced it."""
    raw = bytes(data)
    if not raw.startswith(MAGIC):
        scale = float(np.frombuffer(raw, dtype="<f4", count=1)[0])
        return np.frombuffer(raw, dtype=np.int8, offset=4).reshape(-1, dimensions).astype(np.float32) * scale
    at = len(MAGIC)
    count = int(np.frombuffer(raw, dtype=_COUNT, count=1, offset=at)[0])
    at += _COUNT.itemsize
    scales = np.frombuffer(raw, dtype=_SCALE, count=count, offset=at).astype(np.float32)
    at += count * _SCALE.itemsize
    bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8, offset=at).reshape(count, dimensions // 8), axis=1)
    signs: np.ndarray = np.where(bits > 0, np.float32(1), np.float32(-1)) * scales[:, None]
    return signs


def read_binary(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """The rows of `sql` in PostgreSQL's binary format, on the current connection and transaction.

    Django's cursors read text, in which bytea travels hex-encoded at twice its size and is decoded
    again (for the ~1 MB of int8 word pieces a late stage's 20 chunks once stored: 5.6 against 1.8 ms here).
    """
    import psycopg
    from django.db import connection

    connection.ensure_connection()
    # Django's error wrapper, as its own cursors have: a lost server raises django.db's OperationalError
    # (which the edge answers with a 503) and marks the connection unusable, not psycopg's own.
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, params, binary=True)
        return cursor.fetchall()
