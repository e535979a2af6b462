"""Principals: what a person is, for the sharing rule (`everyone`, `u:<user id>`, `g:<group id>`).

A document's readers are a set of principals, stored on the document and copied onto each of its chunks; a
user may read a row when the row's principals overlap theirs. This module knows only principals and people;
the rule on kb's documents and folders built on them is kb.library.access.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q

EVERYONE = "everyone"


def group_principal(group_id: int) -> str:
    return f"g:{group_id}"


def user_principal(user_id: int) -> str:
    return f"u:{user_id}"


def is_active_user(user: Any) -> bool:
    """Signed in and not deactivated: anyone else is nobody on every surface."""
    return user is not None and user.is_authenticated and user.is_active


def user_principals(user: Any) -> list[str]:
    """What `user` is: everyone, themselves, their groups. Anonymous users are nobody."""
    if not is_active_user(user):
        return []
    groups = user.groups.values_list("pk", flat=True)
    return [EVERYONE, user_principal(user.pk), *(group_principal(pk) for pk in groups)]


def readable_filter(user: Any, *, through: str = "") -> Q:
    """The sharing rule as a filter on rows that carry an `acl` (documents, chunks), or on rows
    that reach such rows `through` a relation (`"documents__"` from a folder)."""
    return Q(**{f"{through}acl__overlap": user_principals(user)})


def principals_common(first: list[str], second: list[str]) -> list[str]:
    """Principals both lists admit (`everyone` admits anyone). It can only narrow: a user
    admitted by one list through a group and by the other by name is left out, the safe side."""
    if EVERYONE in first:
        return sorted(second)
    if EVERYONE in second:
        return sorted(first)
    return sorted(set(first) & set(second))


def principals_admit(principals: list[str] | None, user: Any) -> bool:
    if not principals:
        return False
    return not set(principals).isdisjoint(user_principals(user))
