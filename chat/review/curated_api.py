"""/api/curated: support's curated answers (chat.review.curated), for holders of chat.curate_answer; for anyone else they
do not exist (404, as support's pages). Each answer is listed only to a curator who may read every document it
cites; the others are the number `hidden`. A request that breaks an answer's rules is a 400 that says which.

Mounted with `api.add_router("/", "chat.review.curated_api.router")` in kb/api.py.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from django.utils.translation import gettext
from ninja import Query, Router, Schema
from ninja.errors import HttpError
from ninja.responses import Status
from pydantic import Field

from accounts.auth import api_auth
from accounts.models import Scope
from chat.models import CuratedAnswer, Message
from chat.review import curated
from chat.review.desk import review_answer
from chat.selectors import message_views, withheld_from_reviewer
from chat.services import ChatError, NotFound
from kb.library.access import visible_documents
from kb.library.models import passage_link
from kb.schemas import BODY, NO_NUL, NOT_FOUND, PARAMS, ErrorOut, StrictIn

router = Router(tags=["curated answers"], auth=api_auth(Scope.ASK))
BAD: dict[int, Any] = {400: ErrorOut}


class CitationIn(StrictIn):
    document: int = Field(description="The cited document's id")
    start: int = Field(ge=0, description="Start of the quoted range in the document's text (as GET /api/search gives)")
    end: int = Field(ge=0, description="End of the quoted range")


class CuratedIn(StrictIn):
    text: str = Field(max_length=curated.MAX_TEXT, pattern=NO_NUL,
                      description="The answer; every claim cites a passage as [n], n its place in `citations`")
    questions: list[str] = Field(description="Example questions it answers (at least one)")
    citations: list[CitationIn] = Field(description="The quoted passages, [1] first (at least one)")
    statement: str = Field(default="", max_length=2000, pattern=NO_NUL,
                           description="Support's own statement, shown apart from the quotes (no [n])")
    from_message: int | None = Field(default=None, description="The answer on the review desk it was written from")
    from_topic: str = Field(default="", max_length=300, pattern=NO_NUL, description="The content-gap topic's label")
    approve: bool = Field(default=False, description="Approve at once (it is served from then on)")


class CitationOut(Schema):
    number: int
    document_id: int | None
    document_title: str
    start: int
    end: int
    quote: str
    link: str


class CuratedOut(Schema):
    id: int
    state: Literal["draft", "approved", "stale"]
    stale_reason: str
    text: str
    statement: str
    questions: list[str]
    citations: list[CitationOut]
    from_message: int | None
    from_topic: str
    created_by: str
    created_at: datetime
    approved_by: str | None
    approved_at: datetime | None


class CuratedListOut(Schema):
    answers: list[CuratedOut]
    counts: dict[str, int] = Field(description="Answers per state, of those you may see")
    hidden: int = Field(description="Answers citing a document you cannot read: only counted")


class CuratedQuery(Schema):
    state: Literal["", "draft", "approved", "stale"] = ""


class PrefillQuery(Schema):
    message: int = Field(description="An answer on the review desk")


class PrefillOut(Schema):
    question: str
    citations: list[CitationOut] = Field(description="The answer's citations whose documents you may read")


def _require(request: HttpRequest) -> None:
    if not curated.may_curate(request.user):
        raise HttpError(404, gettext("no such page"))


def _name(user: Any) -> str:
    return curated.display_name(user)


def _out(answer: CuratedAnswer) -> dict[str, Any]:
    return {
        "id": answer.pk, "state": answer.state, "stale_reason": answer.stale_reason, "text": answer.text,
        "statement": answer.statement, "questions": [q.text for q in answer.questions.all()],
        "citations": [{"number": c.number, "document_id": c.document_id,
                       "document_title": c.document.title if c.document else gettext("(deleted document)"),
                       "start": c.start, "end": c.end, "quote": c.quote,
                       "link": passage_link(c.document_id, c.start, c.end, None) if c.document_id else ""}
                      for c in answer.citations.all()],
        "from_message": answer.from_message_id, "from_topic": answer.from_topic,
        "created_by": _name(answer.created_by), "created_at": answer.created_at,
        "approved_by": _name(answer.approved_by) if answer.approved_by_id else None,
        "approved_at": answer.approved_at,
    }


def _one(request: HttpRequest, answer_id: int) -> dict[str, Any]:
    found = (curated.curated_visible(request.user).filter(pk=answer_id).select_related("created_by", "approved_by")
             .prefetch_related("questions", "citations__document").first())
    if found is None:
        raise HttpError(404, gettext("no such curated answer"))
    return _out(found)


def _rejected(exc: ChatError) -> HttpError:
    """A NotFound stays a 404 (kb/api.py); any other broken rule is the caller's 400."""
    if isinstance(exc, NotFound):
        raise exc
    return HttpError(400, str(exc))


