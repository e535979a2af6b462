"""MMR over the fused list: near-duplicates of a kept hit go; with lambda < 1, diversity wins close calls."""

from __future__ import annotations

import numpy as np

from search.retrieval import Hit, _mmr


def hit(chunk_id: int, score: float) -> Hit:
    return Hit(chunk_id, 1, "doc", "text/markdown", chunk_id, "doc", f"text {chunk_id}", 0, 1, None, "text",
               "concept", None, None, "", 0.3, score, {})


def unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


VECTORS = {
    1: unit(1, 0, 0),
    2: unit(1, 0.01, 0),  # a near-copy of 1
    3: unit(0.9, 0.44, 0),  # close to 1, not a copy
    4: unit(0, 0, 1),  # unlike anything else
}
HITS = [hit(1, 0.040), hit(2, 0.039), hit(3, 0.030), hit(4, 0.029)]


def test_relevance_only_keeps_the_order_and_drops_near_duplicates() -> None:
    kept = _mmr(HITS, VECTORS, lam=1.0, duplicate=0.97)
    assert [h.chunk_id for h in kept] == [1, 3, 4]


def test_a_lower_lambda_prefers_the_unlike_hit_in_a_close_call() -> None:
    kept = _mmr(HITS, VECTORS, lam=0.5, duplicate=0.97)
    assert [h.chunk_id for h in kept] == [1, 4, 3]


def test_every_hit_is_kept_when_nothing_counts_as_a_duplicate() -> None:
    assert [h.chunk_id for h in _mmr(HITS, VECTORS, lam=1.0, duplicate=1.01)] == [1, 2, 3, 4]
    assert _mmr([], VECTORS, lam=1.0, duplicate=0.97) == []
