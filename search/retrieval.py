"""Hybrid retrieval inside permissions.

One SQL round trip gathers three candidate lists, each filtered by the user's access
principals in its own WHERE before its ORDER BY ... LIMIT (never a post-filter):
dense (HNSW cosine, iterative index scan), lexical (IDF-weighted full text) and
identifier (trigram-indexed ILIKE for codes, keys and flags), plus the questions verdicts remembered for their
passages (search.memory), joined to the passage under the same filter. They are fused by reciprocal rank (a
remembered question near enough puts its passage first); staff's hidden passages are left out and boosted ones
gain (search.adjustments); near-duplicates of a better hit are dropped; late interaction
(search.late) re-orders the top hits; the answerability model (or the distance gate)
decides whether the question is answerable (NO ANSWER otherwise); an optional
cross-encoder reranks the survivors; a hard cap bounds what reaches the generator.
"""

from __future__ import annotations

import math
import operator
import re
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from functools import reduce
from typing import Any

import numpy as np
from django.conf import settings
from django.db import connections, transaction
from django.db.models import Q

from accounts.acl import user_principals
from kb.library.models import Chunk, passage_link
from kb.text import embedding, language, multilingual
from kb.text.classify import SCREEN, classify_query
from kb.text.identifiers import identifiers
from kb.text.multilingual import ENGLISH_SCALE
from search import answerability, late, replica, rerank
from search.models import RememberedQuestion
from search.stats import idf_sql, readable_languages, readable_ndoc_sql, readable_total_sql

# A word of any script: letters and digits, with inner apostrophes, dots and hyphens (a CJK run, written
# without spaces, is one "word" here; full-text search reads it as bigrams: kb.text.language).
WORD = re.compile(r"[^\W_][\w'’.-]*[^\W_]|[^\W_]")
LIKE_SPECIALS = str.maketrans({"%": r"\%", "_": r"\_", "\\": r"\\"})
REGEX_SPECIALS = re.compile(r"[.^$*+?()\[\]{}|\\]")  # PostgreSQL's regular expressions take each literally escaped
# Matching chunks the identifier list reads at most: a short identifier's trigrams match thousands of
# chunks on a large corpus, each checked against its text (~40 us apiece).
IDENT_SCAN = 500
PRINCIPALS = "%(principals)s::varchar[]"


@dataclass(frozen=True)
class SearchOptions:
    """Every knob, defaulting to settings (docs/SETTINGS.md); evaluation overrides them."""

    k: int = 20
    candidates: int = field(default_factory=lambda: settings.KB_SEARCH_CANDIDATES)
    rrf_k: int = field(default_factory=lambda: settings.KB_SEARCH_RRF_K)
    weight_dense: float = field(default_factory=lambda: settings.KB_SEARCH_WEIGHT_DENSE)
    weight_lexical: float = field(default_factory=lambda: settings.KB_SEARCH_WEIGHT_LEXICAL)
    weight_ident: float = field(default_factory=lambda: settings.KB_SEARCH_WEIGHT_IDENT)
    weight_multilingual: float = field(default_factory=lambda: settings.KB_SEARCH_WEIGHT_MULTILINGUAL)
    threshold: float = field(default_factory=lambda: settings.KB_SEARCH_THRESHOLD)
    cap: int = field(default_factory=lambda: settings.KB_SEARCH_CAP)
    source_margin: float = field(default_factory=lambda: settings.KB_SEARCH_SOURCE_MARGIN)
    duplicate: float = field(default_factory=lambda: settings.KB_SEARCH_DUPLICATE)
    ef_search: int = field(default_factory=lambda: settings.KB_SEARCH_EF_SEARCH)
    lexical: bool = True
    lexical_max_share: float = field(default_factory=lambda: settings.KB_SEARCH_LEXICAL_MAX_SHARE)
    lexical_max_terms: int = field(default_factory=lambda: settings.KB_SEARCH_LEXICAL_MAX_TERMS)
    lexical_select_rows: int = field(default_factory=lambda: settings.KB_SEARCH_LEXICAL_SELECT_ROWS)
    identifiers: bool = True
    dense: bool = True
    multilingual: bool = field(default_factory=lambda: settings.KB_MULTILINGUAL)  # the e5 space's dense list
    # The multilingual space's cosine distance d on MiniLM's scale: offset + scale * d (kb.text.multilingual
    # .ENGLISH_SCALE), so that `threshold` gates the passages of both spaces. A dense list whose nearest passage is
    # more than `multilingual_margin` (on that scale) farther than the other space's has nothing to say (_fuse_spaces).
    multilingual_offset: float = ENGLISH_SCALE[0]
    multilingual_scale: float = ENGLISH_SCALE[1]
    multilingual_margin: float = field(default_factory=lambda: settings.KB_SEARCH_MULTILINGUAL_MARGIN)
    multilingual_lexical_bonus: float = field(default_factory=lambda: settings.KB_SEARCH_MULTILINGUAL_LEXICAL_BONUS)
    # How much nearer a passage in another language is placed for an English question (a multilingual-space distance,
    # before scaling): the model puts a translation farther than a paraphrase in the question's own language, and
    # MiniLM's English passages, which the question's space is judged against, are in its language.
    multilingual_cross: float = field(default_factory=lambda: settings.KB_SEARCH_MULTILINGUAL_CROSS)
    # The threshold when the nearest passage is in the multilingual space (on MiniLM's scale, with `multilingual_cross`)
    multilingual_threshold: float = field(default_factory=lambda: settings.KB_SEARCH_MULTILINGUAL_THRESHOLD)
    late_depth: int = field(default_factory=lambda: settings.KB_SEARCH_LATE_DEPTH)
    late_weight: float = field(default_factory=lambda: settings.KB_SEARCH_LATE_WEIGHT)
    late_exact: int = field(default_factory=lambda: settings.KB_SEARCH_LATE_EXACT)
    rerank: bool = True
    answerability: bool = True  # False: the distance threshold alone decides (as before calibration)
    # Remembered questions (search.memory): their candidate list reaches `memory_reach` (cosine distance between the
    # questions). One within `memory_distance` puts its passage first, and makes the question answerable, when the
    # passage is among the first `memory_rank` hits and within `memory_margin` of the first one's distance.
    memory: bool = True
    memory_distance: float = field(default_factory=lambda: settings.KB_MEMORY_DISTANCE)
    # ...for a question in another language than English: MiniLM reads it less well, and finds its questions nearer
    # to one another (docs/LEARNING.md)
    memory_distance_other: float = field(default_factory=lambda: settings.KB_MEMORY_DISTANCE_OTHER)
    memory_rank: int = field(default_factory=lambda: settings.KB_MEMORY_RANK)
    memory_margin: float = field(default_factory=lambda: settings.KB_MEMORY_MARGIN)
    memory_reach: float = field(default_factory=lambda: settings.KB_MEMORY_REACH)
    weight_remembered: float = field(default_factory=lambda: settings.KB_SEARCH_WEIGHT_REMEMBERED)
    boost: float = field(default_factory=lambda: settings.KB_SEARCH_BOOST)  # a boosted passage's gain (adjustments)


