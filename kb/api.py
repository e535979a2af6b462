"""The one NinjaAPI: each app adds its router; session (with CSRF) or Bearer token auth."""

from __future__ import annotations

import logging
from typing import Any

from django.db import OperationalError
from django.http import HttpRequest, HttpResponse
from django.http.multipartparser import MultiPartParserError
from django.utils.translation import gettext
from ninja import NinjaAPI, Schema

from accounts.auth import api_auth
from chat import services as chat_services
from kb import outage
from kb.library.forms import UploadFormError
from kb.library.services import DocumentStateConflict
from kb.library.sources.services import SourceNameTaken, SourceRejected
from kb.library.sources.sync import SourceBusy
from kb.schemas import ANY

logger = logging.getLogger(__name__)

api = NinjaAPI(title="Knowledge base API", version="1", auth=api_auth(), urls_namespace="api")
api.add_router("/search", "search.api.router")
api.add_router("/", "chat.api.router")
api.add_router("/", "chat.review.desk_api.router")
api.add_router("/", "chat.review.gaps_api.router")
api.add_router("/", "chat.review.curated_api.router")
api.add_router("/documents", "kb.library.documents_api.documents")
api.add_router("/folders", "kb.library.documents_api.folders")
api.add_router("/sources", "kb.library.sources_api.sources")


# Domain errors become HTTP here, once, for every router (a handler matches the nearest class).
@api.exception_handler(chat_services.NotFound)
def _not_found(request: HttpRequest, exc: Exception) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc)}, status=404)


@api.exception_handler(chat_services.TooManyQuestions)
def _too_many(request: HttpRequest, exc: Exception) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc)}, status=429)


def _retry_later(request: HttpRequest, detail: str) -> HttpResponse:
    response = api.create_response(request, {"detail": detail}, status=503)
    response["Retry-After"] = outage.RETRY_AFTER
    return response


@api.exception_handler(chat_services.QueueUnavailable)
def _queue_unavailable(request: HttpRequest, exc: Exception) -> HttpResponse:
    return _retry_later(request, str(exc))


@api.exception_handler(chat_services.ChatError)
def _rejected(request: HttpRequest, exc: Exception) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc)}, status=422)


@api.exception_handler(UploadFormError)
def _bad_form(request: HttpRequest, exc: Exception) -> HttpResponse:
    """A folder, group or person the request names that does not exist, or an access choice that does not add up."""
    return api.create_response(request, {"detail": str(exc)}, status=400)


@api.exception_handler(DocumentStateConflict)
def _conflict(request: HttpRequest, exc: Exception) -> HttpResponse:
    """The document or folder is not in a state that allows this (not failed, not empty, name taken)."""
    return api.create_response(request, {"detail": str(exc)}, status=409)


@api.exception_handler(SourceRejected)
def _bad_source(request: HttpRequest, exc: Exception) -> HttpResponse:
    """A source's settings that break its rules (a schedule too short, a location of the wrong kind)."""
    return api.create_response(request, {"detail": str(exc)}, status=400)


@api.exception_handler(SourceNameTaken)
@api.exception_handler(SourceBusy)
def _source_conflict(request: HttpRequest, exc: Exception) -> HttpResponse:
    """Another source has the name, or a run of this one is under way."""
    return api.create_response(request, {"detail": str(exc)}, status=409)


@api.exception_handler(OperationalError)
def _database_unavailable(request: HttpRequest, exc: Exception) -> HttpResponse:
    """PostgreSQL restarting or out of reach (or the pool out of connections): a short JSON 503 that
    says to retry, not a 500 page; the pool reconnects by itself once the server is back."""
    logger.warning("database unavailable for %s: %s", request.path, exc)
    return _retry_later(request, outage.MESSAGE)


@api.exception_handler(MultiPartParserError)
def _unreadable_form(request: HttpRequest, exc: Exception) -> HttpResponse:
    """Django refuses the whole form (a part's headers over 1 KB: a file name of about 900
    characters); say so rather than answer a bare 400 page."""
    detail = gettext("the upload form could not be read: %(reason)s") % {"reason": exc}
    return api.create_response(request, {"detail": detail}, status=400)


class MeOut(Schema):
    username: str
    groups: list[str]
    is_staff: bool


@api.get("/me", response={200: MeOut, **ANY}, tags=["accounts"])
def me(request: HttpRequest) -> dict[str, Any]:
    user: Any = request.user
    return {
        "username": user.username,
        "groups": sorted(user.groups.values_list("name", flat=True)),
        "is_staff": user.is_staff,
    }
