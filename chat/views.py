"""Chat's browser pages: the Ask page, the review desk and content gaps. The rules live in chat.selectors
and chat.review; the answers arrive over chat's websocket and REST API, which the pages' scripts call."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.http import urlencode
from django.utils.translation import gettext_lazy

from chat.review import curated as curated_answers
from chat.review import desk
from chat.review import gaps as content_gaps
from chat.selectors import is_reviewer


@login_required
def ask(request: HttpRequest) -> HttpResponse:
    """The Ask page. The chat backend wires in through the data-* hooks of chat/ask.html."""
    return render(request, "chat/ask.html", {"max_question": 2000})


REVIEW_QUEUES = (("unreviewed", gettext_lazy("Unreviewed")), ("closest", gettext_lazy("Closest matches")),
                 ("rated_down", gettext_lazy("Rated down")),
                 ("refused", gettext_lazy("Refused")), ("flagged", gettext_lazy("Flagged")),
                 ("all", gettext_lazy("All answers")))


@login_required
def review(request: HttpRequest) -> HttpResponse:
    """The review desk for support staff; everyone else gets the same 404 as for a missing page. `?filter=` picks
    the queue (default unreviewed), `folder` and `q` narrow it; the counts come from chat.review.desk.review_counts."""
    if not is_reviewer(request.user):
        raise Http404("No such page")
    queue = request.GET.get("filter", "")
    queue = queue if queue in desk.QUEUES else "unreviewed"
    folder_id = request.GET.get("folder", "")
    folder = int(folder_id) if folder_id.isascii() and folder_id.isdigit() and len(folder_id) <= 18 and int(folder_id) > 0 else None
    search = request.GET.get("q", "").replace("\x00", "")[: desk.SEARCH_MAX].strip()
    counts = desk.review_counts(reviewer=request.user, queue=queue, folder=folder, search=search)
    narrow: dict[str, str | int] = {**({"folder": folder} if folder else {}), **({"q": search} if search else {})}
    tabs = [{"queue": name, "label": label, "count": counts.queues[name], "query": urlencode({"filter": name, **narrow})}
            for name, label in REVIEW_QUEUES]
    return render(request, "chat/review.html", {"queue": queue, "folder": folder, "search": search, "tabs": tabs,
                                                "counts": counts,
                                                "may_curate": curated_answers.may_curate(request.user)})


@login_required
def curated(request: HttpRequest) -> HttpResponse:
    """The curated answers desk (chat.review.curated) for holders of chat.curate_answer; everyone else gets the same 404
    as for a missing page. `?message=` (a review item) or `?topic=` with `q=` (a content-gap topic's questions)
    opens the form prefilled; the list and the form are chat/curated.js over /api/curated."""
    if not curated_answers.may_curate(request.user):
        raise Http404("No such page")
    return render(request, "chat/curated.html", {"max_text": curated_answers.MAX_TEXT})


@login_required
def gaps(request: HttpRequest) -> HttpResponse:
    """Content gaps by topic (chat.review.gaps) for superusers and staff holding chat.view_contentgaps; everyone
    else gets the same 404 as for a missing page. `?days=N` (1-366) sets the window."""
    if not content_gaps.may_view_gaps(request.user):
        raise Http404("No such page")
    days = request.GET.get("days", "")
    days_n = int(days) if days.isdigit() and len(days) <= 3 and 1 <= int(days) <= 366 else content_gaps.DAYS
    report = content_gaps.gaps(viewer=request.user, since=timezone.now() - timedelta(days=days_n))
    # "Write an answer for this" opens the curated answers desk with the topic's questions (those shown here).
    curate = curated_answers.may_curate(request.user)
    topics = [(topic, urlencode([("topic", topic.label), *(("q", q.text) for q in topic.examples)]) if curate else "")
              for topic in report.topics]
    return render(request, "chat/gaps.html", {"report": report, "topics": topics, "days": days_n,
                                              "max_questions": content_gaps.MAX_QUESTIONS})
