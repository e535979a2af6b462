"""The project's own pages: /healthz (the error pages are kb.errors'). The library's pages are in
kb.library.views, chat's (Ask, Review) in chat.views."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from kb.health import health_report, public_summary, sources_report


@require_GET
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    report = health_report()
    body = {**report, "sources": sources_report(request.user)} if request.user.is_staff else public_summary(report)
    return JsonResponse(body, status=200 if report["ok"] else 503)
