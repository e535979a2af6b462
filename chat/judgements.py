"""Judgements: the asker's and support reviewers' verdicts on answers, written and read.

Who may judge what follows who may read what: the asker judges their own finished answers, a reviewer
any finished answer the review desk shows them in full; an answer withheld from someone (chat.selectors)
does not exist for them, and neither does a document they may not read, named or shown.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from chat.models import Judgement, Message
from chat.review_scope import review_scope
from chat.selectors import is_reviewer, is_withheld
from chat.services import ChatError, NotFound
from kb.library.access import visible_documents
from kb.library.models import Document

# The asker's thumbs (Message.rating) are the sign of their verdict.
RATING = {Judgement.Kind.HELPFUL: 1, Judgement.Kind.WRONG: -1, Judgement.Kind.SHOULD_REFUSE: -1,
          Judgement.Kind.SHOULD_ANSWER: -1}

# The reason chips of an asker's thumbs down, as the verdict kinds that calibration (lab.verdicts), content gaps
# (chat.gaps) and the evaluation-set export already read: the four kinds themselves stay the review desk's.
REASON_KIND = {
    Judgement.Reason.OFF_TOPIC: Judgement.Kind.WRONG,
    Judgement.Reason.WRONG_OR_OUTDATED: Judgement.Kind.WRONG,
    Judgement.Reason.SHOULD_REFUSE: Judgement.Kind.SHOULD_REFUSE,
    Judgement.Reason.SHOULD_ANSWER: Judgement.Kind.SHOULD_ANSWER,
}
# Which chips an answer offers, and which a refusal: a refusal has no text to be wrong, and cannot have refused.
ANSWER_REASONS = (Judgement.Reason.OFF_TOPIC, Judgement.Reason.WRONG_OR_OUTDATED, Judgement.Reason.SHOULD_REFUSE)
REFUSAL_REASONS = (Judgement.Reason.SHOULD_ANSWER,)
COMMENT_MAX = 1000  # characters of the asker's own words with their thumbs (the Ask page's box says the same)


def feedback_kind(*, rating: int, reason: str | None, refused: bool) -> Judgement.Kind:
    """The verdict an asker's thumbs (1 up, -1 down) and reason chip stand for, on an answer or a refusal.

    Up is "helpful" (on a refusal: right not to answer); down without a reason is "wrong", as the thumbs
    always were. A reason the answer does not offer (ANSWER_REASONS, REFUSAL_REASONS) is a ChatError."""
    if rating == 1:
        if reason:
            raise ChatError("a reason goes with a thumbs down (rating -1) only")
        return Judgement.Kind.HELPFUL
    if rating != -1:
        raise ChatError("rating must be 1 (helpful) or -1 (not helpful) to give feedback")
    if not reason:
        return Judgement.Kind.WRONG
    offered = REFUSAL_REASONS if refused else ANSWER_REASONS
    if reason not in offered:
        raise ChatError(f"the reason for a thumbs down on {'a refusal' if refused else 'an answer'} is one of "
                        f"{', '.join(offered)}; not {reason!r}")
    return REASON_KIND[Judgement.Reason(reason)]


def _judged_answer(*, judge: Any, message_id: int, role: str) -> Message:
    """The finished answer `judge` may judge in `role`, locked for the write; NotFound for anything else
    (missing, a question, someone else's, unfinished, withheld from them: all look the same)."""
    answers = Message.objects.select_for_update().filter(pk=message_id, role=Message.Role.ASSISTANT,
                                                         status__in=Message.FINISHED)
    if role == Judgement.Role.ASKER:
        answers = answers.filter(conversation__owner=judge)
    elif not is_reviewer(judge):
        answers = answers.none()
    message = answers.first()
    scope = review_scope(judge) if role == Judgement.Role.REVIEWER else None  # grants count on the review desk only
    if message is None or is_withheld(message, viewer=judge, scope=scope):
        raise NotFound("no such answer")
    return message


def _named_document(judge: Any, document_id: int | None) -> Document | None:
    """The document a verdict names, if `judge` may read it; one they may not is not found, as a missing one."""
    if document_id is None:
        return None
    document = visible_documents(judge).filter(pk=document_id).first()
    if document is None:
        raise NotFound("no such document")
    return document


@transaction.atomic
def message_judge(*, judge: Any, message_id: int, role: str, kind: str, document_id: int | None = None,
                  note: str = "", reason: str = "") -> Judgement:
    """Store `judge`'s verdict on the answer (one per answer and judge: a second replaces the first).

    `document_id` names the document that answers the question, with "should have answered" only; `reason` is
    the asker's chip it came from (message_rate). The asker's verdict also sets the answer's thumbs
    (Message.rating). Nothing is stored on an error.
    """
    if kind not in Judgement.Kind.values:
        raise ChatError(f"unknown judgement {kind!r}; one of {', '.join(Judgement.Kind.values)}")
    if document_id is not None and kind != Judgement.Kind.SHOULD_ANSWER:
        raise ChatError("only a 'should_answer' judgement names a document")
    if reason and (reason not in Judgement.Reason.values or REASON_KIND[Judgement.Reason(reason)] != kind):
        raise ChatError(f"the reason {reason!r} does not go with a {kind!r} judgement")
    message = _judged_answer(judge=judge, message_id=message_id, role=role)
    if message.status == Message.Status.REFUSED and kind == Judgement.Kind.SHOULD_REFUSE:
        raise ChatError("this question was refused; judge the refusal 'helpful' (right) or 'should_answer'")
    document = _named_document(judge, document_id)
    judgement, _ = Judgement.objects.update_or_create(
        message=message, judge=judge,
        defaults={"role": role, "kind": kind, "document": document, "note": note.strip(), "reason": reason})
    if role == Judgement.Role.ASKER:
        Message.objects.filter(pk=message.pk).update(rating=RATING[Judgement.Kind(kind)])
    return judgement


@transaction.atomic
def message_unjudge(*, judge: Any, message_id: int, role: str) -> None:
    """Take `judge`'s verdict on the answer back (nothing to take back is fine); the asker's thumbs go with it."""
    message = _judged_answer(judge=judge, message_id=message_id, role=role)
    Judgement.objects.filter(message=message, judge=judge).delete()
    if role == Judgement.Role.ASKER:
        Message.objects.filter(pk=message.pk).update(rating=0)


@transaction.atomic
def message_rate(*, user: Any, message_id: int, rating: int, reason: str | None = None,
                 comment: str = "") -> Judgement | None:
    """The asker's thumbs as a verdict (feedback_kind): 1 helpful, -1 with a reason chip the kind it maps to, with
    `comment` as the note; -1 without one is "wrong", unless a negative verdict is already given, which stands as
    it is (the older thumbs API). 0 takes the verdict back. Returns the verdict stored (None: none now)."""
    if rating not in (-1, 0, 1):
        raise ChatError("rating must be 1 (helpful), -1 (not helpful) or 0 (none)")
    if rating == 0:
        if reason or comment.strip():
            raise ChatError("rating 0 takes the feedback back: send no reason or comment with it")
        message_unjudge(judge=user, message_id=message_id, role=Judgement.Role.ASKER)
        return None
    message = _judged_answer(judge=user, message_id=message_id, role=Judgement.Role.ASKER)
    if rating == -1 and not reason and not comment.strip():
        given = Judgement.objects.filter(message=message, judge=user).select_related("document").first()
        if given is not None and RATING[Judgement.Kind(given.kind)] == -1:
            return given
    kind = feedback_kind(rating=rating, reason=reason, refused=message.refused)
    return message_judge(judge=user, message_id=message_id, role=Judgement.Role.ASKER, kind=kind, note=comment,
                         reason=reason or "")


@dataclass(frozen=True)
class JudgementView:
    judgement: Judgement
    document: Document | None  # the named document, only while the reader may read it


def judgement_views(messages: Sequence[Message], *, viewer: Any, withheld: set[int],
                    everyone: bool) -> dict[int, list[JudgementView]]:
    """The verdicts on `messages` that `viewer` may see, by message: their own, or `everyone`'s (a reviewer's
    view); none on the answers in `withheld` (their notes may quote them). Two queries for any number."""
    ids = [m.pk for m in messages if m.role == Message.Role.ASSISTANT and m.pk not in withheld]
    found = Judgement.objects.filter(message_id__in=ids).select_related("judge", "document")
    if not everyone:
        found = found.filter(judge=viewer) if viewer.is_authenticated else found.none()
    judgements = list(found)
    named = {j.document_id for j in judgements if j.document_id}
    readable = set(visible_documents(viewer).filter(pk__in=named).values_list("pk", flat=True)) if named else set()
    views: dict[int, list[JudgementView]] = defaultdict(list)
    for judgement in judgements:
        views[judgement.message_id].append(
            JudgementView(judgement, judgement.document if judgement.document_id in readable else None))
    return views
