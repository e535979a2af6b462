"""How well an answer matches its question, in one word the page turns into a label.

Retrieval already decided that the passages may answer (search.answerability); a written answer can still
quote the wrong part of them: the carer's-leave sentence for a sick-leave question, the steps for adding a
carrier for escalating a delayed shipment. Two signals tell these apart for every backend and language:

- *similarity*: the cosine of the question and the answer's own text in the multilingual space
  (kb.text.multilingual: multilingual-e5, so a Polish answer to an English question is measured too).
- *gap* (search.answerability.Signals): how far the question's nearest passage stands out from its topic's
  other passages; a question that no passage stands out for is answered from one of many look-alikes.

An answer below either line is "closest" ("Closest passage — may not answer your question"), else "quoted".
The lines are settings (KB_ANSWER_MATCH_SIMILARITY, KB_ANSWER_MATCH_GAP), chosen on the three development sets
so that the label lands on wrong answers several times as often as on right ones; coverage of the question's
rare words and the answerability model's margin were measured and separated less (docs/CHAT.md has the table).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from django.conf import settings

from kb.text import multilingual

Match = Literal["quoted", "closest"]
QUOTED: Match = "quoted"
CLOSEST: Match = "closest"
READ_CHARS = 400  # of the answer: its lead, where a wrong answer goes wrong (e5 reads ~1 ms a character here;
# on the development sets the first 400 label exactly as the first 1,000 did)
MARKERS = re.compile(r"\s*\[\d{1,3}\]|`")


@dataclass(frozen=True)
class MatchSignals:
    similarity: float
    gap: float | None  # None where retrieval recorded no signals

    def level(self) -> Match:
        weak = self.similarity < settings.KB_ANSWER_MATCH_SIMILARITY or (
            self.gap is not None and self.gap < settings.KB_ANSWER_MATCH_GAP)
        return CLOSEST if weak else QUOTED


def similarity(question: str, answer: str) -> float:
    """Cosine of the question and the answer's text (markers out) in the multilingual space."""
    text = " ".join(MARKERS.sub("", answer).split())[:READ_CHARS]
    return float(multilingual.embed_query(question) @ multilingual.embed_passages([text])[0])


def signals(*, question: str, answer: str, gap: float | None) -> MatchSignals:
    return MatchSignals(similarity=round(similarity(question, answer), 4),
                        gap=None if gap is None else round(gap, 4))
