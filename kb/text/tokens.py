"""Token counts with the embedding model's own tokenizer.

A budget in characters or in another tokenizer's units drifts from what the encoder
sees; a chunk over its 256-piece window is silently truncated, so we count exactly.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from kb.text.embedding import tokenizer

WINDOW = 256  # the model's max_seq_length, [CLS] and [SEP] included

_spent: ContextVar[list[float] | None] = ContextVar("token_count_seconds", default=None)


def count_tokens(text: str) -> int:
    """Word-pieces the encoder sees for `text`, [CLS] and [SEP] included, without truncation."""
    spent = _spent.get()
    if spent is None:
        return len(tokenizer().encode(text).ids)
    started = time.perf_counter()
    n = len(tokenizer().encode(text).ids)
    spent[0] += time.perf_counter() - started
    return n


class PieceIndex:
    """The word-pieces of one stretch of text, tokenized once, so the count of any span inside it
    whose ends fall between words is a difference of two positions instead of a new tokenization.

    Exact because the tokenizer's normalizer works character by character and its pre-tokenizer
    splits at whitespace and punctuation: a span cut between two words yields the same pieces
    alone as inside the longer text. A span cut inside a word gets no count (None).
    """

    def __init__(self, text: str, start: int, end: int) -> None:
        spent = _spent.get()
        started = time.perf_counter()
        encoding = tokenizer().encode(text[start:end], add_special_tokens=False)
        self.start, self.end = start, end
        self._starts = [start + a for a, _ in encoding.offsets]
        self._ends = [start + b for _, b in encoding.offsets]
        self._words = encoding.word_ids
        if spent is not None:
            spent[0] += time.perf_counter() - started

    def pieces(self, start: int, end: int) -> int | None:
        """Pieces of `text[start:end]` without [CLS]/[SEP], or None when a word crosses either end."""
        if not self.start <= start <= end <= self.end:
            return None
        first = bisect.bisect_right(self._ends, start)  # the first piece ending after `start`
        after = bisect.bisect_left(self._starts, end)  # the first piece starting at or after `end`
        if first < len(self._starts) and self._starts[first] < start:
            return None
        if after > 0 and self._ends[after - 1] > end:
            return None
        for i in (first, after):
            if 0 < i < len(self._words) and self._words[i] is not None and self._words[i] == self._words[i - 1]:
                return None  # the span begins or ends between two pieces of one word
        return max(0, after - first)


@contextmanager
def counting_time() -> Iterator[list[float]]:
    """Seconds spent counting tokens inside the block, in `[0]`: the chunker counts as it cuts, so
    this is how the ingest timings tell the token budget pass apart from the rest of chunking."""
    spent = [0.0]
    token = _spent.set(spent)
    try:
        yield spent
    finally:
        _spent.reset(token)
