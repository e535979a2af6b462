"""The extractive backend at a readable pace, for the browser test that watches an answer grow.

chat has no pacing setting (the extractive backend is instant), so the worker in that test is
started with KB_ANSWER_BACKEND pointing here. The producer is slowed, never the browser: the
page consumes events as fast as they come."""

from __future__ import annotations

import time
from collections.abc import Iterator

from chat.backends.extractive import ExtractiveBackend
from chat.prompts import Prompt

PAUSE_S = 0.35


class PacedExtractive(ExtractiveBackend):
    def generate(self, prompt: Prompt) -> Iterator[str]:
        for piece in super().generate(prompt):
            # Word by word, like a model, so the citation filter has something to release each time.
            words = piece.split(" ")
            for i, word in enumerate(words):
                time.sleep(PAUSE_S / max(1, len(words) // 3))
                yield word if i == len(words) - 1 else word + " "
