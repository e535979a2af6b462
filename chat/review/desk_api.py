"""/api/review/: the review desk's operations, for support reviewers (chat.selectors.is_reviewer); for anyone else
they do not exist (404, as support's pages). An answer comes as the Ask API shows it (chat.api's schemas) with what
the desk adds: its owner and question, flags, everyone's verdicts, the grants it is shown through (each such read
is in the access log, chat.review.scope).

Mounted with `api.add_router("/", "chat.review.desk_api.router")` in kb/api.py.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from django.utils.translation import gettext
from ninja import Query, Router, Schema, Status
from ninja.errors import HttpError
from pydantic import Field

from accounts.auth import api_auth
from accounts.models import Scope
from chat import selectors
from chat.api import (
    ConversationOut,
    JudgementIn,
    JudgementOut,
    MessageOut,
    MessagesPage,
    PickOut,
    UnsupportedClaimOut,
    conversation_out,
    judge_as,
    judgements_out,
    message_out,
    pick_as,
)
from chat.models import Conversation, Judgement, Message, ReviewAccess
from chat.review import desk, feedback, judgements
from chat.review.desk import FeedbackView, ReviewView
from kb.schemas import BODY, NO_NUL, NOT_FOUND, PARAMS, TypedIn

router = Router(tags=["review"], auth=api_auth(Scope.ASK))

PREVIEW_CHARS = 300  # of a quote in a list; answers get four times as much


class FeedbackIn(TypedIn):
    kind: Literal["right_source", "wrong_source", "unsupported", "outdated"] = Field(
        description="right_source confirms a citation (its question is remembered for the passage it quotes); "
                    "the others flag the answer or a citation")
    citation: int | None = Field(default=None, description="The citation's number; none flags the whole answer "
                                                           "(right_source needs one)")
    note: str = Field(default="", max_length=4000, pattern=NO_NUL)


class FeedbackOut(Schema):
    id: int
    kind: str
    citation: int | None
    note: str
    reviewer: str | None
    created_at: datetime


class ReviewAnswerOut(MessageOut):
    conversation: int
    owner: str
    question: str
    feedback: list[FeedbackOut]


class ReviewCitationBriefOut(Schema):
    number: int
    chunk_id: int | None
    document_id: int
    document_title: str
    label: str
    link: str
    quote: str = Field(description=f"The first {PREVIEW_CHARS} characters of the quote")
    quote_truncated: bool = Field(description="The whole quote is in GET /review/answers/{id}")
    page: int | None


class ReviewAnswerBriefOut(Schema):
    """What one entry of the review desk shows; GET /review/answers/{id} has the rest."""

    id: int
    conversation: int
    owner: str
    question: str
    follows: str = Field(default="", description="The question asked before this one in the conversation (what a "
                                                 "follow-up builds on); empty for a first question")
    status: str
    text: str = Field(description=f"The first {PREVIEW_CHARS * 4} characters of the answer")
    text_truncated: bool
    withheld: bool
    refusal_reason: str
    error: str
    backend: str
    match: str = Field(default="", description="chat.match's label: \"quoted\", \"closest\", or empty")
    citations: list[ReviewCitationBriefOut]
    restricted_citations: list[int]
    unsupported: list[UnsupportedClaimOut]
    feedback: list[FeedbackOut]
    judgements: list[JudgementOut]
    review_grants: list[str] = Field(description="The caller's review grants this answer is shown through (logged)")
    created_at: datetime


class VerdictIn(TypedIn):
    verdict: Literal["confirmed", "dismissed"]


ReviewQueue = Literal["unreviewed", "closest", "rated_down", "refused", "flagged", "all"]
QUEUE_HELP = ("unreviewed: finished answers and refusals no reviewer has judged; closest: answers labelled as a "
              "closest match, which may not answer the question; rated_down: the asker's thumbs "
              "down; refused; flagged: a reviewer's flag on the answer or a citation; all")


class ReviewNarrow(Schema):
    folder: int | None = Field(default=None, ge=1, le=2**63 - 1,
                               description="Only answers drawing on a document in this folder")
    q: str = Field(default="", max_length=desk.SEARCH_MAX, pattern=NO_NUL,
                   description="Only answers whose question or text holds each word (answers withheld from the "
                               "caller are never searched)")


class ReviewFilter(ReviewNarrow):
    flagged: bool | None = None
    status: Literal["pending", "running", "done", "refused", "failed"] | None = None
    queue: ReviewQueue | None = Field(default=None, description=f"The review queue: {QUEUE_HELP}. With `queue`, "
                                      "`folder` or `q`, answers withheld from the caller are left out (GET "
                                      "/review/counts counts them as `hidden`); without, they are listed withheld")
    limit: int = Field(default=20, ge=1, le=100)
    before: int | None = Field(default=None, description="Only answers with a smaller id (the next page)")


class ReviewCountsIn(ReviewNarrow):
    queue: ReviewQueue = Field(default="unreviewed", description="The queue the folder counts are of")


class QueueCountsOut(Schema):
    unreviewed: int
    closest: int
    rated_down: int
    refused: int
    flagged: int
    all: int


class FolderCountOut(Schema):
    id: int
    name: str
    count: int = Field(description="Answers of the queue drawing on a document in the folder")


class ReviewCountsOut(Schema):
    queues: QueueCountsOut = Field(description="Answers in each queue (in `folder`, matching `q`) the caller may "
                                               "see in full")
    folders: list[FolderCountOut] = Field(description="Folders the caller knows of with answers of `queue` "
                                                      "(matching `q`)")
    hidden: int = Field(description="Answers withheld from the caller (they draw on a document the caller may not "
                                    "read): never listed, and the same whatever the queue, folder or search")


def _feedback(shown: FeedbackView) -> dict[str, Any]:
    given = shown.feedback
    return {
        "id": given.pk, "kind": given.kind, "citation": given.citation.number if given.citation else None,
        "note": shown.note, "reviewer": given.reviewer.get_username() if given.reviewer else None,
        "created_at": given.created_at,
    }


def _review(review: ReviewView, judged: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    m = review.answer.message
    return message_out(review.answer, judged) | {
        "conversation": m.conversation_id,
        "owner": m.conversation.owner.get_username(),
        "question": m.question.text if m.question else "",
        "feedback": [_feedback(f) for f in review.feedback],
    }


def _preview(text: str, limit: int) -> tuple[str, bool]:
    """The start of `text`, cut at a word where one is near, and whether anything was cut."""
    if len(text) <= limit:
        return text, False
    cut = text[:limit]
    return (cut.rsplit(" ", 1)[0] if " " in cut[limit // 2 :] else cut) + "…", True


def _review_brief(review: ReviewView, judged: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    view, m = review.answer, review.answer.message
    text, text_truncated = _preview(view.text or "", PREVIEW_CHARS * 4)
    citations = []
    for c in view.citations:
        quote, cut = _preview(c["quote"], PREVIEW_CHARS)
        citations.append({k: c[k] for k in ("number", "chunk_id", "document_id", "document_title", "label", "link",  # type: ignore[literal-required]
                                            "page")} | {"quote": quote, "quote_truncated": cut})
    return {
        "id": m.pk, "conversation": m.conversation_id, "owner": m.conversation.owner.get_username(),
        "question": m.question.text if m.question else "", "follows": getattr(m, "follows", None) or "",
        "status": m.status, "text": text,
        "text_truncated": text_truncated, "withheld": view.withheld, "refusal_reason": view.refusal_reason,
        "error": view.error, "backend": m.backend, "match": m.match, "citations": citations,
        "restricted_citations": view.restricted,
        "unsupported": view.unsupported, "feedback": [_feedback(f) for f in review.feedback],
        "judgements": judged.get(m.pk, []), "review_grants": view.grants, "created_at": m.created_at,
    }


def _require_reviewer(request: HttpRequest) -> None:
    if not selectors.is_reviewer(request.user):
        raise HttpError(404, gettext("no such page"))  # support's pages do not exist for anyone else


SURFACE_HEADER = "X-Review-Surface"  # the review desk's script sends "page", for the access log


def _surface(request: HttpRequest) -> str:
    """Where a review read comes from, as the access log names it: the review page's script, or the API."""
    if request.headers.get(SURFACE_HEADER) == "page":
        return ReviewAccess.Surface.REVIEW_PAGE
    return ReviewAccess.Surface.REVIEW_API


