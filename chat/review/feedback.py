"""Reviewers' feedback on the desk: flags on an answer or one of its citations, and verdicts on its unsupported claims.

An answer withheld from the reviewer (chat.selectors.withheld_from_reviewer, their review grants counting) does not
exist for them here: it is not found, like a missing one.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from chat import remembering
from chat.models import Feedback, Message
from chat.selectors import withheld_from_reviewer
from chat.services import ChatError, NotFound


def feedback_add(*, reviewer: Any, message: Message, kind: str, citation_number: int | None = None,
                 note: str = "") -> Feedback:
    """Flag an answer, or one of its citations, as wrong source / unsupported / outdated, or confirm a citation
    (right source).

    A confirmed citation remembers the answer's question for the passage it quotes; a wrong source forgets what
    was remembered for that passage from this answer, and the remembered questions that led to the answer
    (chat.remembering). Nobody judges an answer withheld from them on the review desk (chat.selectors, their
    review grants counting): to them it does not exist.
    """
    if kind not in Feedback.Kind.values:
        raise ChatError(f"unknown feedback kind {kind!r}; one of {', '.join(Feedback.Kind.values)}")
    if withheld_from_reviewer(message, reviewer=reviewer):
        raise NotFound("no such answer")
    citation = None
    if citation_number is not None:
        citation = message.citations.filter(number=citation_number).first()
        if citation is None:
            raise ChatError(f"answer {message.pk} has no citation [{citation_number}]")
    if kind == Feedback.Kind.RIGHT_SOURCE and citation is None:
        raise ChatError("'right_source' confirms one citation: name its number (citation)")
    with transaction.atomic():
        feedback = Feedback.objects.create(message=message, citation=citation, reviewer=reviewer, kind=kind,
                                           note=note.strip())
        if kind == Feedback.Kind.RIGHT_SOURCE:
            remembering.remember_confirmed(message, citation, judge=reviewer)
        elif kind == Feedback.Kind.WRONG_SOURCE:
            remembering.forget_cited(message, citation)
    return feedback


def unsupported_claim_review(*, reviewer: Any, message_id: int, index: int, verdict: str) -> Message:
    """A reviewer confirms or dismisses the answer's unsupported claim number `index` (0-based, in text order).

    Confirming also files it as Feedback (kind unsupported, on the first source the sentence cites), so it is
    listed with the other flags; dismissing only closes it. Either can be changed later. An answer withheld
    from the reviewer, and a claim it does not have, are not found (nothing tells how many claims it has).
    """
    if verdict not in (Message.Verdict.CONFIRMED, Message.Verdict.DISMISSED):
        raise ChatError(f"verdict must be 'confirmed' or 'dismissed', not {verdict!r}")
    with transaction.atomic():
        message = Message.objects.select_for_update().filter(pk=message_id, role=Message.Role.ASSISTANT).first()
        if message is None or withheld_from_reviewer(message, reviewer=reviewer):
            raise NotFound("no such answer")
        if not 0 <= index < len(message.unsupported):
            raise NotFound("no such claim")
        claim = message.unsupported[index]
        if verdict == Message.Verdict.CONFIRMED and claim["verdict"] != Message.Verdict.CONFIRMED:
            citation = message.citations.filter(number__in=claim["numbers"]).order_by("number").first()
            Feedback.objects.create(message=message, citation=citation, reviewer=reviewer, kind=Feedback.Kind.UNSUPPORTED,
                                    note=f"Not found in the source: {claim['sentence']}")
        claim.update(verdict=verdict, reviewer=reviewer.get_username(), judged_at=timezone.now().isoformat())
        message.save(update_fields=["unsupported"])
    return message

