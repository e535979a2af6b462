"""Which sentence of the sources answers the question: late interaction at sentence level plus rare words.

A passage is scored as a whole by search.late; inside it, the sentence that answers is
found the same way: each question word piece meets its closest piece of the sentence
(MiniLM's contextual vectors, IDF-weighted so "how do I" counts for nothing). That alone
favours long sentences on the topic, so the score adds the IDF-weighted share of the
question's words the sentence actually contains, the cosine between the question's
embedding and the mean of the sentence's stored vectors (mean pooling is how MiniLM was
trained to place a question near its answer; over pieces read in context it finds
"guaranteed to be set" for "can always count on", where no word is shared), and a small
preference for sources the retrieval ranked higher.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from chat.claim_support import stem, terms
from chat.prompts import Source
from kb.text import embedding
from kb.text import pieces as pieces_format
from kb.text.pieces import read_binary
from kb.text.tokens import WINDOW
from search import late
from search.retrieval import WORD

COVERAGE_WEIGHT = 0.25
POOLED_WEIGHT = 1.0
RANK_PENALTY = 0.1  # per place the sentence's source is below the first


@dataclass(frozen=True)
class Scores:
    late: list[float]  # IDF-weighted MaxSim of the question's pieces over the sentence's
    coverage: list[float]  # IDF-weighted share of the question's words present in the sentence
    pooled: list[float]  # cosine of the question's embedding and the sentence's mean piece vector
    total: list[float]
    rare: frozenset[str]  # the question's words that count towards coverage


def rare_word_weights(words: Sequence[str], idf: Sequence[float]) -> dict[str, float]:
    """Each content word of the question (stemmed as chat.claim_support does) with its IDF in this corpus
    (`idf`: late.word_weights of `words`)."""
    weights: dict[str, float] = {}
    for word, weight in zip(words, idf, strict=True):
        for term in terms(word):
            weights[term] = max(weights.get(term, 0.0), weight)
    return {t: w for t, w in weights.items() if w > 0}


def compounds(question: str) -> dict[str, frozenset[str]]:
    """Adjacent question words written as one ("fail over" → "failover"), with the words they stand for."""
    words = [m.group().lower() for m in WORD.finditer(question)]
    return {stem(a + b): terms(f"{a} {b}") for a, b in zip(words, words[1:], strict=False)
            if a.isalpha() and b.isalpha()}


def _found(text: str, context: str, joined: dict[str, frozenset[str]]) -> frozenset[str]:
    found = terms(text) | terms(context)
    for compound, parts in joined.items():
        if compound in found:
            found |= parts
    return found


EXACT_EXTRA = 3  # chunks an answer encodes beyond those the late stage has just encoded
FIRST_PASS = 8  # the best sentences on the first pass whose chunks those are (extractive.CONSIDERED)


@dataclass(frozen=True)
class _Pieces:
    """A chunk's word-piece ids (and the ids as text, for substring search) and one vector per piece: exact,
    or its word's coarse code (kb.text.pieces.expand)."""

    ids: list[int]
    text: str
    vectors: np.ndarray


def _pieces(ids: list[int], vectors: np.ndarray) -> _Pieces:
    return _Pieces(ids, _as_text(ids), vectors)


@dataclass(frozen=True)
class _Chunk:
    """A chunk a source spans, on its stored coarse codes and, where this process holds or has encoded them, its
    exact word pieces (at least one of the two)."""

    chunk_id: int
    document_id: int
    start: int
    end: int
    text: str
    coarse: _Pieces | None
    exact: _Pieces | None

    def holds(self, source: Source) -> bool:
        return self.document_id == source.document_id and self.start < source.end and self.end > source.start

    def pieces(self, *, coarse: bool) -> _Pieces:
        read = (self.coarse, self.exact) if coarse else (self.exact, self.coarse)
        return next(p for p in read if p is not None)


