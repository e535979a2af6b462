"""GET /api/search: ranked passages the caller may read; /api/search/adjustments: staff's boosts and hides.

The adjustments' handlers call search.adjustments, which holds the rules. As the documents API does, to anyone
who is not staff these endpoints do not exist (404); staff without the permission get 403 naming it; a document
or adjustment they may not read is 404, like a missing one; a request that cannot be carried out is 422 in words.
Tokens need `documents:read` to list and `documents:write` to add or revoke."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.http import Http404, HttpRequest
from django.utils.translation import gettext
from ninja import Query, Router, Schema, Status
from ninja.errors import HttpError
from pydantic import Field

from accounts.acl import is_active_user
from accounts.auth import api_auth
from accounts.models import Scope
from kb.library.access import staff_may
from kb.schemas import BODY, NO_NUL, NOT_FOUND, PARAMS, StrictIn
from search.adjustments import (
    REVOKE,
    VIEW,
    AdjustmentDenied,
    AdjustmentError,
    AdjustmentNotFound,
    adjustment_add,
    adjustment_revoke,
    adjustments_visible,
)
from search.models import RetrievalAdjustment
from search.retrieval import SearchOptions, SearchResult, hybrid_search

router = Router(tags=["search"], auth=api_auth(Scope.SEARCH))


class SearchIn(Schema):
    # 1,000 characters: Daphne (Twisted) drops a request whose line and headers pass 16 KiB before
    # the app sees it, and one character may take 12 bytes percent-encoded.
    q: str = Field(min_length=1, max_length=1000)
    k: int = Field(default=20, ge=1, le=100)


class HitOut(Schema):
    rank: int
    document_id: int
    document_title: str
    chunk_id: int
    breadcrumb: str
    content: str
    start: int
    end: int
    page: int | None
    link: str
    distance: float
    score: float | None
    late_score: float | None
    rerank_score: float | None
    kind: str
    audience: str
    passed: bool


class SearchOut(Schema):
    query: str
    intent: str
    answerable: bool
    refusal_reason: str | None
    threshold: float
    nearest_distance: float | None
    related_distance: float = Field(description="Hits at most this far are worth offering as the closest passages "
                                                "when the question is refused (KB_SEARCH_RELATED_MARGIN)")
    hits: list[HitOut]


def shows_raw_scores(user: Any) -> bool:
    """Fused and late-interaction scores weigh words by their frequency over every chunk,
    readable or not, so a probe word's score tells whether restricted text uses it. Only
    superusers, who may open every chunk in the admin anyway, get them; everyone else gets
    the ranks, the cosine distance and the rerank score, which depend on the query and the
    passage alone (docs/SECURITY.md: residual channels)."""
    return bool(getattr(user, "is_superuser", False))


def search_payload(result: SearchResult, *, raw_scores: bool) -> dict[str, Any]:
    """The JSON shape shared by the API and `manage.py search --json`."""
    return {
        "query": result.query,
        "intent": result.intent,
        "answerable": result.answerable,
        "refusal_reason": result.refusal_reason,
        "threshold": result.threshold,
        "nearest_distance": result.nearest_distance,
        "related_distance": round(result.related_distance, 4),
        "hits": [
            {
                "rank": rank,
                "document_id": h.document_id,
                "document_title": h.document_title,
                "chunk_id": h.chunk_id,
                "breadcrumb": h.breadcrumb,
                "content": h.content,
                "start": h.start,
                "end": h.end,
                "page": h.page,
                "link": h.link,
                "distance": round(h.distance, 4),
                "score": round(h.score, 6) if raw_scores else None,
                "late_score": None if h.late_score is None or not raw_scores else round(h.late_score, 4),
                "rerank_score": None if h.rerank_score is None else round(h.rerank_score, 4),
                "kind": h.kind,
                "audience": h.audience,
                "passed": h.passed,
            }
            for rank, h in enumerate(result.hits, 1)
        ],
    }


@router.get("", response={200: SearchOut, **PARAMS})
def search(request: HttpRequest, params: Query[SearchIn]) -> dict[str, Any]:
    result = hybrid_search(user=request.user, query=params.q, options=SearchOptions(k=params.k))
    return search_payload(result, raw_scores=shows_raw_scores(request.user))


# --------------------------------------------------------------------------- boosts and hides


class AdjustmentIn(StrictIn):
    """A boost or hide of a document (no passage named), or of one passage: by its stable id, or by a range of
    the document's text (a pick in the viewer, `#char=start,end`), which names the passage holding most of it."""

    document_id: int = Field(ge=1, le=2**63 - 1, examples=[42])
    action: Literal["boost", "hide"] = Field(examples=["hide"])
    reason: str = Field(min_length=1, max_length=500, pattern=NO_NUL, examples=["The 2019 manual, replaced by the 2024 one"])
    stable_id: str = Field(default="", max_length=40, pattern=NO_NUL, description="One passage (a chunk's stable id)")
    start: int | None = Field(default=None, ge=0, le=2**31 - 1, description="With `end`: a range of the document")
    end: int | None = Field(default=None, ge=0, le=2**31 - 1)


