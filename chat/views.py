"""Chat's browser pages: the Ask page, the review desk and content gaps. The rules live in chat.selectors
and chat.gaps; the answers arrive over chat's websocket and REST API, which the pages' scripts call."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from chat import gaps as content_gaps
from chat.selectors import is_reviewer


@login_required
def ask(request: HttpRequest) -> HttpResponse:
    """The Ask page. The chat backend wires in through the data-* hooks of chat/ask.html."""
    return render(request, "chat/ask.html", {"max_question": 2000})


@login_required
def review(request: HttpRequest) -> HttpResponse:
    """The review desk for support staff; everyone else gets the same 404 as for a missing page."""
    if not is_reviewer(request.user):
        raise Http404("No such page")
    flagged = request.GET.get("filter") == "flagged"
    return render(request, "chat/review.html", {"flagged": flagged})


@login_required
def gaps(request: HttpRequest) -> HttpResponse:
    """Content gaps by topic (chat.gaps) for superusers and staff holding chat.view_contentgaps; everyone
    else gets the same 404 as for a missing page. `?days=N` (1-366) sets the window."""
    if not content_gaps.may_view_gaps(request.user):
        raise Http404("No such page")
    days = request.GET.get("days", "")
    days_n = int(days) if days.isdigit() and len(days) <= 3 and 1 <= int(days) <= 366 else content_gaps.DAYS
    report = content_gaps.gaps(viewer=request.user, since=timezone.now() - timedelta(days=days_n))
    return render(request, "chat/gaps.html", {"report": report, "days": days_n,
                                              "max_questions": content_gaps.MAX_QUESTIONS})