@router.get("/review/answers", response={200: list[ReviewAnswerBriefOut], **PARAMS, **NOT_FOUND})
def review_answers(request: HttpRequest, filters: Query[ReviewFilter]) -> list[dict[str, Any]]:
    """A page of answers as the review desk shows them, those with unjudged unsupported claims first, then newest
    first: quotes and long answers
    trimmed (GET /review/answers/{id} has them whole); `before=<last id>` is the next page (support staff only)."""
    _require_reviewer(request)
    if filters.queue or filters.folder or filters.q.strip():
        reviews = desk.review_queue(reviewer=request.user, queue=filters.queue or "all", folder=filters.folder,
                                    search=filters.q, flagged=filters.flagged, status=filters.status,
                                    limit=filters.limit, before=filters.before, surface=_surface(request))
    else:
        answers = desk.review_answers(flagged=filters.flagged, status=filters.status, limit=filters.limit,
                                      before=filters.before)
        reviews = desk.review_views(answers, viewer=request.user, surface=_surface(request))
    judged = judgements_out([r.answer for r in reviews], viewer=request.user, everyone=True)
    return [_review_brief(r, judged) for r in reviews]


@router.get("/review/counts", response={200: ReviewCountsOut, **PARAMS, **NOT_FOUND})
def review_counts(request: HttpRequest, filters: Query[ReviewCountsIn]) -> dict[str, Any]:
    """The review desk's counts: each queue's answers, each folder's, and how many answers are withheld from the
    caller (a number only: nothing else about them is listed, searched or counted) (support staff only)."""
    _require_reviewer(request)
    counts = desk.review_counts(reviewer=request.user, queue=filters.queue, folder=filters.folder,
                                search=filters.q)
    return {"queues": counts.queues, "folders": [vars(f) for f in counts.folders], "hidden": counts.hidden}