@dataclass(frozen=True)
class Hit:
    chunk_id: int
    document_id: int
    document_title: str
    mime_type: str
    ordinal: int
    breadcrumb: str
    content: str
    start: int
    end: int
    page: int | None
    kind: str
    audience: str
    part: int | None
    parts: int | None
    split_group: str
    distance: float
    score: float
    ranks: dict[str, int]
    passed: bool = False
    late_score: float | None = None
    rerank_score: float | None = None
    multilingual_distance: float | None = None  # cosine distance in the multilingual space (None: not searched)
    # Whose passage: "english" (MiniLM's space: `distance` is MiniLM's) or "multilingual" (a passage in another
    # language: `distance` is its multilingual distance on MiniLM's scale).
    space: str = "english"
    cross_language: bool = False  # an English question (detected; kb.text.language), a passage in another language
    # The nearest remembered question of this passage (search.memory), the ids of those within reach of the question
    # (nearest first), and the document's ranges they were remembered with (what answered them).
    remembered_distance: float | None = None
    remembered: tuple[int, ...] = ()
    remembered_spans: tuple[tuple[int, int], ...] = ()
    boosted: bool = False  # staff boosted it or its document (search.adjustments)

    @property
    def link(self) -> str:
        return passage_link(self.document_id, self.start, self.end, self.page)


@dataclass
class SearchResult:
    query: str
    intent: str
    intent_confidence: float
    threshold: float
    hits: list[Hit]
    nearest_distance: float | None
    timings_ms: dict[str, float]
    warnings: list[str] = field(default_factory=list)
    signals: answerability.Signals | None = None
    probability: float | None = None  # the answerability model's, when one decided
    cutoff: float | None = None
    vector: np.ndarray | None = None  # the query's embedding: stored with the answer for content-gap topics
    space: str = "english"  # the nearest passage's space: whose signals decide answer or refuse
    # The remembered questions that put the first passage first: a later verdict against the answer they led to
    # forgets them (chat.review.judgements).
    remembered: list[int] = field(default_factory=list)
    # Names in the question no readable passage mentions (unknown_names): no remembered question or curated answer
    # stands for a question about something the documents never name.
    unknown_names: list[str] = field(default_factory=list)

    @property
    def passed(self) -> list[Hit]:
        return [hit for hit in self.hits if hit.passed]

    @property
    def answerable(self) -> bool:
        return bool(self.passed)

    @property
    def related_distance(self) -> float:
        """The farthest a passage may be and still be offered beside a refusal as one of the closest."""
        return self.threshold + settings.KB_SEARCH_RELATED_MARGIN

    @property
    def refusal_reason(self) -> str | None:
        if self.answerable:
            return None
        return answerability.refusal_reason(self.signals, probability=self.probability, cutoff=self.cutoff,
                                            threshold=self.threshold)


def lexical_query(query: str) -> str:
    """The question's words that full-text search looks for (each is an alternative, ranked by IDF)."""
    words = [w for w in WORD.findall(query) if not w.isdigit() or len(w) > 2]
    return " ".join(dict.fromkeys(words))


def lexical_configs(query: str, principals: list[str], readable: set[str] | None = None) -> list[tuple[str, str]]:
    """(text search configuration, the question's words as it reads them) for each language the question is
    matched in among those of the chunks `principals` may read (`readable`, when the caller has them:
    kb.text.language.question_configs); [] when the question is in none of them: a cross-language question
    is the dense spaces' to answer."""
    words = lexical_query(query)
    if not words:
        return []
    return language.question_configs(words, readable_languages(principals) if readable is None else readable)


