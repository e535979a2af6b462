"""The one place that knows the sharing rules.

A document's readers are a set of principals (`everyone`, `g:<group id>`, `u:<user id>`),
stored on the document and copied onto each of its chunks; a user may read a row when
the row's principals overlap theirs. Retrieval puts that overlap inside every SQL
subquery, the viewer and API go through `visible_documents`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import transaction

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from kb.models import Document

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


def document_principals(document: Document) -> list[str]:
    """Who may read `document`: its folder's grants when it inherits them, else its own."""
    source: Any = document.folder if (document.inherit_access and document.folder_id) else document
    if source.public:
        return [EVERYONE]
    groups = source.groups.values_list("pk", flat=True)
    users = source.users.values_list("pk", flat=True)
    return sorted([*(group_principal(pk) for pk in groups), *(user_principal(pk) for pk in users)])


def visible_documents(user: Any) -> QuerySet[Document]:
    from kb.models import Document

    return Document.objects.filter(acl__overlap=user_principals(user))


@transaction.atomic
def document_sync_acl(*, document: Document) -> list[str]:
    """Recompute a document's principals and copy them onto its chunks (no re-embedding)."""
    from kb.models import Chunk, Document

    principals = document_principals(document)
    Document.objects.filter(pk=document.pk).update(acl=principals)
    Chunk.objects.filter(document_id=document.pk).update(acl=principals)
    document.acl = principals
    return principals
