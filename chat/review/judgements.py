"""Judgements: the asker's and support reviewers' verdicts on answers, written and read.

Who may judge what follows who may read what: the asker judges their own finished answers, a reviewer
any finished answer the review desk shows them in full; an answer withheld from someone (chat.selectors)
does not exist for them, and neither does a document they may not read, named or shown.

Verdicts teach retrieval (chat.remembering, search.memory): "helpful" on an answer remembers its question for the
passage it cites first; "should have answered" (or "wrong") with the passage picked in the viewer remembers it for
that passage; any other verdict against an answer forgets the remembered questions that led to it, and a verdict
changed or taken back forgets what it taught.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from chat import remembering
from chat.models import Judgement, Message
from chat.review.scope import review_scope
from chat.selectors import is_reviewer, is_withheld
from chat.services import ChatError, NotFound
from kb.library.access import visible_documents
from kb.library.models import Document
from search import memory
from search.models import RememberedQuestion

# The asker's thumbs (Message.rating) are the sign of their verdict.
RATING = {Judgement.Kind.HELPFUL: 1, Judgement.Kind.WRONG: -1, Judgement.Kind.SHOULD_REFUSE: -1,
          Judgement.Kind.SHOULD_ANSWER: -1}

# The reason chips of an asker's thumbs down, as the verdict kinds that calibration (lab.verdicts), content gaps
# (chat.review.gaps) and the evaluation-set export already read: the four kinds themselves stay the review desk's.
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


def _judged_answer(*, judge: Any, message_id: int, role: str, lock: bool = True) -> Message:
    """The finished answer `judge` may judge in `role`, locked for the write (`lock`); NotFound for anything else
    (missing, a question, someone else's, unfinished, withheld from them: all look the same)."""
    answers = (Message.objects.select_for_update() if lock else Message.objects.all()).filter(
        pk=message_id, role=Message.Role.ASSISTANT, status__in=Message.FINISHED)
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


# The verdicts that may name the document (and pick the passage) that answers the question.
NAMING = (Judgement.Kind.SHOULD_ANSWER, Judgement.Kind.WRONG)


def _picked_passage(document: Document | None, start: int | None, end: int | None) -> str:
    """The stable id of the passage of `document`'s current version that holds the range a judge picked in the
    viewer ("" when none was picked); a ChatError says what is wrong with a pick."""
    if start is None and end is None:
        return ""
    if start is None or end is None:
        raise ChatError("a picked passage needs both start and end (offsets into the document's text)")
    if document is None:
        raise ChatError("a picked passage (start, end) goes with the document it is in")
    length = len(document.canonical_text or "")
    if not 0 <= start < end <= length:
        raise ChatError(f"the picked range {start}-{end} is not inside the document's text (0-{length}); "
                        "pick it again in the viewer")
    passage = memory.passage_at(document.pk, start, end)
    if passage is None:
        raise ChatError("the picked range lies in no passage of the document as it is now; reload the document "
                        "and pick it again")
    return passage.stable_id


def _teach(message: Message, judgement: Judgement, *, judge: Any) -> None:
    """What the verdict teaches retrieval: a negative one forgets the remembered questions that led to the answer;
    "helpful" on an answer remembers its question for the passage it cites first; a picked passage remembers it
    for that passage."""
    kind = judgement.kind
    if kind != Judgement.Kind.HELPFUL:
        remembering.forget_contradicted(message)
    if kind == Judgement.Kind.HELPFUL and message.status == Message.Status.DONE:
        remembering.remember_cited(message, remembering.first_citation(message), kind=RememberedQuestion.Kind.HELPFUL,
                                   judge=judge, judgement_id=judgement.pk)
    if judgement.passage and judgement.document_id is not None and judgement.start is not None \
            and judgement.end is not None:
        memory.remember(document_id=judgement.document_id, stable_id=judgement.passage,
                        question=remembering.question_of(message), kind=RememberedQuestion.Kind.LINKED,
                        message_id=message.pk, judge=judge, judgement_id=judgement.pk,
                        span=(judgement.start, judgement.end))


@transaction.atomic
def message_judge(*, judge: Any, message_id: int, role: str, kind: str, document_id: int | None = None,
                  note: str = "", reason: str = "", start: int | None = None, end: int | None = None) -> Judgement:
    """Store `judge`'s verdict on the answer (one per answer and judge: a second replaces the first).

    `document_id` names the document that answers the question, with "should have answered" or "wrong" only, and
    `start`, `end` the range of it the judge picked in the viewer (offsets into its text: it must lie in a passage
    of its current version); `reason` is the asker's chip it came from (message_rate). The asker's verdict also
    sets the answer's thumbs (Message.rating). The same verdict given again with no words of its own (the passage
    named later) keeps the earlier note and reason. What the verdict teaches retrieval: _teach. Nothing is stored on
    an error.
    """
    if kind not in Judgement.Kind.values:
        raise ChatError(f"unknown judgement {kind!r}; one of {', '.join(Judgement.Kind.values)}")
    if document_id is not None and kind not in NAMING:
        raise ChatError("only a 'should_answer' or 'wrong' judgement names a document")
    if reason and (reason not in Judgement.Reason.values or REASON_KIND[Judgement.Reason(reason)] != kind):
        raise ChatError(f"the reason {reason!r} does not go with a {kind!r} judgement")
    message = _judged_answer(judge=judge, message_id=message_id, role=role)
    if message.status == Message.Status.REFUSED and kind == Judgement.Kind.SHOULD_REFUSE:
        raise ChatError("this question was refused; judge the refusal 'helpful' (right) or 'should_answer'")
    if (start is not None or end is not None) and document_id is None:
        raise ChatError("a picked passage (start, end) goes with the document it is in")
    document = _named_document(judge, document_id)
    passage = _picked_passage(document, start, end)
    given = Judgement.objects.filter(message=message, judge=judge).first()
    if given is not None:
        memory.forget(judgement_id=given.pk)  # what the verdict it replaces taught
        if given.kind == kind and not note.strip() and not reason:
            note, reason = given.note, given.reason  # naming the passage later keeps what the judge said with it
    judgement, _ = Judgement.objects.update_or_create(
        message=message, judge=judge,
        defaults={"role": role, "kind": kind, "document": document, "note": note.strip(), "reason": reason,
                  "passage": passage, "start": start if passage else None, "end": end if passage else None})
    if role == Judgement.Role.ASKER:
        Message.objects.filter(pk=message.pk).update(rating=RATING[Judgement.Kind(kind)])
    _teach(message, judgement, judge=judge)
    return judgement


@transaction.atomic
def message_unjudge(*, judge: Any, message_id: int, role: str) -> None:
    """Take `judge`'s verdict on the answer back (nothing to take back is fine); the asker's thumbs go with it, and
    so does what it taught retrieval."""
    message = _judged_answer(judge=judge, message_id=message_id, role=role)
    for pk in Judgement.objects.filter(message=message, judge=judge).values_list("pk", flat=True):
        memory.forget(judgement_id=pk)
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
class PickTarget:
    """What the viewer's pick mode shows while a judge picks the passage that answers a question."""

    question: str
    refused: bool
    conversation_id: int


def pick_target(*, judge: Any, message_id: int, role: str) -> PickTarget:
    """The answer `judge` is picking a passage for, in `role`: only one they may judge (NotFound otherwise)."""
    message = _judged_answer(judge=judge, message_id=message_id, role=role, lock=False)
    return PickTarget(remembering.question_of(message), message.refused, message.conversation_id)


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
