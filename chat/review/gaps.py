"""Content gaps: what people asked that the knowledge base could not answer or answered badly, by topic.

A gap is an answer that was refused, judged wrong / should have answered / should have refused by anyone, or
rated down. Their questions' stored embeddings (Message.query_vector) are clustered into topics; each topic's
centre is compared with every document's chunks, whoever may read them, so an admin can tell "the answer
exists but the askers cannot read it" from "nobody wrote it down". Who may see it: `may_view_gaps`. What a
viewer sees of a nearby document follows kb.library.access.visible_documents: the title and link of one they may
read, and of one they may not only that it exists and which groups may read it, never its title, id, folder
or text. The questions are other employees' words; the answers' texts and the judges' notes (which may quote
documents) are never shown.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

import numpy as np
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone
from pgvector.django import CosineDistance

from accounts.acl import EVERYONE, group_principal, is_active_user, user_principal
from chat.models import Judgement, Message
from chat.review.spreadsheet import csv_lines
from kb.library.access import visible_documents
from kb.library.models import EMBEDDING_DIMENSIONS, Chunk, Document
from kb.text import embedding

PERMISSION = "chat.view_contentgaps"
DAYS = 90  # the default window
MAX_QUESTIONS = 2000  # newest gaps in the window that are clustered: bounds memory (n^2 distances) and time
# Questions stored without an embedding (before chat 0007) embedded per report, newest first: ~50 a second
# on two cores, so at most a few seconds; older ones are left out and counted.
MAX_EMBEDDED = 200
MAX_TOPICS = 50  # largest topics returned; each costs one nearest-chunk query
# Average-linkage cosine distance under which two groups of questions are one topic (all-MiniLM-L6-v2:
# paraphrases of one question sit at 0.2-0.4, questions on neighbouring subjects at 0.5-0.6, unrelated at 0.8+).
TOPIC_DISTANCE = 0.5
EXAMPLES = 5
NEAREST_CHUNKS = 50  # chunks read around a topic's centre, grouped into documents
NEAREST_DOCUMENTS = 5

BARS = "▁▂▃▄▅▆▇█"
NEGATIVE = (Judgement.Kind.WRONG, Judgement.Kind.SHOULD_ANSWER, Judgement.Kind.SHOULD_REFUSE)
REASONS = ("refused", *NEGATIVE, "rated_down")
REASON_TEXT = {"refused": "refused", Judgement.Kind.WRONG: "judged wrong", Judgement.Kind.SHOULD_ANSWER: "should have answered",
               Judgement.Kind.SHOULD_REFUSE: "should have refused", "rated_down": "rated down"}


class Verdict:
    """What a topic most likely lacks, from the documents near its centre and those judges named."""

    MISSING = "missing"  # no document within the search's threshold: nobody wrote it down
    RESTRICTED = "restricted"  # only documents some askers may not read are near
    UNFOUND = "unfound"  # a document every asker may read is near or was named: retrieval or refusal missed it


VERDICT_TEXT = {
    Verdict.MISSING: "Nobody wrote it down: no document comes close",
    Verdict.RESTRICTED: "The answer may exist, in documents the askers cannot read",
    Verdict.UNFOUND: "The askers may read a document that may answer it: the search missed it",
}


def may_view_gaps(user: Any) -> bool:
    """Superusers, and staff granted chat.view_contentgaps."""
    return is_active_user(user) and (user.is_superuser or (user.is_staff and user.has_perm(PERMISSION)))


@dataclass(frozen=True)
class GapQuestion:
    answer_id: int
    text: str
    asked_at: datetime
    reasons: tuple[str, ...]

    @property
    def reasons_text(self) -> str:
        return ", ".join(REASON_TEXT[reason] for reason in self.reasons)


@dataclass(frozen=True)
class DocumentNear:
    """A document the viewer may read, near the topic or named by a judge."""

    id: int
    title: str
    link: str
    distance: float | None  # of its nearest chunk to the topic's centre; None: named, not among the nearest
    named: int  # "should have answered" verdicts naming it
    askers_may_read: int  # of the topic's askers


@dataclass(frozen=True)
class HiddenDocuments:
    """Documents the viewer may not read, near the topic or named, summed by who may read them: nothing else
    about them (title, id, folder, text) is told."""

    count: int
    groups: tuple[str, ...]  # the names of the groups that may read them
    people: int  # people granted one of them by name (not named here)
    distance: float | None  # the nearest of them, rounded to two places
    named: int
    askers_may_read: int  # of the topic's askers, those who may read one of them

    @property
    def readers(self) -> str:
        """Who may read them, in words: "engineering, hr and 1 person named"."""
        parts = [*self.groups, *([f"{self.people} {'person' if self.people == 1 else 'people'} named"]
                                 if self.people else [])]
        return "nobody" if not parts else parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"

    @property
    def summary(self) -> str:
        return f"{self.count} {'document' if self.count == 1 else 'documents'} you cannot read, readable by: {self.readers}"


@dataclass(frozen=True)
class Week:
    start: date  # a Monday
    count: int


@dataclass
class Topic:
    label: str  # the question nearest the topic's centre
    count: int
    askers: int
    reasons: dict[str, int]
    first_asked: datetime
    last_asked: datetime
    weeks: list[Week]
    examples: list[GapQuestion]
    verdict: str = Verdict.MISSING
    documents: list[DocumentNear] = field(default_factory=list)
    hidden: list[HiddenDocuments] = field(default_factory=list)

    @property
    def verdict_text(self) -> str:
        return VERDICT_TEXT[self.verdict]

    @property
    def reasons_text(self) -> str:
        return " · ".join(f"{REASON_TEXT[reason]} {n}" for reason, n in self.reasons.items())

    @property
    def sparkline(self) -> str:
        """The weeks as bars of text (no drawing needed): "▁▁▃█"."""
        top = max((week.count for week in self.weeks), default=0) or 1
        return "".join(BARS[round(week.count / top * (len(BARS) - 1))] for week in self.weeks)


@dataclass
class Gaps:
    since: datetime
    questions: int  # gaps clustered
    truncated: bool  # more than MAX_QUESTIONS in the window: the oldest were left out
    embedded: int  # questions stored without an embedding, embedded for this report
    not_embedded: int  # older ones beyond MAX_EMBEDDED, left out
    topics: list[Topic]
    more_topics: int  # smaller topics left out (MAX_TOPICS)


@dataclass(frozen=True)
class _Gap:
    answer_id: int
    text: str
    asked_at: datetime
    asker: int
    reasons: tuple[str, ...]
    named: tuple[int, ...]  # the documents "should have answered" verdicts name
    vector: Any  # the stored embedding; None for answers stored before it was (chat 0007)


def gaps(*, viewer: Any, since: datetime | None = None, now: datetime | None = None) -> Gaps:
    """The content gaps asked since `since` (default: the last DAYS days) by topic, largest first, as
    `viewer` may see them. The caller checks `may_view_gaps` first."""
    now = now or timezone.now()
    since = since or now - timedelta(days=DAYS)
    found, truncated = _gaps(since)
    legacy = [gap.answer_id for gap in found if gap.vector is None]
    left_out = set(legacy[: max(0, len(legacy) - MAX_EMBEDDED)])  # the oldest: `found` is in answer order
    found = [gap for gap in found if gap.answer_id not in left_out]
    vectors, embedded = _vectors(found)
    clusters = _clusters(vectors)
    shown = clusters[:MAX_TOPICS]
    members = [[found[i] for i in cluster] for cluster in shown]
    centres = [_centre(vectors[cluster]) for cluster in shown]
    topics = [_topic(group, vectors[cluster], centre, since=since, now=now)
              for group, cluster, centre in zip(members, shown, centres, strict=True)]
    _place(topics, centres, members, viewer=viewer)
    return Gaps(since, len(found), truncated, embedded, len(left_out), topics, len(clusters) - len(shown))


def _gaps(since: datetime) -> tuple[list[_Gap], bool]:
    """The newest MAX_QUESTIONS gaps since `since` in answer order (a fixed input order keeps the
    clustering deterministic), and whether older ones were left out."""
    negative = Judgement.objects.filter(message=OuterRef("pk"), kind__in=NEGATIVE)
    rows = list(
        Message.objects.filter(role=Message.Role.ASSISTANT, created_at__gte=since)
        .filter(Q(status=Message.Status.REFUSED) | Q(rating=-1) | Exists(negative))
        .exclude(question__text="")
        .order_by("-created_at", "-pk")
        .values_list("pk", "question__text", "created_at", "conversation__owner_id", "status", "rating",
                     "query_vector")[: MAX_QUESTIONS + 1]
    )
    truncated = len(rows) > MAX_QUESTIONS
    rows = sorted(rows[:MAX_QUESTIONS], key=lambda row: row[0])
    verdicts: dict[int, list[tuple[str, int | None]]] = defaultdict(list)
    judged = Judgement.objects.filter(message_id__in=[row[0] for row in rows], kind__in=NEGATIVE)
    for message_id, kind, document_id in judged.values_list("message_id", "kind", "document_id"):
        verdicts[message_id].append((kind, document_id))
    found = []
    for pk, text, asked_at, asker, status, rating, vector in rows:
        kinds = {kind for kind, _ in verdicts[pk]}
        reasons = [*(["refused"] if status == Message.Status.REFUSED else []), *(k for k in NEGATIVE if k in kinds),
                   *(["rated_down"] if rating == -1 and not kinds else [])]  # a rating older than verdicts
        named = tuple(sorted({document for _, document in verdicts[pk] if document is not None}))
        found.append(_Gap(pk, text, asked_at, asker, tuple(str(r) for r in reasons), named, vector))
    return found, truncated


def _vectors(found: Sequence[_Gap]) -> tuple[np.ndarray, int]:
    """The questions' embeddings as rows, and how many had none stored and were embedded now (answers
    stored before chat 0007; by the same model, so they cluster with the rest)."""
    vectors = np.zeros((len(found), EMBEDDING_DIMENSIONS), np.float32)
    for i, gap in enumerate(found):
        if gap.vector is not None:
            vectors[i] = gap.vector
    missing = [i for i, gap in enumerate(found) if gap.vector is None]
    if missing:
        vectors[missing] = embedding.embed([found[i].text for i in missing])
    return vectors, len(missing)


def _clusters(vectors: np.ndarray) -> list[np.ndarray]:
    """The rows of each topic, largest topic first (ties: the one asked first). Agglomerative clustering
    needs no number of topics, only how far apart they are, and gives the same topics for the same input."""
    if len(vectors) < 2:
        labels = np.zeros(len(vectors), dtype=int)
    else:
        # Imported here: the web process loads this module with its URLs, and scikit-learn only for a report.
        from sklearn.cluster import AgglomerativeClustering  # type: ignore[import-untyped]

        labels = AgglomerativeClustering(n_clusters=None, distance_threshold=TOPIC_DISTANCE, metric="cosine",
                                         linkage="average").fit_predict(vectors)
    clusters = [np.flatnonzero(labels == label) for label in np.unique(labels)]
    return sorted(clusters, key=lambda rows: (-len(rows), int(rows[0])))


def _centre(vectors: np.ndarray) -> np.ndarray:
    mean: np.ndarray = vectors.mean(axis=0)
    norm = float(np.linalg.norm(mean))
    return mean / norm if norm else mean


def _monday(moment: datetime) -> date:
    day = timezone.localtime(moment).date()
    return day - timedelta(days=day.weekday())


def _weeks(times: Iterable[datetime], *, since: datetime, now: datetime) -> list[Week]:
    """Questions per week (Monday to Sunday, local time) from the week of `since` to this one, none left out."""
    counts = Counter(_monday(moment) for moment in times)
    weeks, day, last = [], _monday(since), _monday(now)
    while day <= last:
        weeks.append(Week(day, counts[day]))
        day += timedelta(days=7)
    return weeks


def _topic(members: Sequence[_Gap], vectors: np.ndarray, centre: np.ndarray, *, since: datetime,
           now: datetime) -> Topic:
    reasons = Counter(reason for gap in members for reason in gap.reasons)
    examples: list[GapQuestion] = []
    seen: set[str] = set()
    for gap in sorted(members, key=lambda g: (g.asked_at, g.answer_id), reverse=True):
        key = " ".join(gap.text.lower().split())
        if key not in seen and len(examples) < EXAMPLES:
            seen.add(key)
            examples.append(GapQuestion(gap.answer_id, gap.text, gap.asked_at, gap.reasons))
    return Topic(
        label=members[int(np.argmax(vectors @ centre))].text, count=len(members),
        askers=len({gap.asker for gap in members}), reasons={r: reasons[r] for r in REASONS if reasons[r]},
        first_asked=min(gap.asked_at for gap in members), last_asked=max(gap.asked_at for gap in members),
        weeks=_weeks((gap.asked_at for gap in members), since=since, now=now), examples=examples)


def _nearest_documents(centre: np.ndarray) -> dict[int, float]:
    """The NEAREST_DOCUMENTS documents whose chunks come nearest `centre`, whoever may read them, nearest
    first, with their nearest chunk's cosine distance (the HNSW index; vectors of another model left out)."""
    rows = (Chunk.objects.filter(document__embedding_model=settings.KB_EMBEDDING_MODEL)
            .annotate(distance=CosineDistance("embedding", centre)).order_by("distance")
            .values_list("document_id", "distance")[:NEAREST_CHUNKS])
    nearest: dict[int, float] = {}
    for document_id, distance in rows:
        nearest.setdefault(document_id, float(distance))
    return dict(list(nearest.items())[:NEAREST_DOCUMENTS])


