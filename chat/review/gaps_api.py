"""GET /api/gaps and /api/gaps.csv: content gaps by topic (chat.review.gaps), for superusers and staff holding
chat.view_contentgaps; for anyone else they do not exist (404, as support's pages).

Mounted with `api.add_router("/", "chat.review.gaps_api.router")` in kb/api.py.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any, Literal

from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.translation import gettext
from ninja import Query, Router, Schema
from ninja.errors import HttpError
from pydantic import Field

from accounts.auth import api_auth
from accounts.models import Scope
from chat.review import gaps
from kb.schemas import NOT_FOUND, PARAMS

router = Router(tags=["content gaps"], auth=api_auth(Scope.ASK))


class GapsQuery(Schema):
    days: int = Field(default=gaps.DAYS, ge=1, le=366, description="The window: questions asked in the last `days` days")


class QuestionOut(Schema):
    answer: int = Field(description="The answer's id")
    text: str = Field(description="The question as asked")
    asked_at: datetime
    reasons: list[str] = Field(description=f"Why it is a gap: any of {', '.join(gaps.REASONS)}")


class DocumentOut(Schema):
    id: int
    title: str
    link: str
    distance: float | None = Field(description="Cosine distance of its nearest chunk to the topic's centre; "
                                               "null for a named document not among the nearest")
    named: int = Field(description="'Should have answered' verdicts naming it")
    askers_may_read: int = Field(description="Of the topic's askers, how many may read it")


class HiddenOut(Schema):
    count: int = Field(description="Documents you cannot read")
    groups: list[str] = Field(description="The groups that may read them")
    people: int = Field(description="People granted one of them by name")
    distance: float | None
    named: int
    askers_may_read: int
    summary: str


class WeekOut(Schema):
    start: date = Field(description="The week's Monday")
    count: int


class TopicOut(Schema):
    label: str = Field(description="The question nearest the topic's centre")
    verdict: Literal["missing", "restricted", "unfound"]
    verdict_text: str
    count: int
    askers: int
    reasons: dict[str, int]
    first_asked: datetime
    last_asked: datetime
    weeks: list[WeekOut]
    examples: list[QuestionOut]
    documents: list[DocumentOut] = Field(description="Nearby or named documents you may read")
    hidden: list[HiddenOut] = Field(description="Nearby or named documents you may not read, by who may")


class GapsOut(Schema):
    since: datetime
    questions: int
    truncated: bool = Field(description=f"More than {gaps.MAX_QUESTIONS} gaps in the window: the oldest left out")
    embedded: int = Field(description="Questions stored without an embedding, embedded for this report")
    not_embedded: int = Field(description=f"Older questions without one beyond the {gaps.MAX_EMBEDDED} embedded, "
                                          "left out")
    topics: list[TopicOut]
    more_topics: int = Field(description=f"Smaller topics beyond the {gaps.MAX_TOPICS} listed")


def _report(request: HttpRequest, days: int) -> gaps.Gaps:
    if not gaps.may_view_gaps(request.user):
        raise HttpError(404, gettext("no such page"))  # as support's pages: they do not exist for anyone else
    return gaps.gaps(viewer=request.user, since=timezone.now() - timedelta(days=days))


def _topic(topic: gaps.Topic) -> dict[str, Any]:
    return vars(topic) | {
        "verdict_text": topic.verdict_text,
        "examples": [{"answer": q.answer_id, "text": q.text, "asked_at": q.asked_at, "reasons": list(q.reasons)}
                     for q in topic.examples],
        "hidden": [vars(h) | {"summary": h.summary} for h in topic.hidden],
        "documents": [vars(d) for d in topic.documents], "weeks": [vars(w) for w in topic.weeks],
    }


@router.get("/gaps", response={200: GapsOut, **PARAMS, **NOT_FOUND})
def gaps_list(request: HttpRequest, query: Query[GapsQuery]) -> dict[str, Any]:
    """What people asked that the knowledge base could not answer or answered badly, by topic, largest first."""
    report = _report(request, query.days)
    return vars(report) | {"topics": [_topic(topic) for topic in report.topics]}


@router.get("/gaps.csv", response={**PARAMS, **NOT_FOUND}, openapi_extra={"responses": {200: {
    "description": "One row a topic, as GET /api/gaps", "content": {"text/csv": {"schema": {"type": "string"}}}}}})
def gaps_csv(request: HttpRequest, query: Query[GapsQuery]) -> HttpResponse:
    """The same report as CSV, one row a topic."""
    response = HttpResponse(gaps.gaps_csv(_report(request, query.days)), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="content-gaps-{timezone.localdate().isoformat()}.csv"'
    return response
