"""Reads over documents that more than one surface needs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from datetime import datetime
from typing import Any

from django.db.models import Count, Q, QuerySet
from django.http import Http404
from django.shortcuts import get_object_or_404

from accounts.acl import is_active_user, principals_admit
from kb.library.access import folders_readable, visible_documents, visible_folders
from kb.library.ingest.version import IndexVersion, current_index_version
from kb.library.models import Document, Folder


def document_index_version(document: Document) -> IndexVersion:
    return IndexVersion(
        embedding_model=document.embedding_model,
        embedding_dimensions=document.embedding_dimensions or 0,
        pipeline_version=document.pipeline_version or 0,
        extractor_version=document.extractor_version or 0,
        late_version=document.late_version or 0,
        multilingual_model=document.multilingual_model,
    )


def documents_stale(queryset: QuerySet[Document] | None = None) -> QuerySet[Document]:
    """Ready documents indexed under another model, dimension, pipeline, extractor, late-interaction version or
    multilingual space."""
    base = Document.objects.all() if queryset is None else queryset
    return base.filter(status=Document.Status.READY).exclude(Q(**asdict(current_index_version())))


def document_is_stale(document: Document) -> bool:
    return document.status == Document.Status.READY and document_index_version(document) != current_index_version()


# Reads for the browser UI --------------------------------------------------------
# Every read of a document on behalf of a person starts from kb.library.access.visible_documents,
# the one place that knows the sharing rules; nothing here re-states them.

TERMINAL_STATUSES = (Document.Status.READY, Document.Status.FAILED)


def document_get(*, user: Any, pk: int) -> Document:
    """The document if `user` may read it; Http404 otherwise, so a hidden document looks like a missing one."""
    return get_object_or_404(visible_documents(user).select_related("folder"), pk=pk)


def user_can_manage_documents(user: Any) -> bool:
    """Admins of the document store: superusers, and staff with the kb.add_document permission."""
    if not is_active_user(user):
        return False
    return bool(user.is_superuser or (user.is_staff and user.has_perm("kb.add_document")))


def documents_followable(user: Any) -> QuerySet[Document]:
    """Documents whose pipeline status `user` may follow and retry: what they may read, plus, for
    admins, what they uploaded themselves (an upload restricted to groups they are not in)."""
    readable = visible_documents(user)
    if not user_can_manage_documents(user):
        return readable
    return readable | Document.objects.filter(uploaded_by=user)


def documents_replaceable(uploader: Any) -> QuerySet[Document]:
    """What an upload by `uploader` may match as the same content or replace as a new version:
    only what they may read. No uploader means the operator (`manage.py ingest`, the demo): all."""
    return Document.objects.all() if uploader is None else visible_documents(uploader)


def document_file_get(*, user: Any, pk: int) -> Document:
    """The document whose stored file `user` may download. While a re-upload waits to be
    indexed the file is already the new version: its reader must be in its audience too."""
    document = document_get(user=user, pk=pk)
    if document.pending_acl is not None and not principals_admit(document.pending_acl, user):
        raise Http404("No such document")
    return document


def library_documents(*, user: Any, query: str = "", folder: str = "") -> QuerySet[Document]:
    """The library listing: documents `user` may read, filtered by title and folder.

    `folder` is a folder id, "none" for documents outside any folder, or "" for all.
    People who do not manage documents see only ready ones: the rest cannot be opened yet.
    """
    # The listing shows titles and states: never load whole texts for it.
    documents = visible_documents(user).select_related("folder").defer("canonical_text", "pages", "headings").order_by("title", "pk")
    if not user_can_manage_documents(user):
        documents = documents.filter(status=Document.Status.READY)
    if query.strip():
        documents = documents.filter(title__icontains=query.strip())
    if folder == "none":
        documents = documents.filter(folder__isnull=True)
    elif folder.isdigit():
        documents = documents.filter(folder_id=int(folder))
    return documents


def library_folders(*, user: Any) -> list[dict[str, Any]]:
    """Folders with how many documents `user` may read in each.

    Superusers see every folder. Other admins see the folders they may know of
    (kb.library.access.visible_folders: those they may read, which they may upload into, and those
    holding something they may read); everyone else only folders holding something they may
    read, so a folder name alone tells nobody what exists behind it.
    """
    grouped = library_documents(user=user).order_by().values("folder_id").annotate(n=Count("pk"))
    counts: dict[int | None, int] = {row["folder_id"]: row["n"] for row in grouped}
    if is_active_user(user) and user.is_superuser:
        listed = Folder.objects.all()
    elif user_can_manage_documents(user):
        listed = visible_folders(user)
    else:
        listed = Folder.objects.filter(pk__in=[pk for pk, n in counts.items() if pk is not None and n])
    folders = [{"id": f.pk, "name": f.name, "count": counts.get(f.pk, 0)} for f in listed.order_by("name")]
    if counts.get(None):
        folders.append({"id": "none", "name": "Not in a folder", "count": counts[None]})
    return folders


def document_status_rows(*, user: Any, ids: list[int]) -> list[dict[str, Any]]:
    """The pipeline state of the given documents that `user` may follow (the others are skipped silently)."""
    rows = documents_followable(user).filter(pk__in=ids).values(
        "pk", "title", "status", "failed_stage", "failure_reason", "chunk_count", "progress_done", "progress_total",
        "updated_at",
    )
    return [document_status_payload(row) for row in rows]


def document_status_payload(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "type": "document",
        "id": row["pk"],
        "title": row["title"],
        "status": row["status"],
        "stage": row["failed_stage"],
        "reason": row["failure_reason"],
        "chunks": row["chunk_count"],
        "embedded": row.get("progress_done", 0),
        "to_embed": row.get("progress_total", 0),
        "updated": row["updated_at"].isoformat() if row.get("updated_at") else "",
    }


def document_get_followable(*, user: Any, pk: int) -> Document:
    """A document `user` may follow and act on (retry, re-index); Http404 otherwise, as for a missing one."""
    return get_object_or_404(documents_followable(user).select_related("folder"), pk=pk)


def document_list(
    *,
    user: Any,
    query: str = "",
    folder: str = "",
    status: str = "",
    stale: bool | None = None,
    updated_since: datetime | None = None,
) -> QuerySet[Document]:
    """The library listing (same visibility) narrowed by status, index freshness and last change."""
    documents = library_documents(user=user, query=query, folder=folder)
    if status:
        documents = documents.filter(status=status)
    if stale is not None:
        stale_ids = documents_stale(documents).values("pk")
        documents = documents.filter(pk__in=stale_ids) if stale else documents.exclude(pk__in=stale_ids)
    if updated_since is not None:
        documents = documents.filter(updated_at__gte=updated_since)
    return documents


def folder_get(*, user: Any, pk: int) -> dict[str, Any]:
    """One folder as library_folders() lists it for `user`; Http404 when they would not see it there."""
    for folder in library_folders(user=user):
        if folder["id"] == pk:
            return folder
    raise Http404("No such folder")


def folder_row(*, user: Any, folder: Folder) -> dict[str, Any]:
    """`folder` as library_folders() lists it, for one who just changed it (they may no longer see it)."""
    count = library_documents(user=user, folder=str(folder.pk)).count()
    return {"id": folder.pk, "name": folder.name, "count": count}


def folder_grants_shown(*, user: Any) -> QuerySet[Folder]:
    """Folders whose grants (group and person ids) an admin is shown: superusers all, other admins
    those they may read, nobody else any."""
    if not user_can_manage_documents(user):
        return Folder.objects.none()
    return Folder.objects.all() if user.is_superuser else folders_readable(user)
