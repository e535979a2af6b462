"""The project's own pages: /healthz and the last-resort error page. The library's pages are in
kb.library.views, chat's (Ask, Review) in chat.views."""

from __future__ import annotations

import sys

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from kb import outage
from kb.health import health_report, public_summary, sources_report


def server_error(request: HttpRequest) -> HttpResponse:
    """Django's last resort for an uncaught error (handler500). A database out of reach that escaped every
    handler (raised in a middleware, or while a response was being written) still gets the 503 that
    says to retry."""
    if outage.is_database_outage(sys.exc_info()[1]):
        return outage.unavailable(request)
    return defaults.server_error(request)


@require_GET
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    report = health_report()
    body = {**report, "sources": sources_report(request.user)} if request.user.is_staff else public_summary(report)
    return JsonResponse(body, status=200 if report["ok"] else 503)
