"""The error pages a person may meet, in plain words with a next step: an unexpected error (handler500) and a
refused form (CSRF_FAILURE_VIEW). Neither shows an exception, a status code or the word CSRF. A server error is
logged once, with its traceback, under a short reference that the page (or the API's JSON) shows: the admin finds
the traceback by searching the log for what the reader quotes."""

from __future__ import annotations

import logging
import secrets
import sys
from urllib.parse import urlsplit

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext

from kb import outage

logger = logging.getLogger(__name__)

REFERENCE_BYTES = 4  # 8 hex characters: short enough to read out, unique enough among a log's errors


def error_reference() -> str:
    return secrets.token_hex(REFERENCE_BYTES)


def wants_json(request: HttpRequest) -> bool:
    """The API, and the pages' scripts that ask for JSON (the library's upload), get JSON; a browser a page."""
    return request.path.startswith("/api/") or "application/json" in request.headers.get("Accept", "")


def server_error(request: HttpRequest) -> HttpResponse:
    """Django's last resort for an uncaught error (handler500). A database out of reach that escaped every
    handler still gets the 503 that says to retry; anything else is logged with a reference the page shows."""
    exc = sys.exc_info()[1]
    if outage.is_database_outage(exc):
        return outage.unavailable(request)
    reference = error_reference()
    logger.error("server error, reference %s: %s %s", reference, request.method, request.path, exc_info=exc)
    response: HttpResponse
    if wants_json(request):
        detail = gettext("Something went wrong on our side. If it keeps happening, give your administrator "
                         "this reference: %(reference)s.") % {"reference": reference}
        response = JsonResponse({"detail": detail, "reference": reference}, status=500)
    else:
        response = HttpResponse(render_to_string("500.html", {"reference": reference}), status=500)
    response._has_been_logged = True  # type: ignore[attr-defined]  # logged above, with the reference
    return response


def _back_to(request: HttpRequest) -> str:
    """The page the refused form was on (the Referer, when it is this site's), else the start page."""
    referer = request.headers.get("Referer", "")
    if referer and url_has_allowed_host_and_scheme(referer, allowed_hosts={request.get_host()},
                                                   require_https=request.is_secure()):
        parts = urlsplit(referer)
        path = "/" + parts.path.lstrip("/")  # never "//host/...", which a browser reads as another site
        return path + (f"?{parts.query}" if parts.query else "")
    return "/"


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """Django's CSRF_FAILURE_VIEW: a form sent from a page that had expired (open too long, or signed in or out
    in another tab). Django logs the reason (django.security.csrf); the reader gets the next step."""
    if wants_json(request):
        detail = gettext("This page has expired. Reload the page and try again.")
        return JsonResponse({"detail": detail, "error": detail}, status=403)
    return render(request, "403_csrf.html", {"back": _back_to(request)}, status=403)
