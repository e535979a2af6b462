"""No model: the answer is the sources' own sentences that best match the question, each with its [n].

Deterministic (same question and sources, same answer, byte for byte) and instant, so it
is the default for `make run` and the tests. It cannot invent anything, and it cannot
rephrase either: a question whose answer is spread over many sentences gets the few
that match best, in document order.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from chat.prompts import Prompt

MAX_SENTENCES = 4
MAX_CHARS = 900
MAX_SENTENCE_CHARS = 500
WEAK = 0.34  # share of the question's terms matched below which the answer says it may be partial

WORD = re.compile(r"[a-z0-9][a-z0-9'’\-]*", re.I)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[*_]?[A-Z0-9])")
HEADING = re.compile(r"^\s{0,3}#{1,6}\s")
TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}")
BULLET = re.compile(r"^\s*(?:[-*+•]|\d{1,2}[.)])\s+")
STOP = frozenset(
    """a an the and or but if then else of to in on at by for from with without into onto over under about
    as is are was were be been being do does did doing have has had having i me my we our you your he she it
    its they them their this that these those there here what which who whom whose when where why how can
    could should would will shall may might must not no nor so too very just also than such any all each
    some more most other same own only get got need needs want wants use used using way ways one two""".split()
)


def terms(text: str) -> set[str]:
    """Lower-cased content words, crudely stemmed so "exports" meets "export"."""
    out = set()
    for word in WORD.findall(text.lower()):
        word = word.strip("'’-")
        if len(word) < 3 or word in STOP:
            continue
        for suffix in ("ing", "ed", "es", "s"):
            if len(word) > len(suffix) + 3 and word.endswith(suffix):
                word = word[: -len(suffix)]
                break
        out.add(word)
    return out


def sentences(text: str) -> list[str]:
    """Prose sentences of a source: headings and table rules skipped, bullets and table pipes undone."""
    out: list[str] = []
    in_fence = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            in_fence = not in_fence
            continue
        if not stripped or in_fence or HEADING.match(line) or TABLE_RULE.match(stripped):
            continue
        if stripped.startswith("|"):
            stripped = " — ".join(cell.strip() for cell in stripped.strip("|").split("|") if cell.strip())
        stripped = BULLET.sub("", stripped)
        for sentence in SENTENCE_END.split(stripped):
            sentence = sentence.strip()
            if len(sentence) > MAX_SENTENCE_CHARS:
                sentence = sentence[: MAX_SENTENCE_CHARS].rsplit(" ", 1)[0] + " …"
            if sentence:
                out.append(sentence)
    return out


@dataclass(frozen=True)
class _Candidate:
    number: int
    position: int
    sentence: str
    matched: int


def _cite(sentence: str, number: int) -> str:
    """The marker goes before the sentence's closing punctuation: "… CSV and PDF [1]."."""
    match = re.search(r"[.!?…]+[\"')\]]*$", sentence)
    if match and not sentence.endswith(" …"):
        return f"{sentence[: match.start()]} [{number}]{sentence[match.start():]}"
    return f"{sentence} [{number}]"


def compose(prompt: Prompt) -> list[list[str]]:
    """The answer's paragraphs of sentences: chosen sentences grouped by source, in source order."""
    wanted = terms(prompt.question)
    candidates = [
        _Candidate(source.number, position, sentence, len(wanted & terms(sentence)))
        for source in prompt.sources
        for position, sentence in enumerate(sentences(source.text))
    ]
    if not candidates:
        return []
    # Sentences matching at least half as many of the question's terms as the best one; each
    # source's best of those first (sources come best-first), then the best of the rest.
    floor = max(1, (max(c.matched for c in candidates) + 1) // 2)
    relevant = [c for c in candidates if c.matched >= floor]
    best: dict[int, _Candidate] = {}
    for c in relevant:
        if c.number not in best or c.matched > best[c.number].matched:
            best[c.number] = c
    ranked = sorted(best.values(), key=lambda c: (-c.matched, c.number, c.position))
    ranked += sorted((c for c in relevant if c not in ranked), key=lambda c: (-c.matched, c.number, c.position))
    chosen: list[_Candidate] = []
    size = 0
    for c in ranked:
        if len(chosen) >= MAX_SENTENCES or (chosen and size + len(c.sentence) > MAX_CHARS):
            continue
        chosen.append(c)
        size += len(c.sentence)
    if not chosen:  # nothing shares a word with the question: the top passage still passed the gate
        chosen = [candidates[0]]
    chosen.sort(key=lambda c: (c.number, c.position))
    paragraphs: list[list[str]] = []
    current = -1
    for c in chosen:
        if c.number != current:
            paragraphs.append([])
            current = c.number
        paragraphs[-1].append(_cite(c.sentence, c.number))
    strongest = max(c.matched for c in chosen)
    if wanted and strongest / len(wanted) < WEAK:
        paragraphs.append(["These passages may not answer the whole question; open the cited sources to check."])
    return paragraphs


class ExtractiveBackend:
    name = "extractive"
    model = "extractive (no language model)"
    notice = "Quoted from the sources without a language model."

    def generate(self, prompt: Prompt) -> Iterator[str]:
        # Sentence by sentence, as a model would stream it.
        for i, paragraph in enumerate(compose(prompt)):
            for j, sentence in enumerate(paragraph):
                yield ("\n\n" if i and not j else " " if j else "") + sentence

    def release(self) -> None:
        return None