def _candidate_sql(*, dense: bool, lexical: bool, idents: int, multi: bool = False, memory: bool = False) -> str:
    # Each candidate list carries the ACL overlap in its own WHERE, ahead of ORDER BY/LIMIT,
    # so a restricted chunk is never ranked for this user (tests assert it on this SQL).
    acl = f"c.acl && {PRINCIPALS}"
    empty = "SELECT NULL::bigint AS id, NULL::bigint AS r WHERE false"
    # With the multilingual space, MiniLM's list ranks MiniLM's passages: English ones and any without a vector
    # in the other space (indexed before it); the multilingual list ranks the rest.
    english = " AND (c.multilingual_embedding IS NULL OR c.language = 'en')" if multi else ""
    dense_sql = f"""
        SELECT id, row_number() OVER (ORDER BY distance, id) AS r FROM (
            SELECT c.id, c.embedding <=> %(vector)s::halfvec AS distance
            FROM kb_chunk c WHERE {acl}{english}
            ORDER BY c.embedding <=> %(vector)s::halfvec LIMIT %(n)s
        ) d""" if dense else empty
    # The same in the multilingual space (kb.text.multilingual): its own HNSW index; chunks indexed
    # before the space existed have no vector there and are not in this list.
    multi_sql = f"""
        SELECT id, row_number() OVER (ORDER BY distance, id) AS r FROM (
            SELECT c.id, c.multilingual_embedding <=> %(mvector)s::halfvec AS distance
            FROM kb_chunk c WHERE {acl} AND c.multilingual_embedding IS NOT NULL
            ORDER BY c.multilingual_embedding <=> %(mvector)s::halfvec LIMIT %(n)s
        ) m""" if multi else empty
    # IDF-weighted: each query lexeme's ts_rank in the chunk times its inverse document
    # frequency (search_lexeme_stats), so rare words outweigh words every chunk has. Only the
    # rarest lexemes select candidates, until together they are in `select_rows` chunks (the
    # rarest one in any case), which bounds the rows ranked at any corpus size; the other
    # picked words only add to their rank. A common word selecting candidates would make the
    # subquery rank a large part of the table for almost no signal.
    # Each chunk is matched only by the question's words as its own language's configuration reads them
    # (picked and anyterm hold one set per configuration the question is matched in: lexical_configs).
    lexical_sql = f"""
        SELECT id, row_number() OVER (ORDER BY rank DESC, id) AS r FROM (
            SELECT c.id, (SELECT sum(ts_rank(c.search, t.q, 0) * t.idf) FROM picked t
                          WHERE t.config = c.search_config AND c.search @@ t.q) AS rank
            FROM kb_chunk c, anyterm a
            WHERE {acl} AND c.search_config = a.config AND c.search @@ a.q
            ORDER BY rank DESC LIMIT %(n)s
        ) l""" if lexical else empty
    if idents:
        # Chunks holding any of the identifiers are found with one case-insensitive regular expression over their
        # identifier-shaped tokens (Chunk.identifiers, through its trigram index); ILIKE lower-cases the whole text
        # once per pattern (four patterns over the development corpus took 34 ms against 8), so it then counts
        # matches in those chunks' texts only.
        matches = " + ".join(f"(c.text ILIKE %(ident{i})s)::int" for i in range(idents))
        ident_sql = f"""
        SELECT id, row_number() OVER (ORDER BY matched DESC, distance, id) AS r FROM (
            SELECT c.id, {matches} AS matched, c.embedding <=> %(vector)s::halfvec AS distance
            FROM (SELECT c.id, c.text, c.embedding FROM kb_chunk c WHERE {acl} AND c.identifiers ~* %(ident_any)s
                  LIMIT {IDENT_SCAN}) c
            ORDER BY matched DESC, distance LIMIT %(n)s
        ) t"""
    else:
        ident_sql = empty
    # Remembered questions (search.memory) near this one, each standing for its passage while the passage's text is
    # unchanged (the stable id), under the passage's own access: only a passage this user may read is ranked.
    distance = "q.embedding <=> %(vector)s::vector"
    memory_sql = f"""
        SELECT id, row_number() OVER (ORDER BY distance, id) AS r, distance, questions, question_distances FROM (
            SELECT c.id, min({distance}) AS distance, array_agg(q.id ORDER BY {distance}, q.id) AS questions,
                   array_agg({distance} ORDER BY {distance}, q.id) AS question_distances
            FROM search_rememberedquestion q
            JOIN kb_chunk c ON c.document_id = q.document_id AND c.stable_id = q.stable_id
            WHERE {acl} AND {distance} <= %(memory_reach)s
            GROUP BY c.id ORDER BY distance, c.id LIMIT %(n)s
        ) q""" if memory else (
        "SELECT NULL::bigint AS id, NULL::bigint AS r, NULL::float AS distance, NULL::bigint[] AS questions, "
        "NULL::float[] AS question_distances WHERE false")
    # A lexeme's frequency is counted over the chunks this user may read (search.stats), so no restricted
    # document moves which words select candidates or how they weigh. A lexeme they cannot find counts as rare.
    # A lexeme's frequency is counted among the chunks of the configuration that produced it (search.stats).
    picked_sql = f"""
        SELECT config, word, q, idf, ndoc FROM (
          SELECT w.*, row_number() OVER (PARTITION BY w.config ORDER BY w.idf DESC, w.word) AS place FROM (
            SELECT a.config, w.word, to_tsquery('simple', quote_literal(w.word)) AS q,
                   {idf_sql(ndoc="coalesce(s.ndoc, 0)", total="coalesce(n.total, 1)")} AS idf,
                   coalesce(s.ndoc, 0) AS ndoc, n.total
            FROM unnest(%(lex_configs)s::regconfig[], %(lex_texts)s::text[]) AS a(config, text)
            CROSS JOIN LATERAL unnest(tsvector_to_array(to_tsvector(a.config, a.text))) AS w(word)
            CROSS JOIN LATERAL (SELECT {readable_ndoc_sql(word="w.word", principals=PRINCIPALS, config="a.config")}
                                AS ndoc) s
            CROSS JOIN LATERAL (SELECT {readable_total_sql(PRINCIPALS)} AS total) n
          ) w WHERE w.ndoc <= %(max_share)s * greatest(coalesce(w.total, 1), 1)
        ) p WHERE place <= %(max_terms)s"""
    return f"""
    WITH picked AS ({picked_sql}),
    anyterm AS (
        SELECT config, to_tsquery('simple', string_agg(quote_literal(word), ' | ')) AS q FROM (
            SELECT config, word, row_number() OVER rarest AS rarity, sum(ndoc) OVER rarest AS reach FROM picked
            WINDOW rarest AS (PARTITION BY config ORDER BY idf DESC, word ROWS UNBOUNDED PRECEDING)
        ) p WHERE rarity = 1 OR reach <= %(select_rows)s GROUP BY config
    ),
    dense AS ({dense_sql}),
    lexical AS ({lexical_sql}),
    ident AS ({ident_sql}),
    multi AS ({multi_sql}),
    remembered AS ({memory_sql}),
    ranked AS (
        SELECT id, r, 'dense' AS source, %(w_dense)s::float AS w FROM dense
        UNION ALL SELECT id, r, 'lexical', %(w_lexical)s::float FROM lexical
        UNION ALL SELECT id, r, 'ident', %(w_ident)s::float FROM ident
        UNION ALL SELECT id, r, 'multilingual', %(w_multilingual)s::float FROM multi
        UNION ALL SELECT id, r, 'remembered', %(w_remembered)s::float FROM remembered
    ),
    fused AS (
        SELECT id, sum(w / (%(rrf_k)s + r)) AS rrf,
               min(r) FILTER (WHERE source = 'dense') AS dense_rank,
               min(r) FILTER (WHERE source = 'lexical') AS lexical_rank,
               min(r) FILTER (WHERE source = 'ident') AS ident_rank,
               min(r) FILTER (WHERE source = 'multilingual') AS multilingual_rank,
               min(r) FILTER (WHERE source = 'remembered') AS remembered_rank
        FROM ranked GROUP BY id
    )
    SELECT c.id AS chunk_id, c.document_id, d.title AS document_title, d.mime_type, d.embedding_model, c.ordinal,
           c.breadcrumb, c.content, c.text, c.start, c."end", c.page, c.kind, c.audience, c.part, c.parts, c.split_group,
           c.embedding <=> %(vector)s::halfvec AS distance, f.rrf, f.dense_rank, f.lexical_rank, f.ident_rank,
           f.multilingual_rank, {"c.multilingual_embedding <=> %(mvector)s::halfvec" if multi else "NULL::float"}
           AS multilingual_distance, c.language AS chunk_language,
           halfvec_send(c.embedding) AS vector, f.remembered_rank, m.distance AS remembered_distance,
           m.questions AS remembered_questions, m.question_distances AS remembered_question_distances,
           (SELECT CASE WHEN bool_or(a.action = 'hide') THEN 'hide' WHEN bool_or(a.action = 'boost') THEN 'boost' END
            FROM search_retrievaladjustment a WHERE a.revoked_at IS NULL AND a.document_id = c.document_id
                 AND (a.stable_id = '' OR a.stable_id = c.stable_id)) AS adjustment
    FROM fused f JOIN kb_chunk c ON c.id = f.id JOIN kb_document d ON d.id = c.document_id
    LEFT JOIN remembered m ON m.id = f.id
    ORDER BY f.rrf DESC, c.id
    """