def _asker_principals(user_ids: set[int]) -> dict[int, set[str]]:
    """What each asker is to the sharing rule (accounts.acl.user_principals, for many people in one query)."""
    principals = {pk: {EVERYONE, user_principal(pk)} for pk in user_ids}
    memberships = get_user_model().groups.through.objects.filter(user_id__in=user_ids)
    for user_id, group_id in memberships.values_list("user_id", "group_id"):
        principals[user_id].add(group_principal(group_id))
    return principals


def _place(topics: Sequence[Topic], centres: Sequence[np.ndarray], members: Sequence[Sequence[_Gap]], *,
           viewer: Any) -> None:
    """Each topic's nearest and named documents as `viewer` may see them, and its verdict."""
    nearest = [_nearest_documents(centre) for centre in centres]
    named = [Counter(document for gap in group for document in gap.named) for group in members]
    ids = {pk for near in nearest for pk in near} | {pk for counts in named for pk in counts}
    documents = dict(Document.objects.filter(pk__in=ids).values_list("pk", "acl"))
    readable = set(visible_documents(viewer).filter(pk__in=ids).values_list("pk", flat=True))
    titles = {d.pk: str(d) for d in Document.objects.filter(pk__in=readable).only("pk", "title", "filename")}
    askers = _asker_principals({gap.asker for group in members for gap in group})
    principals = {p for pk in ids - readable for p in documents.get(pk, [])}
    groups = {group_principal(pk): name for pk, name in Group.objects.values_list("pk", "name")
              if group_principal(pk) in principals}
    for topic, near, counts, group in zip(topics, nearest, named, members, strict=True):
        asking = {gap.asker for gap in group}
        hidden: dict[tuple[str, ...], list[int]] = defaultdict(list)
        may_read: dict[int, set[int]] = {}
        for pk in [*near, *(pk for pk in sorted(counts) if pk not in near)]:
            if pk not in documents:  # deleted since it was named
                continue
            acl = set(documents[pk])
            may_read[pk] = {asker for asker in asking if acl & askers[asker]}
            if pk in readable:
                topic.documents.append(DocumentNear(pk, titles[pk], f"/documents/{pk}/", _rounded(near.get(pk), 3),
                                                    counts[pk], len(may_read[pk])))
            else:
                hidden[tuple(sorted({groups[p] for p in acl if p in groups}))].append(pk)
        for names, pks in hidden.items():
            people = {p for pk in pks for p in documents[pk] if p != EVERYONE and p not in groups}
            distances = [near[pk] for pk in pks if pk in near]
            topic.hidden.append(HiddenDocuments(
                len(pks), names, len(people), _rounded(min(distances), 2) if distances else None,
                sum(counts[pk] for pk in pks), len(set().union(*(may_read[pk] for pk in pks)))))
        close = [pk for pk in may_read if near.get(pk, 1.0) <= settings.KB_SEARCH_THRESHOLD or counts[pk]]
        if not close:
            topic.verdict = Verdict.MISSING
        elif all(any(asker in may_read[pk] for pk in close) for asker in asking):
            topic.verdict = Verdict.UNFOUND
        else:
            topic.verdict = Verdict.RESTRICTED


def _rounded(value: float | None, places: int) -> float | None:
    return None if value is None else round(value, places)


CSV_COLUMNS = ("topic", "verdict", "questions", "askers", *REASONS, "first_asked", "last_asked", "weeks", "examples",
               "documents", "hidden")


def gaps_rows(report: Gaps) -> list[list[str]]:
    """The report as CSV rows, one a topic, with the same content as the API (chat.review.gaps_api); the header first."""
    rows = [list(CSV_COLUMNS)]
    for topic in report.topics:
        rows.append([
            topic.label, topic.verdict, str(topic.count), str(topic.askers),
            *(str(topic.reasons.get(reason, 0)) for reason in REASONS),
            topic.first_asked.isoformat(), topic.last_asked.isoformat(),
            " ".join(f"{week.start.isoformat()}:{week.count}" for week in topic.weeks),
            " | ".join(example.text for example in topic.examples),
            " | ".join(f"{d.title} ({d.link})" for d in topic.documents),
            " | ".join(hidden.summary for hidden in topic.hidden),
        ])
    return rows


def gaps_csv(report: Gaps) -> str:
    return "".join(csv_lines(gaps_rows(report)))
