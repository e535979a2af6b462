"""`may_view_gaps`: whether a person may open content gaps (chat.review.gaps), for the admin index's link."""

from __future__ import annotations

from typing import Any

from django import template

from chat.review.gaps import may_view_gaps as _may_view_gaps

register = template.Library()


@register.filter
def may_view_gaps(user: Any) -> bool:
    return _may_view_gaps(user)
