"""Answerability: may this question be answered from the passages retrieval found?

One cosine-distance threshold cannot tell "on the corpus's topic" from "answered by the
corpus": a question about backing up Trac sits as close to Trac's manual as one the manual
answers. So the answer/refuse decision combines the signals retrieval already computes for
every query (`Signals`) in a logistic regression (`Model`) whose coefficients live in
settings (`KB_ANSWERABILITY`, or a JSON file `manage.py calibrate` writes). This module
only loads the model and decides; fitting it is the lab's (lab.calibration).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from kb.library.access import staff_may
from kb.text import language
from search.models import AnswerabilityModel
from search.stats import idf_sql, readable_languages, readable_ndoc_sql, readable_total_sql

# Signals the model may use; a model names the subset it was fitted on.
SIGNALS = ("nearest", "gap", "late_best", "weakest", "unknown_share", "agreement", "screen", "multilingual_nearest")
DEPTH = 5  # passages whose word matches count: the ones a reader would be shown
GAP_RANK = 10  # the gap is measured to this dense neighbour


class AnswerabilityError(ValueError):
    """A model or calibration set that cannot be used; the message says what is wrong."""


@dataclass(frozen=True)
class Signals:
    """What retrieval saw for one query; every field is a number the model can weigh.

    nearest: cosine distance of the closest readable passage. gap: how much farther the
    `GAP_RANK`th dense neighbour is (a question that one passage answers stands out from
    its topic's other passages). late_best: best late-interaction score of the top passages.
    weakest: over the top `DEPTH` passages, the best "weakest word" — for each passage the
    lowest match of any content word piece of the question (a passage that leaves one
    rare word unmatched does not answer it). unknown_share: share of the question's content
    words no passage the asker may read uses (word_statistics). agreement: share of the dense
    top 10 that the lexical list also ranks in its top 10. screen: 1 for a where/which-field question.
    multilingual_nearest: cosine distance of the closest readable passage in the multilingual space
    (kb.text.multilingual; 1.0 when the space is off), where a question and its answer in two
    languages, or in one MiniLM was not trained on, still meet.
    """

    nearest: float
    gap: float
    late_best: float
    weakest: float
    unknown_share: float
    agreement: float
    screen: float
    unknown_words: tuple[str, ...] = ()
    multilingual_nearest: float = 1.0

    def vector(self, names: Sequence[str]) -> np.ndarray:
        return np.array([float(getattr(self, name)) for name in names])

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["unknown_words"] = list(self.unknown_words)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Signals:
        # Only known signals: files saved while retrieval also recorded a "relevance" signal still read.
        known = {f.name for f in fields(cls)} - {"unknown_words"}
        return cls(**{k: v for k, v in data.items() if k in known}, unknown_words=tuple(data.get("unknown_words", ())))


@dataclass(frozen=True)
class Model:
    """A fitted logistic regression over standardised signals: answer when p ≥ cutoff."""

    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coefficients: tuple[float, ...]
    bias: float
    cutoff: float

    def probability(self, signals: Signals) -> float:
        return float(sigmoid(self._logits(signals.vector(self.features)[None, :]))[0])

    def probabilities(self, matrix: np.ndarray) -> np.ndarray:
        return sigmoid(self._logits(matrix))

    def _logits(self, matrix: np.ndarray) -> np.ndarray:
        z = (matrix - np.array(self.mean)) / np.array(self.scale)
        return np.asarray(z @ np.array(self.coefficients) + self.bias)

    def as_json(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


def sigmoid(z: np.ndarray) -> np.ndarray:
    """The logistic function, clipped so that no logit overflows (the model's and its fitting's)."""
    return np.asarray(1.0 / (1.0 + np.exp(-np.clip(z, -30, 30))))


def model_from_json(data: Mapping[str, Any]) -> Model:
    """A Model from settings or a calibrate file; AnswerabilityError names what is wrong."""
    try:
        features = tuple(str(f) for f in data["features"])
        model = Model(features, tuple(map(float, data["mean"])), tuple(map(float, data["scale"])),
                      tuple(map(float, data["coefficients"])), float(data["bias"]), float(data["cutoff"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise AnswerabilityError(f"an answerability model needs features, mean, scale, coefficients, bias and "
                                 f"cutoff ({exc!r})") from None
    unknown = sorted(set(features) - set(SIGNALS))
    if unknown:
        raise AnswerabilityError(f"unknown answerability signals {unknown}; known: {', '.join(SIGNALS)}")
    if not (len(features) == len(model.mean) == len(model.scale) == len(model.coefficients)):
        raise AnswerabilityError("features, mean, scale and coefficients must have the same length")
    if any(s <= 0 for s in model.scale) or not 0 < model.cutoff < 1:
        raise AnswerabilityError("every scale must be positive and the cutoff between 0 and 1")
    return model


def settings_model() -> Model | None:
    """The settings' model, or None when KB_ANSWERABILITY is empty (then the distance threshold decides)."""
    data = settings.KB_ANSWERABILITY
    return model_from_json(data) if data else None


_stored: dict[int, Model] = {}  # a stored model's JSON never changes: parsed once per process


def configured_model() -> Model | None:
    """The model that decides now: the accepted, active one of this deployment, else the settings'.
    Read on every search, so an accept or a revert in any process decides the next question in every web
    and worker process: one query on the partial unique index (its id only, without the ORM: ~0.5 ms;
    the ORM's compiling tripled it), the stored JSON read once per process."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM search_answerabilitymodel WHERE active")
        row = cursor.fetchone()
    if row is None:
        return settings_model()
    pk = int(row[0])
    if pk not in _stored:
        _stored[pk] = model_from_json(AnswerabilityModel.objects.values_list("model", flat=True).get(pk=pk))
    return _stored[pk]


# Stored models: proposed by a refit, accepted or reverted by an admin ------------------------

ACCEPT_PERMISSION = "search.accept_answerabilitymodel"


def may_accept(user: Any) -> bool:
    """Who may refit, make a model serve or take it back: superusers, and active staff holding the permission."""
    return staff_may(user, ACCEPT_PERMISSION)


def model_propose(*, model: Mapping[str, Any], fitted_on: Mapping[str, Any], candidates: Sequence[Mapping[str, Any]],
                  user: Any = None) -> AnswerabilityModel:
    """Store a refit as a proposal: it decides nothing until accepted. The model is checked here, so a stored
    one never fails a search."""
    model_from_json(model)
    return AnswerabilityModel.objects.create(model=dict(model), fitted_on=dict(fitted_on), candidates=list(candidates),
                                             created_by=user if user is not None and user.is_authenticated else None)


# Advisory lock key held by every accept and revert for its transaction.
SWITCH_LOCK = 27_0002


def _switching() -> None:
    """One accept or revert at a time: two racing would each find the same (or no) active model and the
    second would break the one-active index (a server error) or lose the first's `previous`."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [SWITCH_LOCK])


@transaction.atomic
def model_accept(*, pk: int, user: Any) -> AnswerabilityModel:
    """Make model `pk` the one that decides; the one it replaces (or the settings') is what a revert restores."""
    if not may_accept(user):
        raise AnswerabilityError("you may not accept answerability models")
    _switching()
    chosen = AnswerabilityModel.objects.select_for_update().filter(pk=pk).first()
    if chosen is None:
        raise AnswerabilityError("no such answerability model")
    if chosen.active:
        return chosen
    current = AnswerabilityModel.objects.select_for_update().filter(active=True).first()
    if current is not None:
        current.active = False
        current.save(update_fields=["active"])
    chosen.active, chosen.previous = True, current
    chosen.accepted_at, chosen.accepted_by, chosen.reverted_at, chosen.reverted_by = timezone.now(), user, None, None
    chosen.save(update_fields=["active", "previous", "accepted_at", "accepted_by", "reverted_at", "reverted_by"])
    return chosen


@transaction.atomic
def model_revert(*, user: Any) -> AnswerabilityModel | None:
    """Take the active model back: what served before it decides again. Returns the model now active (None:
    the settings'). Nothing active: nothing to revert."""
    if not may_accept(user):
        raise AnswerabilityError("you may not revert answerability models")
    _switching()
    current = AnswerabilityModel.objects.select_for_update().filter(active=True).first()
    if current is None:
        raise AnswerabilityError("no accepted model is active: the settings' model decides already")
    current.active, current.reverted_at, current.reverted_by = False, timezone.now(), user
    current.save(update_fields=["active", "reverted_at", "reverted_by"])
    previous = current.previous
    if previous is not None:
        previous.active = True
        previous.save(update_fields=["active"])
    return previous


Refitter = Callable[..., AnswerabilityModel]
_refit: list[Refitter] = []


def refit_register(refit: Refitter) -> None:
    """The lab registers its refit from verdicts here (search never imports the lab): the admin's
    "refit from verdicts" calls it as `refit(user=..., leave_out=...)` and gets a proposal back."""
    _refit[:] = [refit]


def refit_from_verdicts(*, user: Any, leave_out: Sequence[str] = ()) -> AnswerabilityModel:
    """A proposal refitted from this deployment's verdicts, less those of the judges (usernames) in `leave_out`,
    by the registered refit."""
    if not may_accept(user):
        raise AnswerabilityError("you may not refit answerability models")
    if not _refit:
        raise AnswerabilityError("no refit is installed (the lab app is not)")
    return _refit[0](user=user, leave_out=tuple(leave_out))


# Signals ------------------------------------------------------------------------------


_READABLE = "%(principals)s::varchar[]"
# Per word and configuration first: a word is a stop word if any configuration it is read with drops it
# (a German question's "die" is no English content word), and known if any finds it.
_WORD_STATISTICS_SQL = f"""
    SELECT i, min(lexemes), max(ndoc), max(idf) FROM (
        SELECT q.i, q.config, count(l.lexeme) AS lexemes, coalesce(max(s.ndoc), 0) AS ndoc,
               coalesce(max({idf_sql(ndoc="coalesce(s.ndoc, 0)", total="n.total")})
                        FILTER (WHERE l.lexeme IS NOT NULL), 0) AS idf
        FROM unnest(%(i)s::int[], %(configs)s::regconfig[], %(words)s::text[]) AS q(i, config, word)
        LEFT JOIN LATERAL unnest(tsvector_to_array(to_tsvector(q.config, q.word))) AS l(lexeme) ON true
        LEFT JOIN LATERAL (SELECT {readable_ndoc_sql(word="l.lexeme", principals=_READABLE, config="q.config")}
                           AS ndoc) s ON true
        CROSS JOIN LATERAL (SELECT greatest(coalesce({readable_total_sql(_READABLE)}, 1), 1) AS total) n
        GROUP BY q.i, q.config
    ) per GROUP BY i
"""  # noqa: S608 (SQL expressions only: the words and principals are parameters)


@dataclass(frozen=True)
class WordStat:
    """One word of a question, counted over the chunks the asker may read (search.stats): how many lexemes it
    has (0: a stop word or punctuation), in how many of those chunks its most common lexeme occurs (0: none
    uses it), and its rarest lexeme's IDF there (0 for a stop word: late interaction's weight, search.late)."""

    word: str
    lexemes: int
    ndoc: int
    idf: float


def word_statistics(words: Sequence[str], *, principals: Sequence[str],
                    configs: Sequence[str] | None = None) -> list[WordStat]:
    """Each word's statistics over the chunks `principals` may read, in one query: a restricted document that
    uses a word moves nothing an outsider's search computes or shows (docs/SECURITY.md, "Refusal signals").

    Each word is read with the text search configurations of the languages the question is matched in
    (`configs`: search.retrieval.lexical_configs's; by default those the words themselves are detected in),
    and counted among those configurations' chunks. With none (a question in a language no readable chunk
    is in) no word has statistics: its words say nothing about what the chunks hold."""
    if not words:
        return []
    if configs is None:
        configs = [c for c, _ in language.question_configs(" ".join(words), readable_languages(list(principals)))]
    rows = [(i, config, language.analysed(word, config)) for i, word in enumerate(words, 1) for config in configs]
    found: dict[int, tuple[int, int, float]] = {}
    if rows:
        with connection.cursor() as cursor:
            cursor.execute(_WORD_STATISTICS_SQL, {"i": [r[0] for r in rows], "configs": [r[1] for r in rows],
                                                  "words": [r[2] for r in rows], "principals": list(principals)})
            found = {int(i): (int(n), int(nd), float(idf)) for i, n, nd, idf in cursor.fetchall()}
    return [WordStat(word, *found.get(i, (0, 0, 0.0))) for i, word in enumerate(words, 1)]


def unknown_words(stats: Sequence[WordStat]) -> tuple[list[str], int]:
    """The content words no passage the asker may read uses (each once, in order), and how many content words
    there are."""
    unknown = [s.word for s in stats if s.lexemes and not s.ndoc]
    return list(dict.fromkeys(unknown)), sum(1 for s in stats if s.lexemes)


def weakest_matches(query_vectors: np.ndarray, weights: np.ndarray, chunks: Sequence[np.ndarray]) -> list[float]:
    """Per chunk, the lowest best-match cosine of any weighted (content) query piece; 0 when none is weighted."""
    weights = weights[: len(query_vectors)]
    content = query_vectors[: len(weights)][weights > 0]
    if not len(content):
        return [0.0] * len(chunks)
    return [float((content @ vectors.T).max(axis=1).min()) if len(vectors) else 0.0 for vectors in chunks]


def agreement(ranks: Sequence[Mapping[str, int]], *, depth: int = 10) -> float:
    """Share of the dense top `depth` that the lexical list also ranks in its top `depth`."""
    dense = sum(1 for r in ranks if r.get("dense", depth + 1) <= depth)
    both = sum(1 for r in ranks if r.get("dense", depth + 1) <= depth and r.get("lexical", depth + 1) <= depth)
    return both / dense if dense else 0.0


def gap(distances: Sequence[float], *, rank: int = GAP_RANK) -> float:
    """Distance from the nearest to the `rank`th nearest (to the farthest when there are fewer)."""
    ordered = sorted(distances)
    return ordered[min(rank, len(ordered)) - 1] - ordered[0] if ordered else 0.0


# Decision and reason -------------------------------------------------------------------


def refusal_reason(signals: Signals | None, *, probability: float | None, cutoff: float | None,
                   threshold: float) -> str:
    """Why a question was refused, in words a person can act on."""
    if signals is None:
        return "NO ANSWER: no passage you may read matches the question"
    parts = []
    if probability is not None and cutoff is not None:
        parts.append(f"the documents you can read do not seem to answer this (confidence {probability:.2f}, "
                     f"{cutoff:.2f} needed)")
    if probability is None or signals.nearest > threshold:
        parts.append(f"the nearest passage is at cosine distance {signals.nearest:.3f}, above the threshold "
                     f"{threshold:.3f}")
    # Nothing here names a passage or says which words the index holds: the reason is stored with the
    # answer, which reviewers with other access read. Every figure in it comes from chunks the asker may read.
    parts.append("ask with the words your documents use, or ask someone who can read more of them")
    return "NO ANSWER: " + "; ".join(parts)
