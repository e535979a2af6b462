"""Optional cross-encoder reranking; off unless KB_RERANKER_PATH names a local model directory."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from django.conf import settings

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder


def status() -> str:
    return f"on ({settings.KB_RERANKER_PATH})" if settings.KB_RERANKER_PATH else "off"


@functools.cache
def _model(path: str) -> CrossEncoder:
    from sentence_transformers import CrossEncoder

    model: CrossEncoder = CrossEncoder(path, device="cpu", local_files_only=True)
    return model


def scores(query: str, passages: list[str]) -> list[float]:
    """Relevance of each passage to the query; higher is better (the model's raw logits)."""
    model = _model(settings.KB_RERANKER_PATH)
    return [float(s) for s in model.predict([(query, p) for p in passages], show_progress_bar=False)]
