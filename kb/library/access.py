"""The one place that knows the sharing rules of documents and folders (on accounts' principals).

Retrieval puts the principals' overlap inside every SQL subquery (search.retrieval); the viewer, the APIs,
the admin and the answers go through `visible_documents` / `may_read`, and every change through the API or
the admin through `staff_may`.
"""

from __future__ import annotations

from typing import Any

from django.db import connection, transaction
from django.db.models import Q, QuerySet

from accounts.acl import (
    EVERYONE,
    group_principal,
    is_active_user,
    principals_admit,
    principals_common,
    readable_filter,
    user_principal,
)
from kb.library.events import access_changed
from kb.library.models import Chunk, Document, Folder


def document_principals(document: Document) -> list[str]:
    """Who may read `document`: its folder's grants when it inherits them, else its own. The folder
    is read afresh: an instance loaded before `hold_folder_grants` may hold an old `public`."""

    folder_id = document.folder_id if document.inherit_access else None
    source: Any = document if folder_id is None else Folder.objects.get(pk=folder_id)
    if source.public:
        return [EVERYONE]
    groups = source.groups.values_list("pk", flat=True)
    users = source.users.values_list("pk", flat=True)
    return sorted([*(group_principal(pk) for pk in groups), *(user_principal(pk) for pk in users)])


def visible_documents(user: Any) -> QuerySet[Document]:

    return Document.objects.filter(readable_filter(user))


def group_documents(group_id: int) -> QuerySet[Document]:
    """Documents a member of the group may read through it alone (the group's and everyone's), read as
    `visible_documents` reads a user's: what a review grant for the group opens (chat.review.scope)."""

    return Document.objects.filter(acl__overlap=[EVERYONE, group_principal(group_id)])


def folder_documents(folder_id: int) -> QuerySet[Document]:
    """Documents whose readers are the folder's: those in it that take its access (not those with their own)."""

    return Document.objects.filter(folder_id=folder_id, inherit_access=True)


def hold_folder_grants(folder_id: int | None) -> bool:
    """Keep a folder's grants as they are until this transaction ends (its row FOR SHARE), before
    reading them for a document; False when the folder is gone.

    Changing the grants locks the row FOR UPDATE first (kb.library.services.folder_set_access; the admin's
    UPDATE of the row conflicts too), so a change and a reader serialise: either the reader waits
    and reads the new grants, or the change waits until the reader's document is committed and
    then re-derives it with the other inheriting documents. Without it an upload still open kept
    the grants it had read (issue 28). Uploads into one folder share the lock and run side by side.
    Take it before any document row lock, as the change does, so the two never deadlock.
    """
    if folder_id is None:
        return True
    with connection.cursor() as cursor:  # Django's select_for_update has no FOR SHARE
        cursor.execute("SELECT 1 FROM kb_folder WHERE id = %s FOR SHARE", [folder_id])
        return cursor.fetchone() is not None


@transaction.atomic
def document_sync_acl(*, document: Document) -> list[str]:
    """Recompute a document's principals from its grants and copy them onto its chunks (no re-embedding).

    While a re-upload waits to be indexed (`pending_acl` set), the grants describe the new
    version: they become its pending audience, and the text now served may only narrow to
    them, so a revocation holds at once while a widening waits for the new text.
    """

    hold_folder_grants(document.folder_id if document.inherit_access else None)
    principals = document_principals(document)
    current, pending = Document.objects.select_for_update().filter(pk=document.pk).values_list("acl", "pending_acl").get()
    if pending is None:
        served, pending = principals, None
    else:
        served, pending = principals_common(current, principals), principals
    Document.objects.filter(pk=document.pk).update(acl=served, pending_acl=pending)
    if Chunk.objects.filter(document_id=document.pk).exclude(acl=served).update(acl=served):
        transaction.on_commit(lambda: access_changed.send(sender=document_sync_acl, document_ids=[document.pk]))
    document.acl, document.pending_acl = served, pending
    return served


@transaction.atomic
def document_stage_acl(*, document: Document) -> list[str]:
    """Keep a new version's audience aside (`pending_acl`) until its chunks replace the served
    ones (kb.library.ingest.indexing): the old text never reaches the new audience, and a version
    that fails to index leaves the old one with its old audience."""

    hold_folder_grants(document.folder_id if document.inherit_access else None)
    principals = document_principals(document)
    Document.objects.filter(pk=document.pk).update(pending_acl=principals)
    document.pending_acl = principals
    return principals


def folders_readable(user: Any) -> QuerySet[Folder]:
    """Folders whose own grants admit `user`: who reads the documents that inherit them."""

    if not is_active_user(user):
        return Folder.objects.none()
    mine = Q(public=True) | Q(users=user) | Q(groups__in=user.groups.all())
    return Folder.objects.filter(pk__in=Folder.objects.filter(mine).values("pk"))


def visible_folders(user: Any) -> QuerySet[Folder]:
    """Folders `user` may know of: those they may read, and those holding a document they may read."""

    if not is_active_user(user):
        return Folder.objects.none()
    holding = Folder.objects.filter(readable_filter(user, through="documents__")).values("pk")
    return Folder.objects.filter(Q(pk__in=folders_readable(user).values("pk")) | Q(pk__in=holding))


def may_read(user: Any, obj: Document | Folder) -> bool:
    """Read access to all of one object. A folder: its own grants admit `user`. A document: its served
    principals admit them and, while a new version waits to be indexed, its pending ones too, since
    that version's file is already stored (as the download rule, kb.library.selectors.document_file_get)."""

    if isinstance(obj, Document):
        return principals_admit(obj.acl, user) and (obj.pending_acl is None or principals_admit(obj.pending_acl, user))
    return folders_readable(user).filter(pk=obj.pk).exists()


def staff_may(user: Any, permission: str, obj: Document | Folder | None = None) -> bool:
    """The one rule for every change through the API or the admin: active staff holding the Django model
    permission for that action (`"kb.change_folder"`) and able to read the object (`may_read`).
    Superusers pass; nobody else manages what they cannot read. Without `obj`: whether they hold the
    permission at all, to refuse before looking anything up."""
    if not is_active_user(user) or not user.is_staff:
        return False
    if user.is_superuser:
        return True
    return bool(user.has_perm(permission)) and (obj is None or may_read(user, obj))