@router.get("/review/answers/{message_id}", response={200: ReviewAnswerOut, **PARAMS, **NOT_FOUND})
def review_answer(request: HttpRequest, message_id: int) -> dict[str, Any]:
    _require_reviewer(request)
    answer = desk.review_answer(message_id)
    if answer is None:
        raise HttpError(404, gettext("no such answer"))
    review = desk.review_views([answer], viewer=request.user, surface=_surface(request))[0]
    return _review(review, judgements_out([review.answer], viewer=request.user, everyone=True))


@router.post("/review/answers/{message_id}/feedback", response={201: FeedbackOut, **BODY, **NOT_FOUND})
def review_feedback(request: HttpRequest, message_id: int, payload: FeedbackIn) -> Status[dict[str, Any]]:
    _require_reviewer(request)
    answer = Message.objects.filter(pk=message_id, role=Message.Role.ASSISTANT).first()
    if answer is None:
        raise HttpError(404, gettext("no such answer"))
    created = feedback.feedback_add(reviewer=request.user, message=answer, kind=payload.kind,
                                    citation_number=payload.citation, note=payload.note)
    return Status(201, _feedback(FeedbackView(created, created.note)))


@router.post("/review/answers/{message_id}/unsupported/{index}", response={200: ReviewAnswerOut, **BODY, **NOT_FOUND})
def review_unsupported(request: HttpRequest, message_id: int, index: int, payload: VerdictIn) -> dict[str, Any]:
    """Confirm (filed as an "unsupported" flag) or dismiss the answer's unsupported claim `index` (0-based)."""
    _require_reviewer(request)
    feedback.unsupported_claim_review(reviewer=request.user, message_id=message_id, index=index,
                                      verdict=payload.verdict)
    return review_answer(request, message_id)


@router.post("/review/answers/{message_id}/judgement", response={200: JudgementOut, **BODY, **NOT_FOUND})
def review_judge(request: HttpRequest, message_id: int, payload: JudgementIn) -> Status[dict[str, Any]]:
    """A reviewer's verdict on an answer they may see in full (a second replaces the first): on a refusal,
    'should_answer' with the document that answers it marks the question answerable from it."""
    _require_reviewer(request)
    return judge_as(request, message_id, payload, Judgement.Role.REVIEWER)


@router.delete("/review/answers/{message_id}/judgement", response={204: None, **PARAMS, **NOT_FOUND})
def review_unjudge(request: HttpRequest, message_id: int) -> Status[None]:
    """Take your verdict as a reviewer back."""
    _require_reviewer(request)
    judgements.message_unjudge(judge=request.user, message_id=message_id, role=Judgement.Role.REVIEWER)
    return Status(204, None)


@router.get("/review/answers/{message_id}/judgement/pick", response={200: PickOut, **PARAMS, **NOT_FOUND})
def review_judgement_pick(request: HttpRequest, message_id: int) -> dict[str, Any]:
    """The document viewer's pick mode for a reviewer: the question of an answer you may judge."""
    _require_reviewer(request)
    return pick_as(request, message_id, Judgement.Role.REVIEWER)


@router.get("/review/conversations/{conversation_id}", response={200: ConversationOut, **PARAMS, **NOT_FOUND})
def review_conversation(request: HttpRequest, conversation_id: int, page: Query[MessagesPage]) -> dict[str, Any]:
    """Any conversation, read-only, a page at a time (support staff only; streaming stays with its owner)."""
    _require_reviewer(request)
    return conversation_out(Conversation.objects.filter(pk=conversation_id).first(), viewer=request.user, page=page,
                            review=True)