def source_chunks(sources: Sequence[Source]) -> list[_Chunk]:
    """The chunks the sources span, in document order, with their coarse codes and the exact word pieces this
    process holds (search.late.exact_pieces: the late stage has just encoded the top ones); a chunk stored
    without usable codes is encoded."""
    if not sources:
        return []
    rows = read_binary(
        """SELECT id, document_id, start, "end", text, late_vectors FROM kb_chunk c
           WHERE document_id = ANY(%s) AND EXISTS (
               SELECT 1 FROM unnest(%s::bigint[], %s::int[], %s::int[]) AS s(document_id, start, "end")
               WHERE s.document_id = c.document_id AND c.start < s."end" AND c."end" > s.start)
           ORDER BY document_id, ordinal""",
        [sorted({s.document_id for s in sources}), [s.document_id for s in sources], [s.start for s in sources],
         [s.end for s in sources]])
    keys = [(chunk_id, text) for chunk_id, _, _, _, text, _ in rows]
    coarse = _coarse([row[4:] for row in rows])
    held: list[late.Pieces | None] = late.held_pieces(keys)
    missing = [k for k, c, h in zip(keys, coarse, held, strict=True) if c is None and h is None]
    encoded = iter(late.exact_pieces(missing) if missing else [])
    held = [next(encoded) if c is None and h is None else h for c, h in zip(coarse, held, strict=True)]
    return [_Chunk(chunk_id, document_id, start, end, text, None if c is None else _pieces(*c),
                   None if h is None else _pieces(h.ids, h.vectors))
            for (chunk_id, document_id, start, end, text, _), c, h in zip(rows, coarse, held, strict=True)]


def _coarse(rows: Sequence[tuple[str, bytes | None]]) -> list[tuple[list[int], np.ndarray] | None]:
    """Each (text, stored codes)'s piece ids as the model read the text, with one coarse vector per piece
    (None where the codes are missing or do not match)."""
    readable = [(text, codes) for text, codes in rows if codes is not None]
    if not readable:
        return [None] * len(rows)
    read = embedding.tokenizer().encode_batch([text for text, _ in readable], add_special_tokens=False)
    tokens = [e.tokens[: WINDOW - 2] for e in read]
    stop = pieces_format.stop_words({pieces_format.spelled(t, places) for t in tokens for places in pieces_format.words(t)})
    dimensions = embedding.dimensions()
    found = iter([(e.ids[: len(t)], pieces_format.expand(codes, t, stop, dimensions))
                  for e, t, (_, codes) in zip(read, tokens, readable, strict=True)])
    out: list[tuple[list[int], np.ndarray] | None] = []
    for _, codes in rows:
        ids, vectors = next(found) if codes is not None else ([], None)
        out.append(None if vectors is None else (ids, vectors))
    return out


def passage_pieces(chunks: Sequence[_Chunk], sources: Sequence[Source], texts: Sequence[str],
                   numbers: Sequence[int], *, coarse: bool) -> list[tuple[np.ndarray, int] | None]:
    """Each sentence's word-piece vectors cut from those of its source's `chunks` (`source_chunks`: their coarse
    codes where `coarse` and they have them, else their exact pieces where known), found by its word-piece ids,
    so a sentence is read in its passage's context and the passages are not encoded again, with the chunk (its
    place in `chunks`) it ends in.
    A sentence the units cleaned up (a table row's cells rejoined, markup dropped) is found piece by
    piece in order (`_aligned`). None where it is in no chunk: `score` encodes those on their own."""
    if not texts or not chunks:
        return [None] * len(texts)
    runs = {source.number: [k for k, chunk in enumerate(chunks) if chunk.holds(source)] for source in sources}
    wanted = embedding.piece_ids([t.removesuffix(" …") for t in texts])
    found: list[tuple[np.ndarray, int] | None] = []
    cursor: dict[int, int] = {}  # source number -> the chunk its last located sentence ended in
    for ids, number in zip(wanted, numbers, strict=True):
        places = runs.get(number, [])
        located = _located(ids, [chunks[k].pieces(coarse=coarse) for k in places], cursor.get(number, 0))
        if located is not None:
            cursor[number] = located[1]
        found.append(None if located is None else (located[0], places[located[1]]))
    return found


def sources_scores(question: str, sources: Sequence[Source], texts: Sequence[str], numbers: Sequence[int],
                   contexts: Sequence[str]) -> Scores:
    """`score` of the sources' sentences (`texts`, each in source `numbers`), read in their passages' context.
    A first pass scores every sentence on its chunk's coarse codes; the chunks holding the best FIRST_PASS are
    then encoded (at most EXACT_EXTRA beyond those the late stage has just encoded), and every sentence is
    scored again on the exact pieces where known. Coarse scores run lower, so the sentences left on them
    follow. An answer's sources span up to 16 chunks at ~17 ms each to encode; the answer lies in a few."""
    chunks = source_chunks(sources)
    located = passage_pieces(chunks, sources, texts, numbers, coarse=True)
    alone = [i for i, at in enumerate(located) if at is None]  # in no chunk: encoded once, for both passes
    own = dict(zip(alone, embedding.token_vectors([texts[i] for i in alone]) if alone else [], strict=True))
    first = score(question, texts, numbers, contexts, _vectors(located, own))
    best = sorted(range(len(texts)), key=lambda i: -first.total[i])[:FIRST_PASS]
    places = dict.fromkeys(at[1] for at in (located[i] for i in best) if at is not None)
    wanted = [k for k in places if chunks[k].exact is None][:EXACT_EXTRA]
    for k, exact in zip(wanted, late.exact_pieces([(chunks[k].chunk_id, chunks[k].text) for k in wanted]),
                        strict=True):
        chunks[k] = replace(chunks[k], exact=_pieces(exact.ids, exact.vectors))
    located = passage_pieces(chunks, sources, texts, numbers, coarse=False)
    return score(question, texts, numbers, contexts, _vectors(located, own))