@router.get("/curated", response={200: CuratedListOut, **PARAMS, **NOT_FOUND})
def curated_list(request: HttpRequest, query: Query[CuratedQuery]) -> dict[str, Any]:
    """Curated answers you may see (every cited document readable by you), newest first; `state` narrows them."""
    _require(request)
    desk = curated.curated_desk(viewer=request.user, state=query.state)
    return {"answers": [_out(a) for a in desk.answers], "counts": desk.counts, "hidden": desk.hidden}


@router.get("/curated/prefill", response={200: PrefillOut, **PARAMS, **NOT_FOUND})
def curated_prefill(request: HttpRequest, query: Query[PrefillQuery]) -> dict[str, Any]:
    """What "Write an answer for this" starts from: an answer's question and the citations you may read."""
    _require(request)
    answer = review_answer(query.message)
    if answer is None or withheld_from_reviewer(answer, reviewer=request.user):
        raise HttpError(404, gettext("no such answer"))
    view = message_views([answer], viewer=request.user)[0]  # without review grants: a citation must be readable
    readable = set(visible_documents(request.user).filter(
        pk__in=[c["document_id"] for c in view.citations]).values_list("pk", flat=True))
    citations = [{"number": c["number"], "document_id": c["document_id"], "document_title": c["document_title"],
                  "start": c["start"], "end": c["end"], "quote": c["quote"], "link": c["link"]}
                 for c in view.citations if c["document_id"] in readable and not view.withheld]
    question = answer.question.text if answer.question and answer.role == Message.Role.ASSISTANT else ""
    return {"question": question, "citations": citations}


def _fields(payload: CuratedIn) -> dict[str, Any]:
    return {"text": payload.text, "questions": payload.questions, "statement": payload.statement,
            "citations": [(c.document, c.start, c.end) for c in payload.citations], "approve": payload.approve}


def _acted(request: HttpRequest, answer_id: int, act: Callable[[], object]) -> dict[str, Any]:
    """The answer as it stands after `act` (one of chat.review.curated's services), its refusals as 400s."""
    _require(request)
    try:
        act()
    except ChatError as exc:
        raise _rejected(exc) from exc
    return _one(request, answer_id)


@router.post("/curated", response={201: CuratedOut, **BODY, **NOT_FOUND, **BAD})
def curated_create(request: HttpRequest, payload: CuratedIn) -> Status[dict[str, Any]]:
    """Write a curated answer (a draft, or approved at once with `approve`)."""
    _require(request)
    try:
        answer = curated.curated_create(author=request.user, from_message_id=payload.from_message,
                                        from_topic=payload.from_topic, **_fields(payload))
    except ChatError as exc:
        raise _rejected(exc) from exc
    return Status(201, _one(request, answer.pk))


@router.put("/curated/{answer_id}", response={200: CuratedOut, **BODY, **NOT_FOUND, **BAD})
def curated_update(request: HttpRequest, answer_id: int, payload: CuratedIn) -> dict[str, Any]:
    """Replace an answer's text, questions, citations and statement: it goes back to draft unless `approve`."""
    return _acted(request, answer_id, lambda: curated.curated_update(editor=request.user, answer_id=answer_id,
                                                                     **_fields(payload)))


@router.post("/curated/{answer_id}/approve", response={200: CuratedOut, **PARAMS, **NOT_FOUND, **BAD})
def curated_approve(request: HttpRequest, answer_id: int) -> dict[str, Any]:
    """Approve (again): refused while a cited passage has changed or gone since it was cited."""
    return _acted(request, answer_id, lambda: curated.curated_approve(approver=request.user, answer_id=answer_id))


@router.post("/curated/{answer_id}/retire", response={200: CuratedOut, **PARAMS, **NOT_FOUND, **BAD})
def curated_retire(request: HttpRequest, answer_id: int) -> dict[str, Any]:
    """Take an answer out of service (back to draft)."""
    return _acted(request, answer_id, lambda: curated.curated_retire(user=request.user, answer_id=answer_id))


@router.delete("/curated/{answer_id}", response={204: None, **PARAMS, **NOT_FOUND, **BAD})
def curated_delete(request: HttpRequest, answer_id: int) -> Status[None]:
    """Delete an answer for good."""
    _require(request)
    try:
        curated.curated_delete(user=request.user, answer_id=answer_id)
    except ChatError as exc:
        raise _rejected(exc) from exc
    return Status(204, None)
