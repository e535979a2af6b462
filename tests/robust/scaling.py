"""Growth checks: how a function's cost grows with its input's size, not a timing budget."""

from __future__ import annotations

import time
from collections.abc import Callable


def seconds_per_call(call: Callable[[], object]) -> float:
    """Best of five rounds; each round repeats the call for at least 20 ms so tiny costs are measurable."""
    best = float("inf")
    for _ in range(5):
        calls, began = 0, time.perf_counter()
        while True:
            call()
            calls += 1
            elapsed = time.perf_counter() - began
            if elapsed >= 0.02:
                break
        best = min(best, elapsed / calls)
    return best


def growth(work: Callable[[int], object], small: int, factor: int = 8) -> float:
    """cost(factor * small) / cost(small): about `factor` when linear, `factor`**2 when quadratic."""
    return seconds_per_call(lambda: work(small * factor)) / seconds_per_call(lambda: work(small))


def assert_linear(work: Callable[[int], object], small: int, factor: int = 8) -> None:
    ratio = growth(work, small, factor)
    # Linear is ~8x, quadratic ~64x; the margin absorbs a loaded machine's noise.
    assert ratio < factor * 3, f"{factor}x the input cost {ratio:.0f}x the time: super-linear"
