"""Which sentence of the sources answers the question: late interaction at sentence level plus rare words.

A passage is scored as a whole by search.late; inside it, the sentence that answers is
found the same way: each question word piece meets its closest piece of the sentence
(MiniLM's contextual vectors, IDF-weighted so "how do I" counts for nothing). That alone
favours long sentences on the topic, so the score adds the IDF-weighted share of the
question's words the sentence actually contains, and a small preference for sources the
retrieval ranked higher.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from chat.support import stem, terms
from kb.ingest import embedding
from search import late
from search.retrieval import WORD

COVERAGE_WEIGHT = 0.25
RANK_PENALTY = 0.1  # per place the sentence's source is below the first


@dataclass(frozen=True)
class Scores:
    late: list[float]  # IDF-weighted MaxSim of the question's pieces over the sentence's
    coverage: list[float]  # IDF-weighted share of the question's words present in the sentence
    total: list[float]


def rare_word_weights(question: str) -> dict[str, float]:
    """Each content word of the question (stemmed as chat.support does) with its IDF in this corpus."""
    words = [m.group() for m in WORD.finditer(question)]
    weights: dict[str, float] = {}
    for word, idf in zip(words, late.word_weights(words), strict=True):
        for term in terms(word):
            weights[term] = max(weights.get(term, 0.0), idf)
    return {t: w for t, w in weights.items() if w > 0}


def compounds(question: str) -> dict[str, set[str]]:
    """Adjacent question words written as one ("fail over" → "failover"), with the words they stand for."""
    words = [m.group().lower() for m in WORD.finditer(question)]
    return {stem(a + b): terms(f"{a} {b}") for a, b in zip(words, words[1:], strict=False)
            if a.isalpha() and b.isalpha()}


def _found(text: str, context: str, joined: dict[str, set[str]]) -> set[str]:
    found = terms(text) | terms(context)
    for compound, parts in joined.items():
        if compound in found:
            found |= parts
    return found


def score(question: str, texts: Sequence[str], ranks: Sequence[int], contexts: Sequence[str] | None = None) -> Scores:
    """Scores of each text (a sentence) for `question`; `ranks` are their sources' numbers (1 = best);
    `contexts` (e.g. each sentence's section heading) count towards its rare-word coverage."""
    if not texts:
        return Scores([], [], [])
    _, pieces = embedding.embed_query(question)
    spans = [m.span() for m in WORD.finditer(question)]
    weights = late.query_weights(question, spans)[: len(pieces)]
    late_scores = [0.0] * len(texts)
    if weights.any():
        weights = weights / weights.sum()
        pieces = pieces[: len(weights)]
        late_scores = [
            float((pieces @ vectors.T).max(axis=1) @ weights) if len(vectors) else 0.0
            for vectors in embedding.token_vectors(list(texts))
        ]
    rare = rare_word_weights(question)
    total_weight = sum(rare.values())
    joined = compounds(question)
    coverage = [
        sum(w for t, w in rare.items() if t in found) / total_weight if total_weight else 0.0
        for found in (_found(text, context, joined) for text, context in
                      zip(texts, contexts or [""] * len(texts), strict=True))
    ]
    totals = [
        s + COVERAGE_WEIGHT * c - RANK_PENALTY * (rank - 1)
        for s, c, rank in zip(late_scores, coverage, ranks, strict=True)
    ]
    return Scores(late_scores, coverage, [float(np.round(t, 6)) for t in totals])
