"""Chat's browser pages: the Ask page and the review desk. The rules live in chat.selectors;
the answers arrive over chat's websocket and REST API, which the pages' scripts call."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

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
