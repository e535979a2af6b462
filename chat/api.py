"""POST /api/ask, the caller's conversations and their verdicts on their own answers; the review desk's router
(chat.review.desk_api) shows answers with these schemas and helpers.

Mounted with `api.add_router("/", "chat.api.router")` in kb/api.py, so it inherits the
API's auth (session with CSRF, or a Bearer token).
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
from chat import selectors, services
from chat.events import CitationPayload, CuratedPayload, EventSchema
from chat.models import Conversation, Judgement
from chat.review import desk, judgements
from chat.review.judgements import JudgementView
from chat.selectors import MessagePage, MessageView
from kb.schemas import BODY, NO_NUL, NOT_FOUND, PARAMS, ErrorOut, StrictIn, TypedIn

router = Router(tags=["chat"], auth=api_auth(Scope.ASK))


class AskIn(TypedIn):  # also a websocket message, whose "type" it ignores
    question: str = Field(min_length=1, max_length=services.MAX_QUESTION, pattern=NO_NUL)
    conversation: int | None = None


class AskOut(Schema):
    conversation: int
    question: int
    message: int
    stream: str


class TimingsOut(Schema):
    retrieval_ms: float | None
    first_token_ms: float | None
    total_ms: float | None


class UnsupportedClaimOut(Schema):
    start: int = Field(description="Where the sentence is in the answer text")
    end: int
    sentence: str
    numbers: list[int] = Field(description="The sources it cites, whose quotes do not back it")
    missing: list[str] = Field(description="What those quotes lack")
    verdict: Literal["open", "confirmed", "dismissed"]
    reviewer: str | None = None
    judged_at: datetime | None = Field(default=None, description="When the reviewer gave the verdict")


class JudgedDocumentOut(Schema):
    id: int
    title: str
    link: str


class JudgementOut(Schema):
    id: int
    kind: Literal["helpful", "wrong", "should_refuse", "should_answer"]
    role: Literal["asker", "reviewer"]
    judge: str | None = Field(description="Who judged; null once their account is gone")
    document: JudgedDocumentOut | None = Field(
        description="Should have answered: the document that answers it, shown only to readers who may read it")
    reason: Literal["", "off_topic", "wrong_or_outdated", "should_refuse", "should_answer"] = Field(
        description="The asker's reason chip with a thumbs down (POST /messages/{id}/rating); empty otherwise")
    note: str
    created_at: datetime
    updated_at: datetime


class MessageOut(Schema):
    id: int
    role: str
    status: str
    text: str
    html: str
    withheld: bool
    intent: str
    refusal_reason: str = Field(description="Why the question was refused, with the retrieval signals (distances, "
                                            "threshold, confidence); empty unless the caller is staff or a reviewer")
    error: str
    backend: str
    model: str
    notice: str
    match: str = Field(description="How well the answer matches its question: \"quoted\", \"closest\" (may not "
                                   "answer it: the page says so), or empty for a refusal, a failure or an older answer")
    timings: TimingsOut
    curated: CuratedPayload | None = Field(description="With match \"curated\": support's curated answer it is, by "
                                                       "whom, approved when, support's own statement and the "
                                                       "question support answered")
    citations: list[CitationPayload]
    restricted_citations: list[int]
    unsupported: list[UnsupportedClaimOut]
    rating: int = Field(description="The asker's thumbs: 1 helpful, -1 any other verdict, 0 none")
    judgements: list[JudgementOut] = Field(description="Verdicts on the answer: the caller's own; on the review "
                                                       "desk everyone's (none on a withheld answer)")
    review_grants: list[str] = Field(description="On the review desk: the caller's review grants this answer is "
                                                 "shown through (each such read is logged); empty when they may "
                                                 "read every document it drew on, or it is withheld")
    created_at: datetime
    events: list[EventSchema] = Field(description="The message as the events its stream sends (a replay of it)")


class ConversationOut(Schema):
    id: int
    title: str
    created_at: datetime
    updated_at: datetime
    stream: str
    messages: list[MessageOut] = Field(description="The latest messages (before `before` if given), oldest first")
    before: int | None = Field(description="Pass as ?before= for the messages before these; null: none are left")


class ConversationSummaryOut(Schema):
    id: int
    title: str
    created_at: datetime
    updated_at: datetime
    questions: int = Field(description="Questions asked in it")


class ConversationIn(StrictIn):
    title: str = Field(min_length=1, max_length=services.TITLE_MAX, pattern=NO_NUL,
                       description="Shown as one line (runs of spaces and line breaks become one space)")


class ConversationPage(Schema):
    q: str = Field(default="", max_length=200, pattern=NO_NUL,
                   description="Only conversations whose title or one of whose questions holds every word")
    limit: int = Field(default=50, ge=1, le=200)
    # Bounded: PostgreSQL refuses an OFFSET past bigint, which was a 500.
    offset: int = Field(default=0, ge=0, le=2**31 - 1, description="Conversations to skip (the next page: offset + limit)")


class MessagesPage(Schema):
    limit: int = Field(default=selectors.MESSAGES_PAGE, ge=1, le=200, description="Messages at most")
    before: int | None = Field(default=None, description="Only messages with a smaller id (the `before` of a page)")


def stream_path(conversation_id: int) -> str:
    return f"/ws/chat/{conversation_id}/"


def _judgement(shown: JudgementView) -> dict[str, Any]:
    j, document = shown.judgement, shown.document
    return {"id": j.pk, "kind": j.kind, "role": j.role, "judge": j.judge.get_username() if j.judge else None,
            "document": {"id": document.pk, "title": str(document), "link": f"/documents/{document.pk}/"}
            if document else None, "reason": j.reason, "note": j.note, "created_at": j.created_at,
            "updated_at": j.updated_at}


def judgements_out(views: list[MessageView], *, viewer: Any, everyone: bool) -> dict[int, list[dict[str, Any]]]:
    """The verdicts each of the views' answers shows `viewer` (chat.review.judgements.judgement_views)."""
    shown = judgements.judgement_views([v.message for v in views], viewer=viewer, everyone=everyone,
                                       withheld={v.message.pk for v in views if v.withheld})
    return {pk: [_judgement(j) for j in found] for pk, found in shown.items()}


