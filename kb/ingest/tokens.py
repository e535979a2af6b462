"""Token counts with the embedding model's own tokenizer.

A budget in characters or in another tokenizer's units drifts from what the encoder
sees; a chunk over its 256-piece window is silently truncated, so we count exactly.
"""

from __future__ import annotations

import functools

from tokenizers import Tokenizer

from kb.ingest.embedding import model_path

WINDOW = 256  # the model's max_seq_length, [CLS] and [SEP] included


@functools.cache
def _tokenizer() -> Tokenizer:
    tokenizer = Tokenizer.from_file(str(model_path() / "tokenizer.json"))  # the embedding model's, as configured
    # The shipped tokenizer.json truncates and pads to 128; a count must see everything.
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def count_tokens(text: str) -> int:
    """Word-pieces the encoder sees for `text`, [CLS] and [SEP] included, without truncation."""
    return len(_tokenizer().encode(text).ids)
