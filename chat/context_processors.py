"""What chat tells the shared page layout, so kb's navigation need not import chat."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from django.http import HttpRequest

from chat.selectors import is_reviewer


def review_access(request: HttpRequest) -> dict[str, Callable[[], bool]]:
    """`may_review`: whether the signed-in person may open the review desk. A callable, so the
    group lookup runs only on pages that draw the navigation, as before."""
    return {"may_review": partial(is_reviewer, getattr(request, "user", None))}
