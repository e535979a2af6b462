"""The database out of reach (PostgreSQL restarting, the pool out of connections) is a 503 that says to
retry, on every surface: the API's own handler (kb.api) and Django's last resort (kb.errors.server_error)
both answer it this way, so a person never reads a 500 page that looks like a bug in the product."""

from __future__ import annotations

import psycopg
from django.db import OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.utils.translation import gettext, gettext_noop

MESSAGE = gettext_noop("The database is unavailable; try again in a moment.")  # in the reader's language when sent
RETRY_AFTER = "5"  # seconds: the pool reconnects by itself once the server is back


def is_database_outage(exc: BaseException | None) -> bool:
    """Whether `exc`, or an error it was raised from or while handling, is a lost or unreachable database."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, OperationalError | psycopg.OperationalError):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def unavailable(request: HttpRequest) -> HttpResponse:
    """JSON under /api/, a page elsewhere; both with Retry-After."""
    response: HttpResponse
    if request.path.startswith("/api/"):
        response = JsonResponse({"detail": gettext(MESSAGE)}, status=503)
    else:
        response = HttpResponse(render_to_string("503.html", {"message": gettext(MESSAGE)}), status=503)
    response["Retry-After"] = RETRY_AFTER
    return response