def _vectors(located: Sequence[tuple[np.ndarray, int] | None], own: dict[int, np.ndarray]) -> list[np.ndarray | None]:
    return [at[0] if at is not None else own.get(i) for i, at in enumerate(located)]


NEAR = 3  # chunks, from the one the sentence before ended in, where a sentence is looked for first


def _located(ids: list[int], chunks: list[_Pieces], at: int) -> tuple[np.ndarray, int] | None:
    """The sentence's vectors and the chunk they end in: as one run of a chunk, else aligned piece by piece
    in one chunk, else in runs over several chunks (longer than one chunk); None when none of these finds it.

    A source's sentences come in the order of its chunks, so each is looked for in the few chunks from the
    one the sentence before it ended in (`at`, one back for the overlap of split parts): the work per
    sentence does not grow with the source. Only an exact run is then looked for in every chunk (one
    substring search each); a 300-page manual's long section took 15 s to align when every sentence walked
    every chunk."""
    first = max(0, at - 1)
    near = chunks[first : at + NEAR]
    for locate in (_run_of, _aligned, _spanning):
        located = locate(ids, near)
        if located is not None:
            return located[0], first + located[1]
    return _run_of(ids, chunks)


def _as_text(ids: list[int]) -> str:
    return "".join(map(chr, ids))


def _run_of(ids: list[int], chunks: Sequence[_Pieces]) -> tuple[np.ndarray, int] | None:
    """The vectors of the first chunk run of exactly these pieces, and that chunk's place in `chunks`."""
    if not ids:
        return None
    wanted = _as_text(ids)
    for k, chunk in enumerate(chunks):
        at = chunk.text.find(wanted)
        if at >= 0:
            return chunk.vectors[at : at + len(ids)], k
    return None


def _positions(text: str, token: int) -> Iterator[int]:
    at = text.find(chr(token))
    while at >= 0:
        yield at
        at = text.find(chr(token), at + 1)


ALIGN_GAP = 12  # chunk pieces that may lie between two found pieces (a cell's "|", a dropped <span class="…">)
ALIGN_SHARE = 0.6  # of the sentence's pieces that must be found, ROW_JOINER's not counted (the chunk has none)
ROW_JOINER = " — "  # what a table row's cells are joined with in a sentence (chat.backends.extractive.units)


@functools.cache
def _joiner_ids() -> frozenset[int]:
    return frozenset(embedding.piece_ids([ROW_JOINER])[0])


def _aligned(ids: list[int], chunks: Sequence[_Pieces]) -> tuple[np.ndarray, int] | None:
    """The vectors of the sentence's pieces found in order in one chunk, each within ALIGN_GAP of the last,
    from the start that finds most, and that chunk's place; pieces the chunk lacks are left out. None below
    ALIGN_SHARE."""
    best: list[int] = []
    best_chunk = -1
    for place, chunk in enumerate(chunks):
        chunk_ids = chunk.ids
        for first in range(min(3, len(ids))):
            if len(best) >= len(ids) - first:
                break  # no walk from here finds more than the best one (the walks on a long table took 100+ ms)
            for at in _positions(chunk.text, ids[first]):
                taken, nxt = [at], at + 1
                rest = ids[first + 1:]
                for k, token in enumerate(rest):
                    if len(taken) + len(rest) - k <= len(best):
                        break  # this walk can no longer beat the best one
                    window = chunk_ids[nxt : nxt + ALIGN_GAP]
                    if token in window:
                        nxt += window.index(token)
                        taken.append(nxt)
                        nxt += 1
                if len(taken) > len(best):
                    best, best_chunk = taken, place
    findable = len([t for t in ids if t not in _joiner_ids()])  # a short row of many cells is half dashes
    if best_chunk < 0 or len(best) < max(2, ALIGN_SHARE * findable):
        return None
    return chunks[best_chunk].vectors[best], best_chunk


