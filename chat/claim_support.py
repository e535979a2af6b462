"""Is each cited sentence of an answer backed by the source it cites?

The rule (the same for every backend, and what `evaluate --answers` counts):

- An answer is split into sentences at ". ", "! ", "? " and line breaks; markers that
  follow a sentence's end ("… done. [2]") belong to that sentence.
- A sentence that carries [n] is *supported* when the quotes it cites, taken together,
  hold (a) every number and identifier-shaped token of the sentence (digits, dotted or
  snake_case names, --flags: getting those wrong is the costly kind of wrong) and (b) at
  least SUPPORT_SHARE of its other content words, compared crudely stemmed, stop words
  left out. A sentence with no content words makes no claim and is supported.
- A sentence without any marker is not checked: it cites nothing (the prompts ask for a
  marker on every sentence that states something from the sources).

Lexical on purpose: it is cheap, deterministic and explainable ("the quote does not
say 30 days"), and an extractive answer, which copies its sentences, always passes.
A model's faithful paraphrase that changes most words is flagged; that is a hint for a
reviewer to confirm or dismiss, never a reason to hide the answer.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

# pydantic (the API schemas that send these) reads typing_extensions' TypedDict on Python 3.11, not typing's.
from typing_extensions import TypedDict

from kb.text.language import CJK, bigrams
from kb.text.sentences import sentence_starts

SUPPORT_SHARE = 0.6

WORD = re.compile(r"[^\W_][\w'’.\-]*")  # any script's letters and digits
MARKER = re.compile(r"\[(\d{1,3})\]")
# A claim ends where a sentence ends (kb.text.sentences) or at a line break.
LINE_BREAKS = re.compile(r"\n+")
LEADING_MARKERS = re.compile(r"((?:\s*\[\d{1,3}\])+)[.,;:]?\s*")  # used with match(): anchored at pos
STOP = frozenset(
    """a an the and or but if then else of to in on at by for from with without into onto over under about
    as is are was were be been being do does did doing have has had having i me my we our you your he she it
    its they them their this that these those there here what which who whom whose when where why how can
    could should would will shall may might must not no nor so too very just also than such any all each
    some more most other same own only get got need needs want wants use used using way ways one two""".split()
)


def stem(word: str) -> str:
    """A crude suffix strip, enough for "exports" to meet "export" and "configured" "configure"."""
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


@functools.lru_cache(maxsize=8192)
def terms(text: str) -> frozenset[str]:
    """Lower-cased content words of `text`, stemmed, without stop words and one- or two-letter words.

    Kept for the process's last few thousand texts: the sentences of the passages cited most are
    scored again for every question they come up in.
    """
    lowered = text.lower()
    # Chinese and Japanese have no spaces: their runs count as overlapping character pairs, as full-text search reads them.
    out = {pair for run in CJK.findall(lowered) for pair in (bigrams(run).split() or [run])}
    for word in WORD.findall(CJK.sub(" ", lowered)):
        word = word.strip("'’-._")
        if len(word) >= 3 and word not in STOP:
            out.add(stem(word))
    return frozenset(out)


def exact_tokens(text: str) -> set[str]:
    """Numbers and identifier-shaped tokens: these must appear in the quote as they are (case aside)."""
    out = set()
    for word in WORD.findall(text):
        word = word.rstrip("'’-.")
        if any(c.isdigit() for c in word) or "_" in word or ("." in word.strip(".") and not word.endswith(".")):
            out.add(word.lower())
    return out


def _cuts(text: str) -> list[tuple[int, int]]:
    """(end of a sentence, start of the next) at every sentence end (kb.text.sentences: any script, not at
    abbreviations and ordinals) and every line break, in order."""
    ends = [(len(text[:start].rstrip()), start) for start in sentence_starts(text)]
    return sorted([*ends, *((m.start(), m.end()) for m in LINE_BREAKS.finditer(text))])


def claim_spans(text: str) -> list[tuple[int, int]]:
    """Where each sentence of the answer is, markers that follow its end included."""
    spans: list[tuple[int, int]] = []
    at = 0
    for cut in [*_cuts(text), None]:
        if cut is not None and cut[0] < at:
            continue  # a line break inside the space that ends a sentence: one cut
        start, end = at, (cut[0] if cut else len(text))
        at = cut[1] if cut else len(text)
        lead = LEADING_MARKERS.match(text, start, end)
        if lead and spans and lead.group(1).strip():
            spans[-1] = (spans[-1][0], start + len(lead.group(0).rstrip()))
            start = lead.end()
        if text[start:end].strip():
            spans.append((start, end))
    return spans


class UnsupportedClaim(TypedDict):
    """A cited sentence its quotes do not back: stored with the answer, shown as "not found in source [n]"."""

    start: int  # the sentence's place in the answer text
    end: int
    sentence: str
    numbers: list[int]
    missing: list[str]  # what the quotes lack: exact tokens first, then words


def check_sentence(sentence: str, quotes: Mapping[int, str]) -> tuple[bool, list[int], list[str]]:
    """(supported, cited numbers, what is missing) for one sentence; a number with no quote counts as empty."""
    numbers = list(dict.fromkeys(int(n) for n in MARKER.findall(sentence)))
    claim = MARKER.sub(" ", sentence)
    source = " ".join(quotes.get(n, "") for n in numbers)
    source_tokens = {w.rstrip("'’-.").lower() for w in WORD.findall(source)}
    missing_exact = sorted(t for t in exact_tokens(claim) if t not in source_tokens)
    wanted = terms(claim)
    missing_words = sorted(wanted - terms(source) - set(missing_exact))
    covered = 1.0 if not wanted else 1 - len(missing_words) / len(wanted)
    return not missing_exact and covered >= SUPPORT_SHARE, numbers, missing_exact + missing_words


def cited_sentences(text: str) -> list[tuple[int, int]]:
    """Spans of the sentences that carry at least one [n]."""
    return [(a, b) for a, b in claim_spans(text) if MARKER.search(text, a, b)]


SPACED_MARKER = re.compile(r"\s*" + MARKER.pattern)  # "the office [1]." is the quote's "the office."
QUOTED_MIN = 20  # characters: a cited sentence shorter than this is too common to place in its source


def quoted_spans(answer: str, number: int, quote: str) -> list[tuple[int, int]]:
    """Where in `quote` each sentence of `answer` that cites [number] stands word for word, whitespace aside (an
    extractive answer copies its sentences; a trailing "…" marks one cut short), in the answer's order; a sentence
    not found there, as a model's paraphrase, has none."""
    spans = []
    for start, end in cited_sentences(answer):
        sentence = answer[start:end]
        if number not in {int(n) for n in MARKER.findall(sentence)}:
            continue
        claim = SPACED_MARKER.sub("", sentence).strip().removesuffix("…").strip()
        if len(claim) < QUOTED_MIN:
            continue
        found = re.search(r"\s+".join(map(re.escape, claim.split())), quote)
        if found:
            spans.append(found.span())
    return spans


def quoted_at(answer: str, number: int, quote: str) -> tuple[int, int] | None:
    """Where in `quote` the first sentence of `answer` that cites [number] stands (quoted_spans); None: nowhere."""
    spans = quoted_spans(answer, number, quote)
    return spans[0] if spans else None


def unsupported_claims(text: str, quotes: Mapping[int, str]) -> list[UnsupportedClaim]:
    """The cited sentences of `text` that the rule finds unsupported by their quotes (number → quote text)."""
    out: list[UnsupportedClaim] = []
    for start, end in cited_sentences(text):
        supported, numbers, missing = check_sentence(text[start:end], quotes)
        if not supported:
            out.append({"start": start, "end": end, "sentence": text[start:end], "numbers": numbers,
                        "missing": missing[:8]})
    return out