def _candidate_query(*, principals: list[str], query: str, vector: np.ndarray, options: SearchOptions,
                     mvector: np.ndarray | None = None,
                     configs: Sequence[tuple[str, str]] | None = None) -> tuple[str, dict[str, Any]]:
    """The candidate SQL for this query and options, with its parameters; `configs`: lexical_configs's, where
    the caller has them."""
    idents = identifiers(query) if options.identifiers else []
    if not options.lexical:
        configs = []
    elif configs is None:
        configs = lexical_configs(query, principals)
    params: dict[str, Any] = {
        "principals": principals,
        # pgvector's text form: a float list would be written out as an array literal at each of its four places.
        "vector": "[" + ",".join(map(str, vector.tolist())) + "]",
        "n": options.candidates,
        "lex_configs": [config for config, _ in configs],
        "lex_texts": [text for _, text in configs],
        "max_share": options.lexical_max_share,
        "max_terms": options.lexical_max_terms,
        "select_rows": options.lexical_select_rows,
        "rrf_k": options.rrf_k,
        "w_dense": options.weight_dense,
        "w_lexical": options.weight_lexical,
        "w_ident": options.weight_ident,
        "w_multilingual": options.weight_multilingual,
        "w_remembered": options.weight_remembered,
        "memory_reach": options.memory_reach,
        "mvector": None if mvector is None else "[" + ",".join(map(str, mvector.tolist())) + "]",
        **{f"ident{i}": f"%{token.translate(LIKE_SPECIALS)}%" for i, token in enumerate(idents)},
        "ident_any": "|".join(REGEX_SPECIALS.sub(r"\\\g<0>", token) for token in idents),
    }
    return _candidate_sql(dense=options.dense, lexical=bool(configs), idents=len(idents),
                          multi=mvector is not None, memory=options.memory), params