SPAN_PART = 8  # word pieces: each part of a sentence found in one chunk but the last is at least this long


def _spanning(ids: list[int], chunks: Sequence[_Pieces]) -> tuple[np.ndarray, int] | None:
    """The vectors of a sentence longer than a chunk (a long code block cut over two or three chunks):
    the longest run of its first pieces in any chunk, then of the pieces after those, and so on.
    Without this such a sentence was encoded on the spot: ~60 ms a sentence here."""
    parts: list[np.ndarray] = []
    rest = _as_text(ids)
    last = -1
    while rest:
        length, vectors = 0, None
        for place, chunk in enumerate(chunks):
            found = _longest_prefix(rest, chunk.text)
            if found > length:
                at = chunk.text.find(rest[:found])
                length, vectors, last = found, chunk.vectors[at : at + found], place
        if vectors is None or (length < SPAN_PART and length < len(rest)):
            return None
        parts.append(vectors)
        rest = rest[length:]
    return np.concatenate(parts), last


def _longest_prefix(wanted: str, text: str) -> int:
    """How many of `wanted`'s first characters (word pieces) occur together in `text`."""
    low, high = 0, len(wanted)
    while low < high:
        middle = (low + high + 1) // 2
        if wanted[:middle] in text:
            low = middle
        else:
            high = middle - 1
    return low


def on_topic(question: str, texts: Sequence[str], rare: Collection[str]) -> list[bool]:
    """Whether each text (a section heading) holds one of the question's rare words (`Scores.rare`),
    counted as coverage counts them: a heading that holds none is about something else, however its
    sentences sound."""
    if not texts:
        return []
    joined = compounds(question)
    return [not _found(text, "", joined).isdisjoint(rare) for text in texts]


def score(question: str, texts: Sequence[str], ranks: Sequence[int], contexts: Sequence[str] | None = None,
          vectors: Sequence[np.ndarray | None] | None = None) -> Scores:
    """Scores of each text (a sentence) for `question`; `ranks` are their sources' numbers (1 = best);
    `contexts` (e.g. each sentence's section heading) count towards its rare-word coverage; `vectors`,
    where given (`passage_pieces`), are the texts' word-piece vectors, so only the others are encoded."""
    if not texts:
        return Scores([], [], [], [], frozenset())
    question_vector, pieces = embedding.embed_query(question)
    spans = [m.span() for m in WORD.finditer(question)]
    words = [question[a:b] for a, b in spans]
    idf = late.word_weights(words)  # one read serves the pieces' weights and the rare words
    weights = late.query_weights(question, spans, idf)[: len(pieces)]
    given = list(vectors) if vectors is not None else [None] * len(texts)
    missing = [text for text, v in zip(texts, given, strict=True) if v is None]
    encoded = iter(embedding.token_vectors(missing) if missing else [])
    known = [v if v is not None else next(encoded) for v in given]
    late_scores = [0.0] * len(texts)
    if weights.any():
        weights = weights / weights.sum()
        pieces = pieces[: len(weights)]
        late_scores = [float((pieces @ v.T).max(axis=1) @ weights) if len(v) else 0.0 for v in known]
    pooled = [_pooled_cosine(question_vector, v) for v in known]
    rare = rare_word_weights(words, idf)
    total_weight = sum(rare.values())
    joined = compounds(question)
    coverage = [
        sum(w for t, w in rare.items() if t in found) / total_weight if total_weight else 0.0
        for found in (_found(text, context, joined) for text, context in
                      zip(texts, contexts or [""] * len(texts), strict=True))
    ]
    totals = [
        s + COVERAGE_WEIGHT * c + POOLED_WEIGHT * p - RANK_PENALTY * (rank - 1)
        for s, c, p, rank in zip(late_scores, coverage, pooled, ranks, strict=True)
    ]
    return Scores(late_scores, coverage, pooled, [float(np.round(t, 6)) for t in totals], frozenset(rare))


def _pooled_cosine(question_vector: np.ndarray, pieces: np.ndarray) -> float:
    """The normalised mean of the sentence's pieces as stored, nothing encoded. They were encoded in their
    chunk's context, so this is not the sentence's own embedding (it carries the passage's topic too, and
    ranks a passage's sentences differently); measured, it picks the answering sentence more often."""
    if not len(pieces):
        return 0.0
    mean = pieces.mean(axis=0)
    norm = float(np.linalg.norm(mean))
    return float(mean @ question_vector) / norm if norm else 0.0
