"""Near-duplicates of a better hit leave the fused list; every other hit keeps its place."""

from __future__ import annotations

import numpy as np

from search.retrieval import Hit, _drop_duplicates


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
    5: unit(0.8, 0.6, 0),  # like 3 (0.98), less like 1 (0.80)
}
HITS = [hit(1, 0.040), hit(2, 0.039), hit(3, 0.030), hit(4, 0.029), hit(5, 0.028)]


def test_the_order_is_kept_and_near_duplicates_of_a_better_hit_go() -> None:
    assert [h.chunk_id for h in _drop_duplicates(HITS[:4], VECTORS, duplicate=0.97)] == [1, 3, 4]


def test_only_a_kept_hit_drops_others() -> None:
    # At 0.97, 3 is kept and 5, a near-copy of it, goes. At 0.85, 3 goes as a copy of 1, and 5, which is
    # like 3 but not like 1 at that level, stays: a dropped hit drops nothing.
    assert [h.chunk_id for h in _drop_duplicates(HITS, VECTORS, duplicate=0.97)] == [1, 3, 4]
    assert [h.chunk_id for h in _drop_duplicates(HITS, VECTORS, duplicate=0.85)] == [1, 4, 5]


def test_every_hit_is_kept_when_nothing_counts_as_a_duplicate() -> None:
    assert [h.chunk_id for h in _drop_duplicates(HITS, VECTORS, duplicate=1.01)] == [1, 2, 3, 4, 5]
    assert _drop_duplicates([], VECTORS, duplicate=0.97) == []