def _candidates(*, principals: list[str], query: str, vector: np.ndarray, options: SearchOptions,
                mvector: np.ndarray | None = None,
                configs: Sequence[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
    """The candidate rows, each a dict keyed by the query's column names (Hit's field names where they are Hit's)."""
    sql, params = _candidate_query(principals=principals, query=query, vector=vector, options=options, mvector=mvector,
                                   configs=configs)

    def read(alias: str) -> list[dict[str, Any]]:
        if options.ef_search == settings.KB_SEARCH_EF_SEARCH:  # set per connection (settings.DATABASES)
            with connections[alias].cursor() as cursor:
                cursor.execute(sql, params)
                return _named_rows(cursor)
        with transaction.atomic(using=alias), connections[alias].cursor() as cursor:  # SET LOCAL: never leaks
            cursor.execute("SELECT set_config('hnsw.ef_search', %s, true)", [str(options.ef_search)])
            cursor.execute(sql, params)
            return _named_rows(cursor)

    return replica.on_read_alias(read)


def _named_rows(cursor: Any) -> list[dict[str, Any]]:
    names = [column.name for column in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _vector(sent: bytes | memoryview) -> np.ndarray:
    """pgvector's binary form of a halfvec (int16 dimensions, int16 unused, big-endian float2s): parsing it costs a
    fraction of parsing a real[]'s text, which was a third of the candidate query's time at 150 rows."""
    return np.frombuffer(bytes(sent), dtype=">f2", offset=4).astype(np.float32)


def _drop_duplicates(hits: list[Hit], vectors: dict[int, np.ndarray], *, duplicate: float) -> list[Hit]:
    """The hits in order, without any whose cosine similarity to a better kept hit is `duplicate` or more.

    One similarity matrix for all candidates: a Python loop over pairs cost ~60 ms at 150 candidates.
    """
    if not hits:
        return hits
    matrix = np.stack([vectors[h.chunk_id] for h in hits])
    similarity = matrix @ matrix.T
    kept: list[int] = []
    for i in range(len(hits)):
        if not kept or similarity[kept, i].max() < duplicate:
            kept.append(i)
    return [hits[i] for i in kept]


def _late_signals(query: str, pieces: np.ndarray, head: list[Hit], texts: dict[int, str],
                  words: Sequence[answerability.WordStat], *, exact: bool) -> dict[int, tuple[float, float]]:
    """Each hit's late-interaction score and weakest word match (answerability.weakest_matches), by chunk id, on
    the stored coarse word vectors or (`exact`) on the exact word pieces; the query's words weigh by their IDF over
    what the user may read (`words`, one per WORD match)."""
    spans = [m.span() for m in WORD.finditer(query)]
    chunks = [(h.chunk_id, texts[h.chunk_id]) for h in head]
    vectors = [p.vectors for p in late.exact_pieces(chunks)] if exact else late.chunk_vectors(chunks)
    weights = late.query_weights(query, spans, [w.idf for w in words])
    scores = late.scores(pieces, weights, vectors)
    weakest = answerability.weakest_matches(pieces, weights, vectors)
    return {h.chunk_id: (s, w) for h, s, w in zip(head, scores, weakest, strict=True)}


def _english_scale(hit: Hit, options: SearchOptions) -> float:
    """A passage's multilingual-space cosine distance on MiniLM's scale, so one threshold gates passages of both
    spaces; for an English question, placed `multilingual_cross` nearer (SearchOptions)."""
    distance = options.multilingual_offset + options.multilingual_scale * (hit.multilingual_distance or 0.0)
    return distance - (_cross_shift(options) if hit.cross_language else 0.0)


def _cross_shift(options: SearchOptions) -> float:
    """How much nearer the cross-language placement puts a passage, on MiniLM's scale."""
    return options.multilingual_scale * options.multilingual_cross


def _boost_vote(boosted: bool, options: SearchOptions) -> float:
    """A boosted passage (search.adjustments) counts in the fusion as if one more list ranked it first."""
    return 1 / (options.rrf_k + 1) if boosted else 0.0


LISTS_JUDGED = ("dense", "lexical", "multilingual")  # the lists a fusion may leave out (identifiers are exact)
JUDGED_TOP = 3  # a list says something when one of its first this many passages is near the nearest


def _fuse_spaces(hits: list[Hit], options: SearchOptions) -> list[Hit]:
    """The hits with each one's distance in its own space (on MiniLM's scale), re-fused without the lists that
    have nothing to say: a list none of whose first JUDGED_TOP passages is within `multilingual_margin` of the
    nearest passage of either space. MiniLM's list ranks English passages and the multilingual list the rest; on
    a question MiniLM cannot read, or about a passage in another language, MiniLM's list and the full text of the
    question's language rank noise that would drown the multilingual list in the fusion (and on an English question
    about English passages, the multilingual list's ranks are the noise)."""
    placed = [replace(h, distance=_english_scale(h, options), space="multilingual")
              if h.space == "multilingual" and h.multilingual_distance is not None else h for h in hits]
    if not placed:
        return placed
    nearest = min(h.distance for h in placed)
    weights = {"dense": options.weight_dense, "lexical": options.weight_lexical, "ident": options.weight_ident,
               "multilingual": options.weight_multilingual, "remembered": options.weight_remembered}
    for name in LISTS_JUDGED:
        best = min((h.distance for h in placed if h.ranks.get(name, JUDGED_TOP + 1) <= JUDGED_TOP), default=None)
        if best is not None and best - nearest > options.multilingual_margin:
            weights[name] = 0.0
    return [replace(h, score=sum(weights[name] / (options.rrf_k + rank) for name, rank in h.ranks.items())
                    + _boost_vote(h.boosted, options)) for h in placed]


def _late_rerank(hits: list[Hit], scored: dict[int, tuple[float, float]], *, depth: int, weight: float,
                 lexical_bonus: float, boost: float = 0.0) -> list[Hit]:
    """The top `depth` hits re-ordered among the places each space's passages hold: MiniLM's by late-interaction
    score plus cosine similarity, the multilingual space's (whose words MiniLM's pieces do not read) by cosine
    similarity plus `lexical_bonus` / sqrt(full-text rank). Rank fusion alone ignores how near a passage is: on
    lab/eval-multilingual the passage nearest the question often sat below passages only the full text ranked
    (docs/measurements/multilingual.md). A boosted passage gains `boost` in either space. The rest keep their place."""
    head, tail = hits[:depth], hits[depth:]
    head = [replace(h, late_score=scored[h.chunk_id][0]) for h in head]

    def english(h: Hit) -> float:
        return weight * (h.late_score or 0.0) + 1 - h.distance + (boost if h.boosted else 0.0)

    def other(h: Hit) -> float:
        lexical = h.ranks.get("lexical")
        return 1 - h.distance + (lexical_bonus / math.sqrt(lexical) if lexical else 0.0) + (boost if h.boosted else 0.0)

    for space, score in (("english", english), ("multilingual", other)):
        places = [i for i, h in enumerate(head) if h.space == space]
        ordered = sorted((head[i] for i in places), key=lambda h: (-score(h), h.chunk_id))
        for i, hit in zip(places, ordered, strict=True):
            head[i] = hit
    return head + tail


_HIT_COLUMNS = [f.name for f in fields(Hit) if f.name not in {
    "distance", "score", "ranks", "passed", "late_score", "rerank_score", "multilingual_distance", "space",
    "remembered_distance", "remembered", "remembered_spans", "boosted", "cross_language"}]
RANKED = ("dense", "lexical", "ident", "multilingual", "remembered")


def hybrid_search(*, user: Any, query: str, options: SearchOptions | None = None) -> SearchResult:
    """Ranked hits the user may read, each marked whether it passed the gate and the cap."""
    options = options or SearchOptions()
    timings: dict[str, float] = {}
    started = time.perf_counter()
    intent, confidence = classify_query(query)
    principals = user_principals(user)
    result = SearchResult(query, intent, confidence, options.threshold, [], None, timings)
    if not principals or not query.strip():
        return result

    readable = readable_languages(principals)
    vector, pieces = embedding.embed_query(query)
    # The multilingual space holds the chunks of some languages only (not English, by default): an asker who
    # reads none of them is spared its encoder (~50 ms a question here) and its list.
    in_space = options.multilingual and any(multilingual.embeds(code) for code in readable)
    mvector = multilingual.embed_query(query) if in_space else None
    result.vector = vector
    timings["embed"] = (time.perf_counter() - started) * 1000
    configs = lexical_configs(query, principals, readable)  # the languages the question's words are matched in
    rows = _candidates(principals=principals, query=query, vector=vector, options=options, mvector=mvector,
                       configs=configs)
    timings["sql"] = (time.perf_counter() - started) * 1000 - timings["embed"]

    model = settings.KB_EMBEDDING_MODEL
    foreign = {row["embedding_model"] for row in rows if row["embedding_model"] != model}
    if foreign:
        # Vectors from another model are not comparable with this query's: leave them out and say so.
        result.warnings.append(
            f"some documents were indexed with another embedding model ({', '.join(sorted(foreign))}); "
            "re-index them to make them searchable"
        )
    vectors: dict[int, np.ndarray] = {}
    texts: dict[int, str] = {}
    hits: list[Hit] = []
    asked_in = language.detect(query)[0]
    remembers = options.memory_distance if asked_in == "en" else options.memory_distance_other
    for row in rows:
        if row["embedding_model"] != model or row["adjustment"] == "hide":
            continue
        vectors[row["chunk_id"]] = _vector(row["vector"])
        texts[row["chunk_id"]] = row["text"]
        ranks = {k: int(row[f"{k}_rank"]) for k in RANKED if row[f"{k}_rank"]}
        other, near = row["multilingual_distance"], row["remembered_distance"]
        boosted = row["adjustment"] == "boost"
        hits.append(Hit(**{name: row[name] for name in _HIT_COLUMNS}, distance=float(row["distance"]),
                        score=float(row["rrf"]) + _boost_vote(boosted, options), ranks=ranks,
                        multilingual_distance=None if other is None else float(other),
                        space="english" if other is None or row["chunk_language"] == "en" else "multilingual",
                        cross_language=asked_in == "en" != row["chunk_language"],
                        remembered_distance=None if near is None else float(near), boosted=boosted,
                        remembered=tuple(i for i, d in zip(row["remembered_questions"] or (),
                                                           row["remembered_question_distances"] or (), strict=True)
                                         if d <= remembers)))
    if mvector is not None:
        hits = _fuse_spaces(hits, options)
    hits.sort(key=lambda h: (-h.score, h.distance, h.chunk_id))
    result.nearest_distance = min((h.distance for h in hits), default=None)
    result.space = min(hits, key=lambda h: h.distance).space if hits else "english"

    fused = hits
    hits = _drop_duplicates(hits, vectors, duplicate=options.duplicate)
    scored: dict[int, tuple[float, float]] = {}
    words = (answerability.word_statistics(WORD.findall(query), principals=principals,
                                           configs=[config for config, _ in configs]) if hits else [])
    if options.late_depth and hits:
        late_at = time.perf_counter()
        # Coarse codes order the top late_depth; the first late_exact of that order are scored again exactly.
        for depth, exact in ((options.late_depth, False), (min(options.late_exact, options.late_depth), True)):
            if depth:
                scored |= _late_signals(query, pieces, hits[:depth], texts, words, exact=exact)
                hits = _late_rerank(hits, scored, depth=depth, weight=options.late_weight,
                                    lexical_bonus=options.multilingual_lexical_bonus, boost=options.boost)
        timings["late"] = (time.perf_counter() - late_at) * 1000
    if unscored := [h for h in hits[: answerability.DEPTH] if h.chunk_id not in scored]:
        # The stage is off (or shallower than the answerability signals read): its scores of the top hits.
        scored |= _late_signals(query, pieces, unscored, texts, words, exact=False)
    hits, pinned = _remembered_first(hits, options)
    result.remembered = list(pinned.remembered) if pinned else []
    decided_at = time.perf_counter()
    answerable = _decide(result, words=words, fused=fused, hits=hits, scored=scored, options=options,
                         remembered=pinned is not None, capitals=not any(c == "german" for c, _ in configs))
    timings["answerability"] = (time.perf_counter() - decided_at) * 1000
    # Once the question is answerable, sources may be a margin farther than the threshold (or the nearest); a passage
    # a remembered question stands for is one, however far its own words are from the question's.
    # The sources are gated on the distances as measured: the cross-language placement weighs the spaces and decides
    # whether to answer, but it would let a page's other passages through with the one that answers.
    measured = {h.chunk_id: h.distance + (_cross_shift(options) if h.cross_language else 0.0) for h in hits}
    reach = max(options.threshold, min(measured.values(), default=0.0)) + options.source_margin
    gated = [h for h in hits if measured[h.chunk_id] <= reach or h is pinned] if answerable else []
    if options.rerank and gated and settings.KB_RERANKER_PATH:
        reranked_at = time.perf_counter()
        scores = rerank.scores(query, [h.content for h in gated])
        gated = sorted((replace(h, rerank_score=s) for h, s in zip(gated, scores, strict=True)),
                       key=lambda h: -(h.rerank_score or 0.0))
        timings["rerank"] = (time.perf_counter() - reranked_at) * 1000
    chosen = {h.chunk_id: _with_spans(h) if h is pinned else h for h in gated[: options.cap]}
    # Passed hits first (in generator order), then the rest in fused order, up to k.
    ordered = [replace(h, passed=True) for h in chosen.values()]
    ordered += [h for h in hits if h.chunk_id not in chosen]
    result.hits = ordered[: options.k]
    timings["total"] = (time.perf_counter() - started) * 1000
    return result


def _decide(result: SearchResult, *, words: Sequence[answerability.WordStat], fused: list[Hit], hits: list[Hit],
            scored: dict[int, tuple[float, float]], options: SearchOptions, remembered: bool = False,
            capitals: bool = True) -> bool:
    """Answer or refuse: the calibrated answerability model when one is configured, else the distance
    threshold. Records the signals (and the model's probability) on `result` for the reason and evaluation.
    Every signal is computed from chunks the user may read (`words`: counted over them), so neither the
    decision nor the confidence a refusal prints moves when restricted documents come and go. A `remembered`
    question (a judge said a passage the user may read answers one like it) is answerable, unless it names something
    no readable passage mentions (unknown_names; `capitals`: whether a capital marks a name in its language)."""
    if not hits or result.nearest_distance is None:
        return False
    unknown, content = answerability.unknown_words(words)
    top = hits[: answerability.DEPTH]
    result.signals = answerability.Signals(
        nearest=result.nearest_distance,
        gap=answerability.gap([h.distance for h in fused]),
        late_best=max((scored.get(h.chunk_id, (0.0, 0.0))[0] for h in top), default=0.0),
        weakest=max((scored.get(h.chunk_id, (0.0, 0.0))[1] for h in top), default=0.0),
        unknown_share=len([w for w in words if w.word in unknown]) / content if content else 0.0,
        agreement=answerability.agreement([h.ranks for h in fused]),
        screen=1.0 if result.intent == SCREEN else 0.0,
        unknown_words=tuple(unknown),
        multilingual_nearest=min((h.multilingual_distance for h in fused if h.multilingual_distance is not None),
                                 default=1.0),
    )
    model = answerability.configured_model() if options.answerability and result.space == "english" else None
    result.unknown_names = unknown_names(result.query, unknown) if capitals else []
    remembered = remembered and not names_missing(result.unknown_names, [hits[0].content])
    if model is None:  # the distance on MiniLM's scale, gated by its space's threshold
        result.threshold = options.multilingual_threshold if result.space == "multilingual" else options.threshold
        return remembered or result.nearest_distance <= result.threshold
    result.probability, result.cutoff = model.probability(result.signals), model.cutoff
    return remembered or result.probability >= model.cutoff


def unknown_names(query: str, unknown: Sequence[str]) -> list[str]:
    """The unknown words written as names: capitalised, and not the word that opens the question. A question like a
    remembered one that names a place, product or person no readable passage mentions ("the per diem for Madrid",
    next to a remembered "the daily allowance for Hamburg") is another question, which the documents do not answer."""
    first = next(iter(WORD.findall(query)), "")
    return [w for w in unknown if w[:1].isupper() and w != first]


def names_missing(names: Sequence[str], texts: Sequence[str]) -> list[str]:
    """The `names` (unknown_names) none of `texts` mentions: the passages that would answer, read directly, so that a
    document indexed since the word statistics were last refreshed counts."""
    folded = [" ".join(text.split()).casefold() for text in texts]
    return [name for name in names if not any(name.casefold() in text for text in folded)]


def _remembered_first(hits: list[Hit], options: SearchOptions) -> tuple[list[Hit], Hit | None]:
    """The hits with the passage of the nearest remembered question first (and that hit), when a judge's verdict
    agrees with retrieval closely enough: the passage is among the first `memory_rank` hits and at most
    `memory_margin` farther from the question than the first. Questions that differ in one detail are as near to each
    other as two phrasings of one question (docs/LEARNING.md), so a remembered question alone does not overrule the
    passages' own evidence; it settles the order among passages that evidence leaves close."""
    if not hits:
        return hits, None
    first = hits[0].distance
    eligible = [h for h in hits[: options.memory_rank] if h.remembered and h.distance - first <= options.memory_margin]
    if not eligible:
        return hits, None
    pinned = min(eligible, key=lambda h: (h.remembered_distance, h.chunk_id))
    return [pinned, *(h for h in hits if h is not pinned)], pinned


def _with_spans(hit: Hit) -> Hit:
    """The hit with the document ranges its remembered questions were remembered with (what answered them), in the
    passage as it stands."""
    spans = {pk: (low, high) for pk, low, high in RememberedQuestion.objects.filter(
        pk__in=hit.remembered, span_start__isnull=False, span_end__isnull=False).values_list(
        "pk", "span_start", "span_end") if low is not None and high is not None}
    return replace(hit, remembered_spans=tuple((hit.start + spans[i][0], hit.start + spans[i][1])
                                               for i in hit.remembered if i in spans))


REASSEMBLE_REACH = 3  # parts each side of the one that matched: a PDF without headings is one section of ~1,000


def _windows(hits: Sequence[Hit]) -> list[tuple[Hit, tuple[int, int] | None]]:
    """Each hit with the parts of its split section it brings (None: not split); a hit inside a window
    taken by a better one adds nothing, and windows of one section never overlap."""
    out: list[tuple[Hit, tuple[int, int] | None]] = []
    taken: dict[tuple[int, str], list[tuple[int, int]]] = defaultdict(list)
    for hit in hits:
        if not hit.split_group or hit.part is None:
            out.append((hit, None))
            continue
        spans = taken[(hit.document_id, hit.split_group)]
        if any(low <= hit.part <= high for low, high in spans):
            continue
        # Seven parts around the match, shifted to stay inside the section: one of up to seven comes whole.
        low = max(1, min(hit.part - REASSEMBLE_REACH, (hit.parts or hit.part) - 2 * REASSEMBLE_REACH))
        high = low + 2 * REASSEMBLE_REACH
        for other_low, other_high in spans:  # clipped at the nearest window on either side
            if other_high < hit.part:
                low = max(low, other_high + 1)
            else:
                high = min(high, other_low - 1)
        spans.append((low, high))
        out.append((hit, (low, high)))
    return out


def reassemble(hits: Sequence[Hit]) -> list[tuple[Hit, list[Chunk]]]:
    """The passed hits as sources for the generator, in order: an unsplit hit alone (it carries its
    text and locator), a split section as the part that matched with REASSEMBLE_REACH parts on each side
    (a section of up to seven parts whole), in order (one query for every section). The whole section was read before: every answer
    from a 300-page manual without headings quoted, and aligned, all of it."""
    windows = _windows(hits)
    parts: dict[tuple[int, str], list[Chunk]] = defaultdict(list)
    sections = [Q(document_id=h.document_id, split_group=h.split_group, part__range=span) for h, span in windows if span]
    if sections:
        located = Chunk.objects.filter(reduce(operator.or_, sections)).only(
            "document_id", "split_group", "part", "ordinal", "start", "end", "page", "content")  # not the vectors
        for chunk in located.order_by("ordinal"):
            parts[(chunk.document_id, chunk.split_group)].append(chunk)
    return [(h, [c for c in parts[(h.document_id, h.split_group)] if span[0] <= (c.part or 0) <= span[1]]
             if span else []) for h, span in windows]
