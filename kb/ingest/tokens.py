"""Token counts with the embedding model's own tokenizer.

A budget in characters or in another tokenizer's units drifts from what the encoder
sees; a chunk over its 256-piece window is silently truncated, so we count exactly.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from tokenizers import Tokenizer

from kb.ingest.embedding import model_path

WINDOW = 256  # the model's max_seq_length, [CLS] and [SEP] included

_spent: ContextVar[list[float] | None] = ContextVar("token_count_seconds", default=None)


@functools.cache
def _tokenizer() -> Tokenizer:
    tokenizer = Tokenizer.from_file(str(model_path() / "tokenizer.json"))  # the embedding model's, as configured
    # The shipped tokenizer.json truncates and pads to 128; a count must see everything.
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def count_tokens(text: str) -> int:
    """Word-pieces the encoder sees for `text`, [CLS] and [SEP] included, without truncation."""
    spent = _spent.get()
    if spent is None:
        return len(_tokenizer().encode(text).ids)
    started = time.perf_counter()
    n = len(_tokenizer().encode(text).ids)
    spent[0] += time.perf_counter() - started
    return n


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