def message_out(view: MessageView, judged: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    """A message as MessageOut; the review desk's answers extend it."""
    m = view.message
    events = selectors.message_events(view)
    return {
        "id": m.pk, "role": m.role, "status": m.status, "text": view.text, "html": view.html,
        "withheld": view.withheld, "intent": m.intent, "refusal_reason": view.refusal_reason, "error": view.error,
        "backend": m.backend, "model": m.model, "notice": m.notice, "match": m.match, "timings": view.timings,
        "citations": view.citations, "restricted_citations": view.restricted, "unsupported": view.unsupported,
        "rating": m.rating, "judgements": judged.get(m.pk, []), "review_grants": view.grants,
        "created_at": m.created_at, "events": events,
        "curated": next((e.get("curated") for e in events if e["type"] == "done"), None),
    }


@router.post("/ask", response={202: AskOut, **BODY, **NOT_FOUND, 429: ErrorOut})
def ask(request: HttpRequest, payload: AskIn) -> Status[dict[str, Any]]:
    """Store the question and return at once; the answer streams to `stream` (a websocket)."""
    asked = services.question_ask(user=request.user, question=payload.question, conversation_id=payload.conversation)
    return Status(202, {"conversation": asked.conversation.pk, "question": asked.question.pk,
                        "message": asked.answer.pk, "stream": stream_path(asked.conversation.pk)})


@router.get("/conversations", response={200: list[ConversationSummaryOut], **PARAMS})
def conversations(request: HttpRequest, page: Query[ConversationPage]) -> Any:
    """The caller's conversations, most recently active first, a page at a time; `q` searches their titles and
    questions (the caller's own only)."""
    return services.conversation_search(user=request.user, query=page.q, limit=page.limit, offset=page.offset)


@router.patch("/conversations/{conversation_id}", response={200: ConversationSummaryOut, **BODY, **NOT_FOUND})
def conversation_rename(request: HttpRequest, conversation_id: int, payload: ConversationIn) -> Conversation:
    """Rename one of your conversations (others: 404)."""
    return services.conversation_rename(user=request.user, conversation_id=conversation_id, title=payload.title)


@router.delete("/conversations/{conversation_id}", response={204: None, **PARAMS, **NOT_FOUND})
def conversation_delete(request: HttpRequest, conversation_id: int) -> Status[None]:
    """Delete one of your conversations for good, with its answers and the verdicts on them (others: 404)."""
    services.conversation_delete(user=request.user, conversation_id=conversation_id)
    return Status(204, None)


@router.get("/conversations/{conversation_id}", response={200: ConversationOut, **PARAMS, **NOT_FOUND})
def conversation(request: HttpRequest, conversation_id: int, page: Query[MessagesPage]) -> dict[str, Any]:
    """The conversation's latest messages, a page at a time: `before` leads to the earlier ones."""
    return conversation_out(selectors.conversation_for_user(request.user, conversation_id), viewer=request.user,
                            page=page, review=False)


def conversation_out(found: Conversation | None, *, viewer: Any, page: MessagesPage, review: bool) -> dict[str, Any]:
    """A page of the conversation as ConversationOut: as its owner reads it, or (`review`) as the review desk does."""
    if found is None:
        raise HttpError(404, gettext("no such conversation"))
    shown: MessagePage = (
        desk.review_conversation_page(found, viewer=viewer, before=page.before, limit=page.limit) if review
        else selectors.conversation_page(found, viewer=viewer, before=page.before, limit=page.limit))
    judged = judgements_out(shown.views, viewer=viewer, everyone=review)
    return {"id": found.pk, "title": found.title, "created_at": found.created_at, "updated_at": found.updated_at,
            "stream": stream_path(found.pk), "messages": [message_out(v, judged) for v in shown.views],
            "before": shown.before}


class RatingIn(TypedIn):
    rating: int = Field(description="1 helpful, -1 not helpful, 0 takes the feedback back")
    reason: Literal["off_topic", "wrong_or_outdated", "should_refuse", "should_answer"] | None = Field(
        default=None, description="With -1, the reason chip: on an answer off_topic (doesn't answer my question), "
        "wrong_or_outdated or should_refuse (should have said it doesn't know); on a refusal should_answer (the "
        "documents do answer this)")
    comment: str = Field(default="", max_length=judgements.COMMENT_MAX, pattern=NO_NUL,
                         description="The asker's own words, stored as the verdict's note")


class RatingOut(Schema):
    rating: int


@router.post("/messages/{message_id}/rating", response={200: RatingOut, **BODY, **NOT_FOUND})
def rate(request: HttpRequest, message_id: int, payload: RatingIn) -> dict[str, Any]:
    """Thumbs up (1) or down (-1) on one of your own answers, a thumbs down with a reason chip and a comment; 0
    takes it back. Stored as the verdict the reason maps to (chat.review.judgements.feedback_kind): up "helpful", down
    "wrong", "should_refuse" or "should_answer"; a bare thumbs down keeps a negative verdict already given."""
    judgements.message_rate(user=request.user, message_id=message_id, rating=payload.rating, reason=payload.reason,
                            comment=payload.comment)
    return {"rating": payload.rating}


class JudgementIn(TypedIn):
    kind: Literal["helpful", "wrong", "should_refuse", "should_answer"] = Field(
        description="On a refusal, 'helpful' says it was right to refuse", examples=["should_answer"])
    document: int | None = Field(default=None, ge=1, le=2**63 - 1,
                                 description="With should_answer or wrong: the document that answers it (one you "
                                             "may read)")
    start: int | None = Field(default=None, ge=0, le=2**31 - 1,
                              description="With document: where the passage picked in the viewer starts (an offset "
                                          "into the document's text, as #char= counts); its question is remembered "
                                          "for the passage that holds the pick")
    end: int | None = Field(default=None, ge=1, le=2**31 - 1, description="With start: where the pick ends")
    note: str = Field(default="", max_length=4000, pattern=NO_NUL)


class PickOut(Schema):
    question: str = Field(description="The question whose answering passage is being picked")
    refused: bool
    conversation: int = Field(description="The conversation the answer is in")


def judge_as(request: HttpRequest, message_id: int, payload: JudgementIn, role: str) -> Status[dict[str, Any]]:
    """The caller's verdict as the asker or as a reviewer (chat.review.judgements decides who may give it)."""
    judgement = judgements.message_judge(judge=request.user, message_id=message_id, role=role, kind=payload.kind,
                                         document_id=payload.document, note=payload.note, start=payload.start,
                                         end=payload.end)
    return Status(200, _judgement(JudgementView(judgement, judgement.document)))


def pick_as(request: HttpRequest, message_id: int, role: str) -> dict[str, Any]:
    target = judgements.pick_target(judge=request.user, message_id=message_id, role=role)
    return {"question": target.question, "refused": target.refused, "conversation": target.conversation_id}


@router.post("/messages/{message_id}/judgement", response={200: JudgementOut, **BODY, **NOT_FOUND})
def judge(request: HttpRequest, message_id: int, payload: JudgementIn) -> Status[dict[str, Any]]:
    """Your verdict on one of your own finished answers (a second replaces the first); it sets the thumbs too.
    A document you may not read is not found, like a missing one, and nothing is stored."""
    return judge_as(request, message_id, payload, Judgement.Role.ASKER)


@router.delete("/messages/{message_id}/judgement", response={204: None, **PARAMS, **NOT_FOUND})
def unjudge(request: HttpRequest, message_id: int) -> Status[None]:
    """Take your verdict on one of your own answers back (and its thumbs)."""
    judgements.message_unjudge(judge=request.user, message_id=message_id, role=Judgement.Role.ASKER)
    return Status(204, None)


@router.get("/messages/{message_id}/judgement/pick", response={200: PickOut, **PARAMS, **NOT_FOUND})
def judgement_pick(request: HttpRequest, message_id: int) -> dict[str, Any]:
    """The document viewer's pick mode: the question of one of your own finished answers, whose answering passage
    you are picking (then POST the judgement with document, start and end)."""
    return pick_as(request, message_id, Judgement.Role.ASKER)
