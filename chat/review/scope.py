"""Review scope: what a support reviewer's grants open on the review desk, who may give a grant, and the access log.

A grant (chat.models.ReviewGrant) for a group covers the documents that group may read (kb.library.access.group_documents);
one for a folder, the documents in it that take its access (kb.library.access.folder_documents). The review desk shows an
answer in full when every document it drew on is readable by the reviewer or covered by one of their grants, and
writes one access-log row (chat.models.ReviewAccess) for each answer it showed through a grant. Nothing else reads
grants: the viewer, search, the chat and the admin keep the reviewer's own access.

Giving a grant follows the staff rule (kb.library.access.staff_may): superusers any; other staff holding the model permission
only for groups they belong to and folders they may read, so nobody opens more than they read themselves.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db.models import Q, QuerySet

from accounts.acl import is_active_user
from chat.models import ReviewAccess, ReviewGrant
from chat.review.spreadsheet import csv_lines
from kb.library.access import folder_documents, folders_readable, group_documents
from kb.library.models import Document, Folder


@dataclass
class ReviewScope:
    """A reviewer's grants as read at the start of one request: a grant revoked later counts from the next."""

    reviewer: Any
    grants: list[ReviewGrant] = field(default_factory=list)

    def covering(self, documents: set[int]) -> dict[int, list[str]]:
        """Of `documents`, those the grants cover, each with the scopes of the grants covering it (a query a grant)."""
        covered: dict[int, list[str]] = {}
        if not documents:
            return covered
        for grant in self.grants:
            rows = group_documents(grant.group_id) if grant.group_id else folder_documents(grant.folder_id or 0)
            for pk in rows.filter(pk__in=documents).values_list("pk", flat=True):
                covered.setdefault(pk, []).append(grant.scope)
        return covered

    def documents(self) -> QuerySet[Document]:
        """covering() as a query: every document a grant covers (none without grants), for lists and counts."""
        covered = [Q(pk__in=(group_documents(grant.group_id) if grant.group_id
                             else folder_documents(grant.folder_id or 0)).values("pk")) for grant in self.grants]
        return Document.objects.filter(functools.reduce(operator.or_, covered)) if covered else Document.objects.none()

    def folder_ids(self) -> list[int]:
        """The folders the grants name: a reviewer knows of those, whether or not they read them."""
        return [grant.folder_id for grant in self.grants if grant.folder_id]


def is_reviewer(user: Any) -> bool:
    """Support staff: members of KB_REVIEW_GROUP (default `support`), and superusers."""
    if not is_active_user(user):
        return False
    return bool(user.is_superuser or user.groups.filter(name=settings.KB_REVIEW_GROUP).exists())


def review_scope(reviewer: Any) -> ReviewScope:
    """The grants of `reviewer` that count: none unless they are a reviewer now."""
    if not is_reviewer(reviewer):
        return ReviewScope(reviewer)
    return ReviewScope(reviewer, list(ReviewGrant.objects.filter(reviewer=reviewer).select_related("group", "folder")))


def access_log(reviewer: Any, shown: Iterable[tuple[int, list[str]]], *, surface: str) -> None:
    """Write one access-log row for each answer (id, grant scopes) shown to `reviewer` through grants."""
    ReviewAccess.objects.bulk_create([
        ReviewAccess(reviewer=reviewer, reviewer_name=reviewer.get_username(), answer=answer,
                     surface=surface, grants="; ".join(sorted(set(grants))))
        for answer, grants in shown
    ])


def grantable_groups(user: Any) -> QuerySet[Group]:
    """Groups `user` may grant review of: all for superusers, else the groups they belong to."""
    if user.is_superuser:
        return Group.objects.all()
    return Group.objects.filter(pk__in=user.groups.values("pk")) if is_active_user(user) else Group.objects.none()


def grantable_folders(user: Any) -> QuerySet[Folder]:
    """Folders `user` may grant review of: all for superusers, else those they may read."""
    return Folder.objects.all() if user.is_superuser else folders_readable(user)


def grants_manageable(user: Any) -> QuerySet[ReviewGrant]:
    """Grants `user` may see, change and revoke: those they could have given."""
    grants = ReviewGrant.objects.all()
    if user.is_superuser:
        return grants
    return grants.filter(group__in=grantable_groups(user)) | grants.filter(folder__in=grantable_folders(user))


def reviewers() -> QuerySet[Any]:
    """Who may hold a grant: active members of the review group."""
    return get_user_model().objects.filter(is_active=True, groups__name=settings.KB_REVIEW_GROUP).distinct()


CSV_HEADER = ("at", "reviewer", "answer", "surface", "grants")


def access_log_csv(rows: QuerySet[ReviewAccess]) -> Iterator[str]:
    """The access log as CSV lines, header first, oldest first."""
    records = ((row.at.isoformat(), row.reviewer_name, row.answer, row.surface, row.grants)
               for row in rows.order_by("at", "pk").iterator())
    return csv_lines(itertools.chain([CSV_HEADER], records))
