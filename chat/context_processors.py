"""What chat tells the shared page layout, so kb's navigation need not import chat."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from django.http import HttpRequest

from chat.review.gaps import may_view_gaps
from chat.selectors import is_reviewer


def review_access(request: HttpRequest) -> dict[str, Callable[[], bool]]:
    """`may_review` and `may_view_gaps`: whether the signed-in person may open the review desk and the
    content gaps. Callables, so the lookups run only on pages that draw the navigation."""
    user = getattr(request, "user", None)
    return {"may_review": partial(is_reviewer, user), "may_view_gaps": partial(may_view_gaps, user)}
