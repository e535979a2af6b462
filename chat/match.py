"""How well an answer matches its question, in one word the page turns into a label.

Retrieval already decided that the passages may answer (search.answerability); a written answer can still
quote the wrong part of them: the carer's-leave sentence for a sick-leave question, the steps for adding a
carrier for escalating a delayed shipment. Two signals tell most of these apart for every backend and language:

- *similarity*: the cosine of the question and the answer's own text in the multilingual space
  (kb.text.multilingual: multilingual-e5, so a Polish answer to an English question is measured too).
- *gap* (search.answerability.Signals): how far the question's nearest passage stands out from its topic's
  other passages; a question that no passage stands out for is answered from one of many look-alikes.

Both miss an answer on the question's topic that shares its words but answers a neighbouring question (the
carer's-leave sentence: similarity 0.92, gap 0.20). A third signal, lexical and for English questions, catches
its plainest form:

- *stand-in*: the answer's lead sentence names the thing the question asks about with another qualifier in its
  place, "carer's leave" for "sick leave", where the cited passages write the question's pair too.

An answer below either line, or with a stand-in, is "closest" ("Closest passage — may not answer your question"),
else "quoted". The lines are settings (KB_ANSWER_MATCH_SIMILARITY, KB_ANSWER_MATCH_GAP), chosen on the three
development sets so that the label lands on wrong answers several times as often as on right ones; coverage of
the question's rare words and the answerability model's margin were measured and separated less (docs/CHAT.md
has the table).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from django.conf import settings

from chat.claim_support import STOP, WORD, stem
from kb.text import language, multilingual
from kb.text.sentences import split as split_sentences

Match = Literal["quoted", "closest"]
QUOTED: Match = "quoted"
CLOSEST: Match = "closest"
READ_CHARS = 400  # of the answer: its lead, where a wrong answer goes wrong (e5 reads ~1 ms a character here;
# on the development sets the first 400 label exactly as the first 1,000 did)
MARKERS = re.compile(r"\s*\[\d{1,3}\]|`")
# Words that count or pick rather than qualify ("every session" is no other kind of "active session"); the
# claim check's stop words leave them in.
QUANTIFIERS = frozenset("every another many much few several various both either neither whole entire".split())


@dataclass(frozen=True)
class MatchSignals:
    similarity: float
    gap: float | None  # None where retrieval recorded no signals
    stand_in: str | None = None  # `stand_in`'s finding, e.g. "sick leave → carer's leave"

    def level(self) -> Match:
        weak = self.similarity < settings.KB_ANSWER_MATCH_SIMILARITY or (
            self.gap is not None and self.gap < settings.KB_ANSWER_MATCH_GAP) or self.stand_in is not None
        return CLOSEST if weak else QUOTED


def similarity(question: str, answer: str) -> float:
    """Cosine of the question and the answer's text (markers out) in the multilingual space."""
    text = " ".join(MARKERS.sub("", answer).split())[:READ_CHARS]
    return float(multilingual.embed_query(question) @ multilingual.embed_passages([text])[0])


def _pairs(text: str) -> list[tuple[str, str]]:
    """Each two content words of `text` written next to each other ("sick leave", "carer's leave"), lower-cased: a
    stop word, a number or punctuation between two words parts them, so "reset my password" holds no pair."""
    pairs: list[tuple[str, str]] = []
    before, end = "", -1
    lowered = text.lower()
    for m in WORD.finditer(lowered):
        word = m.group().strip("'’-._")
        content = (len(word) >= 3 and word not in STOP and word not in QUANTIFIERS
                   and not any(c.isdigit() for c in word))
        if content and before and not lowered[end:m.start()].strip():
            pairs.append((before, word))
        before, end = (word, m.end()) if content else ("", -1)
    return pairs


def _stems(text: str) -> set[str]:
    return {stem(m.group().strip("'’-._")) for m in WORD.finditer(text.lower())}


def lead_sentence(answer: str) -> str:
    """The answer's first sentence (or list line), markers out: where the answer says what it is about."""
    text = MARKERS.sub("", answer).strip().split("\n", 1)[0]
    return next(iter(split_sentences(text)), "")


def stand_in(question: str, answer: str, quotes: Sequence[str]) -> str | None:
    """The question's pair and what stands in for it ("sick leave → carer's leave") where the answer's lead sentence
    holds the head word of a pair the question asks about ("leave" of "sick leave") with a qualifier of its own
    that the question does not hold ("carer's"), and none of the question's qualifiers of that head; else None.
    Only a pair the cited passages (`quotes`) write as the question does counts: the documents name that thing,
    so the answer quoted its neighbour ("how many days" / "five days" is no such pair). A lead that names one of
    the question's pairs as the question writes it ("time zone" beside "elapsed time" for "which time zone …
    travel comp time") is on the question. English questions only: the stop words and stems are English ("une
    composante" is no qualified thing)."""
    if language.detect(question)[0] != "en":
        return None
    sentence = lead_sentence(answer)
    said, asked, lead = _stems(sentence), _stems(question), _pairs(sentence)
    written = _pairs(question)
    pairs = [(stem(a), stem(b)) for a, b in written]
    if set(pairs) & {(stem(a), stem(b)) for a, b in lead}:
        return None
    named = {(stem(a), stem(b)) for quote in quotes for a, b in _pairs(quote)}
    for (qualifier, head), (asked_qualifier, asked_head) in zip(pairs, written, strict=True):
        if (qualifier, head) not in named or any(q in said for q, h in pairs if h == head):
            continue
        for other, word in lead:
            if stem(word) == head and stem(other) not in asked:
                return f"{asked_qualifier} {asked_head} → {other} {word}"
    return None


def signals(*, question: str, answer: str, gap: float | None, quotes: Sequence[str]) -> MatchSignals:
    return MatchSignals(similarity=round(similarity(question, answer), 4),
                        gap=None if gap is None else round(gap, 4), stand_in=stand_in(question, answer, quotes))
