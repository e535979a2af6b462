"""Remembered questions: verdicts that teach retrieval (docs/LEARNING.md).

A question a judge marked answered well (helpful, a confirmed citation, or "should have answered" with the passage
picked) is remembered for its passage. Retrieval searches the remembered questions as one more candidate list
(search.retrieval), joined to the passage under the asker's principals in the same SQL as every other list: it only
ever helps someone who may read the passage. A remembered question is keyed by its passage's stable id, which
changes with the passage's text, so an edited passage forgets its questions (forget_changed removes the rows); the
verdict it came from being taken back or contradicted forgets it too (chat.review.judgements calls forget).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q

from kb.library.models import Chunk
from kb.text import embedding
from search.models import RememberedQuestion


def passage_at(document_id: int, start: int, end: int) -> Chunk | None:
    """The passage of the document's current version that holds most of the range [start, end) a judge picked
    (the first of equals); None when the range lies in none. Split sections' parts overlap: the part that holds
    more of the pick wins."""
    if end <= start:
        return None
    overlapping = list(Chunk.objects.filter(document_id=document_id, start__lt=end, end__gt=start)
                       .only("pk", "document_id", "stable_id", "start", "end", "ordinal").order_by("ordinal"))
    if not overlapping:
        return None
    return max(overlapping, key=lambda c: (min(c.end, end) - max(c.start, start), -c.ordinal))


def remember(*, document_id: int, stable_id: str, question: str, kind: str, message_id: int, judge: Any,
             judgement_id: int | None = None, span: tuple[int, int] | None = None) -> RememberedQuestion | None:
    """Remember `question` for the passage (document, stable id), with `span` (the document's offsets of what
    answers, clipped to the passage); one row per answer and passage, a second verdict replaces the first.
    None when the passage is gone (it changed since the answer) or the question is empty. The judge's share is
    capped afterwards (_make_room)."""
    text = " ".join(question.split())
    passage = Chunk.objects.filter(document_id=document_id, stable_id=stable_id).only("start", "end").first()
    if passage is None or not text:
        return None
    relative = None
    if span is not None:
        low, high = max(span[0], passage.start), min(span[1], passage.end)
        relative = (low - passage.start, high - passage.start) if high > low else None
    vector, _ = embedding.embed_query(text)
    with transaction.atomic():
        row, _ = RememberedQuestion.objects.update_or_create(
            message_id=message_id, document_id=document_id, stable_id=stable_id,
            defaults={"question": text[:2000], "embedding": vector, "kind": kind, "judgement_id": judgement_id,
                      "judge": judge if getattr(judge, "pk", None) else None,
                      "span_start": relative[0] if relative else None,
                      "span_end": relative[1] if relative else None})
        if row.judge_id is not None:
            _make_room(row.judge_id)
    return RememberedQuestion.objects.filter(pk=row.pk).first()


def _make_room(judge_id: int) -> None:
    """No judge holds more than KB_VERDICT_MAX_JUDGE_SHARE of the remembered questions once there are more than
    KB_MEMORY_JUDGE_FLOOR of theirs: their oldest go first."""
    total = RememberedQuestion.objects.count()
    allowed = max(settings.KB_MEMORY_JUDGE_FLOOR, int(settings.KB_VERDICT_MAX_JUDGE_SHARE * total))
    theirs = RememberedQuestion.objects.filter(judge_id=judge_id).order_by("-created_at", "-pk")
    over = list(theirs.values_list("pk", flat=True)[allowed:])
    if over:
        RememberedQuestion.objects.filter(pk__in=over).delete()


def forget(*, message_id: int | None = None, judgement_id: int | None = None, ids: Sequence[int] = (),
           passage: tuple[int, str] | None = None) -> int:
    """Forget what a verdict taught: the questions remembered from an answer (`message_id`, optionally only for one
    `passage` (document id, stable id)), from a judgement, or by id (a later verdict contradicted them)."""
    condition = Q(pk__in=list(ids)) if ids else Q()
    if message_id is not None:
        condition = Q(message_id=message_id)
        if passage is not None:
            condition &= Q(document_id=passage[0], stable_id=passage[1])
    if judgement_id is not None:
        condition |= Q(judgement_id=judgement_id)
    if not condition:
        return 0
    deleted, _ = RememberedQuestion.objects.filter(condition).delete()
    return deleted


def forget_changed(document_ids: Iterable[int]) -> int:
    """After re-indexing: the questions whose passage is no longer in its document (its text changed, or it went)."""
    ids = list(document_ids)
    if not ids:
        return 0
    present = Chunk.objects.filter(document_id=OuterRef("document_id"), stable_id=OuterRef("stable_id"))
    deleted, _ = RememberedQuestion.objects.filter(document_id__in=ids).exclude(Exists(present)).delete()
    return deleted


def on_document_indexed(sender: object, *, document_ids: Sequence[int], **kwargs: object) -> None:
    """kb.library.events.document_indexed: the documents' new versions forget the questions of changed passages."""
    forget_changed(document_ids)
