"""GET /api/search: ranked passages the caller may read."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Query, Router, Schema
from pydantic import Field

from accounts.api import api_auth
from accounts.models import Scope
from kb.api_contract import PARAMS
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