class AdjustmentOut(Schema):
    id: int
    document_id: int
    document_title: str
    stable_id: str = Field(description="The passage's stable id; empty: the whole document")
    passage: str | None = Field(description="The passage's first characters; null for a whole document or a "
                                            "passage whose text has changed since")
    link: str = Field(description="The passage (or document) in the viewer", examples=["/documents/42/#char=0,180"])
    action: str
    reason: str
    active: bool
    created_by: str | None
    created_at: datetime
    revoked_by: str | None
    revoked_at: datetime | None


class AdjustmentFilter(Schema):
    active: bool | None = Field(default=None, description="true: only those in force; false: only revoked ones")
    document: int | None = Field(default=None, ge=1, le=2**63 - 1, description="Only those on this document")
    limit: int = Field(default=100, ge=1, le=500)
    offset: int = Field(default=0, ge=0, le=2**31 - 1)


def _adjustment_out(row: RetrievalAdjustment) -> dict[str, Any]:
    start, end = getattr(row, "passage_start", None), getattr(row, "passage_end", None)
    link = f"/documents/{row.document_id}/" + (f"#char={start},{end}" if row.stable_id and start is not None else "")
    return {
        "id": row.pk, "document_id": row.document_id, "document_title": str(row.document), "stable_id": row.stable_id,
        "passage": getattr(row, "passage_excerpt", None) if row.stable_id else None, "link": link,
        "action": row.action, "reason": row.reason, "active": row.active,
        "created_by": row.created_by.get_username() if row.created_by else None, "created_at": row.created_at,
        "revoked_by": row.revoked_by.get_username() if row.revoked_by else None, "revoked_at": row.revoked_at,
    }


def _staff(request: HttpRequest) -> None:
    if not (is_active_user(request.user) and request.user.is_staff):
        raise Http404("Not Found")


def _carried_out(call: Any, **kwargs: Any) -> RetrievalAdjustment:
    """The service's refusals as the API's statuses."""
    try:
        return call(**kwargs)  # type: ignore[no-any-return]
    except AdjustmentDenied as exc:
        raise HttpError(403, str(exc)) from None
    except AdjustmentNotFound as exc:
        raise HttpError(404, str(exc)) from None
    except AdjustmentError as exc:
        raise HttpError(422, str(exc)) from None


@router.get("/adjustments", response={200: list[AdjustmentOut], **PARAMS, **NOT_FOUND},
            auth=api_auth(Scope.DOCUMENTS_READ), summary="Boosts and hides")
def adjustment_index(request: HttpRequest, filters: Query[AdjustmentFilter]) -> list[dict[str, Any]]:
    """Every boost and hide on documents the caller may read, newest first, revoked ones too (the log)."""
    _staff(request)
    if not (staff_may(request.user, VIEW) or staff_may(request.user, REVOKE)):
        raise HttpError(403, gettext("You need the %(permission)s permission for this.") % {"permission": VIEW})
    rows = adjustments_visible(request.user)
    if filters.active is not None:
        rows = rows.filter(revoked_at__isnull=filters.active)
    if filters.document is not None:
        rows = rows.filter(document_id=filters.document)
    return [_adjustment_out(row) for row in rows[filters.offset : filters.offset + filters.limit]]


@router.post("/adjustments", response={201: AdjustmentOut, **BODY, **NOT_FOUND},
             auth=api_auth(Scope.DOCUMENTS_WRITE), summary="Boost or hide a document or passage")
def adjustment_create(request: HttpRequest, body: AdjustmentIn) -> Status[dict[str, Any]]:
    """Boost or hide for everyone's retrieval; the adjustment in force on the same document and passage is revoked."""
    _staff(request)
    made = _carried_out(adjustment_add, user=request.user, document_id=body.document_id, action=body.action,
                        reason=body.reason, stable_id=body.stable_id, start=body.start, end=body.end)
    return Status(201, _adjustment_out(made))


@router.post("/adjustments/{adjustment_id}/revoke", response={200: AdjustmentOut, **PARAMS, **NOT_FOUND},
             auth=api_auth(Scope.DOCUMENTS_WRITE), summary="Revoke a boost or hide")
def adjustment_take_back(request: HttpRequest, adjustment_id: int) -> dict[str, Any]:
    """Retrieval ranks the passage as before; the row stays, with who revoked it and when."""
    _staff(request)
    return _adjustment_out(_carried_out(adjustment_revoke, user=request.user, adjustment_id=adjustment_id))
