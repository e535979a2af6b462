"""/api/documents and /api/folders: what the library page and the admin do, for scripts.

Handlers parse, call one selector or service of kb.library.selectors / kb.library.services, and serialize:
the visibility, upload, replacement and access rules live there, so the API cannot drift
from the page. Changing anything (upload, retry, re-index, access, delete, folders) follows
the staff rule, kb.library.access.staff_may: the Django model permission for that action and read
access to the document or folder (superusers: anything they can reach). To anyone who is not
staff these endpoints answer 404, as the page does; staff lacking the permission, or asking to
change what they cannot read, get 403; what they cannot see at all is 404, like a missing one.
Tokens need `documents:read` to read and `documents:write` to change anything.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal

from django.http import Http404, HttpRequest
from django.utils.translation import gettext
from ninja import File, Form, Query, Router, Schema, Status
from ninja.errors import HttpError
from ninja.files import UploadedFile
from pydantic import Field, field_validator

from accounts.acl import is_active_user, principals_admit
from accounts.auth import api_auth
from accounts.models import Scope
from kb.library.access import staff_may
from kb.library.forms import readers_of, upload_store, upload_target_of
from kb.library.models import Document, Folder
from kb.library.selectors import (
    document_get,
    document_get_followable,
    document_index_version,
    document_is_stale,
    document_list,
    folder_get,
    folder_grants_shown,
    folder_row,
    library_folders,
    user_can_manage_documents,
)
from kb.library.services import (
    UploadRejected,
    document_delete,
    document_reindex,
    document_retry,
    document_set_access,
    folder_create,
    folder_delete,
    folder_set_access,
)
from kb.schemas import ANY, BODY, NO_NUL, NOT_FOUND, PARAMS, ErrorOut, StrictIn

READ, WRITE = api_auth(Scope.DOCUMENTS_READ), api_auth(Scope.DOCUMENTS_WRITE)
documents = Router(tags=["documents"])
folders = Router(tags=["folders"])

StatusName = Literal["queued", "extracting", "chunking", "embedding", "ready", "failed"]


# --------------------------------------------------------------------------- schemas


class IndexVersionOut(Schema):
    embedding_model: str = Field(examples=["all-MiniLM-L6-v2"])
    embedding_dimensions: int = Field(examples=[384])
    pipeline_version: int = Field(examples=[7])
    extractor_version: int = Field(examples=[4])


class AccessIn(StrictIn):
    """Who may read. `inherit`: the folder's readers (only for a document in a folder); otherwise
    `public` (everyone) or the listed groups and people (by id; at least one)."""

    inherit: bool = Field(default=False, examples=[False])
    public: bool = Field(default=False, examples=[False])
    groups: list[int] = Field(default_factory=list, examples=[[3, 5]])
    users: list[int] = Field(default_factory=list, examples=[[]])


class AccessOut(Schema):
    inherit: bool
    public: bool
    groups: list[int]
    users: list[int]


class DocumentOut(Schema):
    id: int = Field(examples=[42])
    title: str = Field(examples=["Expense policy"])
    filename: str = Field(examples=["expense-policy.pdf"])
    mime_type: str = Field(examples=["application/pdf"])
    size: int = Field(description="Bytes of the original file", examples=[183204])
    sha256: str = Field(description="SHA-256 of the stored file; empty while a new version waits to be indexed "
                        "and the caller may not read that version")
    folder: int | None = Field(examples=[3])
    folder_name: str | None = Field(examples=["Finance"])
    status: StatusName = Field(examples=["ready"])
    language: str = Field(description="The text's language (ISO 639-1): detected at indexing, or set by an admin",
                          examples=["de"])
    failed_stage: str = Field(description="The stage a failed document stopped in", examples=[""])
    failure_reason: str = Field(description="Why it failed, in words", examples=[""])
    chunk_count: int = Field(examples=[18])
    token_total: int = Field(examples=[2950])
    token_max: int = Field(examples=[199])
    embedded: int = Field(description="Chunks embedded so far while embedding", examples=[18])
    to_embed: int = Field(examples=[18])
    index_version: IndexVersionOut
    stale: bool = Field(description="Ready, but indexed by another model or pipeline version: re-index it")
    access: AccessOut | None = Field(description="Who may read it; shown to document managers only")
    url: str = Field(examples=["/documents/42/"])
    download_url: str = Field(examples=["/documents/42/download"])
    created_at: datetime
    updated_at: datetime
    indexed_at: datetime | None


class DocumentPage(Schema):
    count: int = Field(description="Documents matching the filters, over all pages", examples=[130])
    limit: int = Field(examples=[50])
    offset: int = Field(examples=[0])
    items: list[DocumentOut]


class DocumentFilter(Schema):
    status: StatusName | None = Field(default=None, description="Only documents in this state")
    folder: str = Field(default="", pattern=r"^(\d+|none)?$", description="A folder id, or `none` for no folder")
    stale: bool | None = Field(default=None, description="true: only stale ready documents; false: all but those")
    updated_since: datetime | None = Field(default=None, description="Changed at or after this time (ISO 8601)")
    language: str = Field(default="", pattern=r"^([a-z]{2,3})?$",
                          description="Only documents in this language (ISO 639-1, e.g. `de`)")
    q: str = Field(default="", max_length=200, pattern=NO_NUL, description="Words in the title")
    limit: int = Field(default=50, ge=1, le=500)
    offset: int = Field(default=0, ge=0, le=2**31 - 1)

    @field_validator("updated_since", mode="before")
    @classmethod
    def _iso_only(cls, value: Any) -> Any:
        """pydantic would read `0.5` as seconds since 1970; the schema promises a date-time."""
        if isinstance(value, str) and value.strip().lstrip("+-").replace(".", "", 1).isdigit():
            raise ValueError("give a date-time such as 2026-01-31T12:00:00Z, not a number")
        return value

    @field_validator("updated_since")
    @classmethod
    def _in_utc(cls, value: datetime | None) -> datetime | None:
        """ISO 8601 allows offsets that PostgreSQL refuses (past 15:59, which was a 500): the same instant in UTC."""
        if value is None or value.tzinfo is None:
            return value
        try:
            return value.astimezone(UTC)
        except OverflowError:
            raise ValueError("the date-time is out of range") from None


class UploadForm(Schema):
    folder: str = Field(default="", pattern=r"^\d*$", description="Folder id; empty: no folder", examples=["3"])
    access: Literal["", "folder", "everyone", "restricted"] = Field(
        default="",
        description="folder: the folder's readers (default with a folder); everyone (default without one); "
        "restricted: only `groups` and `users`",
        examples=["restricted"],
    )
    groups: list[int] = Field(default_factory=list, description="Group ids, with access=restricted", examples=[[3]])
    users: list[int] = Field(default_factory=list, description="Person ids, with access=restricted", examples=[[]])


class UploadItemOut(Schema):
    filename: str = Field(examples=["expense-policy.pdf"])
    created: bool = Field(description="A new document (false: an existing one was replaced or was the same)")
    queued: bool = Field(description="New content queued for indexing (false: identical content was already there)")
    error: str | None = Field(description="Why this file was refused; nothing of it was stored", examples=[None])
    document: DocumentOut | None


class UploadOut(Schema):
    items: list[UploadItemOut]


class FolderIn(StrictIn):
    # At least one visible character, and no NUL (NO_NUL).
    name: str = Field(min_length=1, max_length=200, pattern=r"^[^\x00]*[^\s\x00][^\x00]*$", examples=["Finance"])
    public: bool = Field(default=False, examples=[False])
    groups: list[int] = Field(default_factory=list, examples=[[3]])
    users: list[int] = Field(default_factory=list, examples=[[]])


class FolderAccessIn(StrictIn):
    public: bool = Field(default=False, examples=[False])
    groups: list[int] = Field(default_factory=list, examples=[[3]])
    users: list[int] = Field(default_factory=list, examples=[[]])


class FolderOut(Schema):
    id: int | Literal["none"] = Field(description="`none` stands for documents outside any folder", examples=[3])
    name: str = Field(examples=["Finance"])
    count: int = Field(description="Documents in it that the caller may read", examples=[12])
    access: AccessOut | None = Field(
        description="Who reads its documents; shown to superusers and to document managers who may read the folder"
    )




# --------------------------------------------------------------------------- helpers


def _allow(request: HttpRequest, permission: str, obj: Document | Folder | None = None) -> None:
    """The staff rule (kb.library.access.staff_may). As on the page, to anyone who is not staff these
    endpoints do not exist (404); staff without `permission`, or who may not read `obj`, get 403."""
    user = request.user
    if not (is_active_user(user) and user.is_staff):
        raise Http404("Not Found")
    if not staff_may(user, permission):
        raise HttpError(403, gettext("You need the %(permission)s permission for this.") % {"permission": permission})
    if obj is not None and not staff_may(user, permission, obj):
        raise HttpError(403, gettext("You may not change what you may not read."))


def _document_to_change(request: HttpRequest, pk: int, permission: str) -> Document:
    _allow(request, permission)
    document = document_get_followable(user=request.user, pk=pk)
    _allow(request, permission, document)
    return document


def _folder_to_change(request: HttpRequest, pk: int, permission: str) -> Folder:
    _allow(request, permission)
    folder_get(user=request.user, pk=pk)  # 404 for a folder they would not see listed
    folder = Folder.objects.get(pk=pk)
    _allow(request, permission, folder)
    return folder


def _ids(related: Any) -> list[int]:
    return sorted(item.pk for item in related.all())


def _sha256_shown(document: Document, user: Any) -> str:
    """The stored file's hash, but while a new version waits only to those who may read that version
    (its audience, as for the download, or who may change it): to its old audience it would confirm
    a guess of the new file. The served version's hash is not kept, so they get none."""
    shown = (document.pending_acl is None or principals_admit(document.pending_acl, user)
             or staff_may(user, "kb.change_document", document))
    return document.sha256 if shown else ""


def _document_out(document: Document, *, manage: bool, user: Any) -> dict[str, Any]:
    access = None
    if manage:
        access = {
            "inherit": document.inherit_access,
            "public": document.public,
            "groups": _ids(document.groups),
            "users": _ids(document.users),
        }
    return {
        "id": document.pk,
        "title": str(document),
        "filename": document.filename,
        "mime_type": document.mime_type,
        "size": document.size,
        "sha256": _sha256_shown(document, user),
        "folder": document.folder_id,
        "folder_name": document.folder.name if document.folder else None,
        "status": document.status,
        "language": document.language,
        "failed_stage": document.failed_stage,
        "failure_reason": document.failure_reason,
        "chunk_count": document.chunk_count,
        "token_total": document.token_total,
        "token_max": document.token_max,
        "embedded": document.progress_done,
        "to_embed": document.progress_total,
        "index_version": document_index_version(document),
        "stale": document_is_stale(document),
        "access": access,
        "url": f"/documents/{document.pk}/",
        "download_url": f"/documents/{document.pk}/download",
        "created_at": document.created_at,
        "updated_at": document.updated_at,
        "indexed_at": document.indexed_at,
    }


def _fresh(document: Document, user: Any) -> dict[str, Any]:
    """The document as a service left it, for a manager. Not looked up again: a manager may have just
    given it to groups they are not in themselves."""
    document.refresh_from_db()
    return _document_out(document, manage=True, user=user)


def _refuse_unknown_fields(request: HttpRequest) -> None:
    """422 for a form field the upload does not take: ninja would drop it silently, and a misspelt
    `access` would then store the files for everyone."""
    known = {*UploadForm.model_fields, "files"}
    unknown = sorted({*request.POST, *request.FILES} - known)
    if unknown:
        raise HttpError(422, gettext("unknown form field(s) %(unknown)s; the upload takes %(known)s")
                        % {"unknown": ", ".join(map(repr, unknown)), "known": ", ".join(sorted(known))})


# --------------------------------------------------------------------------- documents


@documents.get("", response={200: DocumentPage, **PARAMS}, auth=READ, summary="List documents")
def document_index(request: HttpRequest, filters: Query[DocumentFilter]) -> dict[str, Any]:
    """Documents the caller may read, newest title order, with filters and limit/offset paging.
    People who do not manage documents see only ready ones, as in the library."""
    manage = user_can_manage_documents(request.user)
    found = document_list(
        user=request.user,
        query=filters.q,
        folder=filters.folder,
        status=filters.status or "",
        stale=filters.stale,
        updated_since=filters.updated_since,
    )
    if filters.language:
        found = found.filter(language=filters.language)
    page = found[filters.offset : filters.offset + filters.limit]
    if manage:
        page = page.prefetch_related("groups", "users")
    return {
        "count": found.count(),
        "limit": filters.limit,
        "offset": filters.offset,
        "items": [_document_out(d, manage=manage, user=request.user) for d in page],
    }


@documents.post(
    "",
    response={200: UploadOut, 201: UploadOut, **BODY, **NOT_FOUND},
    auth=WRITE,
    summary="Upload one or many files",
)
def document_upload_many(
    request: HttpRequest, files: File[list[UploadedFile]], form: Form[UploadForm]
) -> Status[dict[str, Any]]:
    """Multipart upload (`files` repeated) into a folder with an access choice, the same rules as the
    library page: identical content is a no-op, a changed file with the same name replaces the old
    version. Each file succeeds or fails alone (`error`); 201 when at least one new document was made."""
    _allow(request, "kb.add_document")
    _refuse_unknown_fields(request)
    if form.folder and not any(row["id"] == int(form.folder) for row in library_folders(user=request.user)):
        # A folder they would not see listed is refused as a missing one (kb.library.forms.upload_target_of).
        raise HttpError(400, gettext("Folder %(id)s does not exist (any more); reload the folder list.") % {"id": form.folder})
    if form.access != "restricted" and (form.groups or form.users):
        # Readers named for another access would be silently ignored: say so rather than store something else.
        raise HttpError(400, gettext("groups and users name the readers only with access=restricted"))
    target = upload_target_of(folder_id=form.folder, access=form.access, group_ids=form.groups, user_ids=form.users)
    if target.folder is not None:
        _allow(request, "kb.add_document", target.folder)
    items = []
    for upload in files:
        name = upload.name or "upload"
        try:
            result = upload_store(target=target, upload=upload, uploaded_by=request.user)
        except UploadRejected as exc:
            items.append({"filename": name, "created": False, "queued": False, "error": str(exc), "document": None})
            continue
        items.append(
            {
                "filename": name,
                "created": result.created,
                "queued": result.queued,
                "error": None,
                "document": _fresh(result.document, request.user),
            }
        )
    return Status(201 if any(item["created"] for item in items) else 200, {"items": items})


@documents.get("/{pk}", response={200: DocumentOut, **PARAMS, **NOT_FOUND}, auth=READ, summary="One document")
def document_detail(request: HttpRequest, pk: int) -> dict[str, Any]:
    """Status, failure stage and reason, index version, counts. 404 for a document the caller may not read."""
    if user_can_manage_documents(request.user):
        return _fresh(document_get_followable(user=request.user, pk=pk), request.user)
    return _document_out(document_get(user=request.user, pk=pk), manage=False, user=request.user)


def _requeue(request: HttpRequest, pk: int, service: Callable[..., None]) -> Status[dict[str, Any]]:
    document = _document_to_change(request, pk, "kb.change_document")
    service(document=document)
    return Status(202, _fresh(document, request.user))


@documents.post(
    "/{pk}/retry", response={202: DocumentOut, 409: ErrorOut, **PARAMS, **NOT_FOUND}, auth=WRITE, summary="Retry a failed document"
)
def document_retry_one(request: HttpRequest, pk: int) -> Status[dict[str, Any]]:
    """Queue a failed document again; 409 when it has not failed."""
    return _requeue(request, pk, document_retry)


@documents.post(
    "/{pk}/reindex", response={202: DocumentOut, 409: ErrorOut, **PARAMS, **NOT_FOUND}, auth=WRITE, summary="Re-index a document"
)
def document_reindex_one(request: HttpRequest, pk: int) -> Status[dict[str, Any]]:
    """Index a ready (e.g. stale) or failed document again; 409 while it is being indexed."""
    return _requeue(request, pk, document_reindex)


@documents.put(
    "/{pk}/access", response={200: DocumentOut, **BODY, **NOT_FOUND}, auth=WRITE, summary="Change who may read"
)
def document_access(request: HttpRequest, pk: int, payload: AccessIn) -> dict[str, Any]:
    """Takes effect in search at once: the document's chunks carry the new readers in the same transaction."""
    document = _document_to_change(request, pk, "kb.change_document")
    groups, users = readers_of(group_ids=payload.groups, user_ids=payload.users)
    if payload.inherit and document.folder_id is None:
        raise HttpError(400, gettext("The document is in no folder, so it has no folder access to inherit."))
    if not (payload.inherit or payload.public or groups or users):
        raise HttpError(400, gettext("Choose inherit, public, or at least one group or person who may read the document."))
    document_set_access(document=document, inherit=payload.inherit, public=payload.public, groups=groups, users=users)
    return _fresh(document, request.user)


@documents.delete("/{pk}", response={204: None, **PARAMS, **NOT_FOUND}, auth=WRITE, summary="Delete a document")
def document_remove(request: HttpRequest, pk: int) -> Status[None]:
    """Removes the document, its passages and its file."""
    document_delete(document=_document_to_change(request, pk, "kb.delete_document"))
    return Status(204, None)


# --------------------------------------------------------------------------- folders


def _folder_access(folder: Folder) -> dict[str, Any]:
    return {"inherit": False, "public": folder.public, "groups": _ids(folder.groups), "users": _ids(folder.users)}


def _folder_out(row: dict[str, Any], *, user: Any, shown: bool | None = None) -> dict[str, Any]:
    """A folder row with its grants for those who may see them (kb.library.selectors.folder_grants_shown), or
    `shown` for one who just set them."""
    folder = None
    if row["id"] != "none":
        folder = folder_grants_shown(user=user).filter(pk=row["id"]).prefetch_related("groups", "users").first()
        if folder is None and shown:
            folder = Folder.objects.prefetch_related("groups", "users").get(pk=row["id"])
    return {**row, "access": _folder_access(folder) if folder else None}


@folders.get("", response={200: list[FolderOut], **ANY}, auth=READ, summary="List folders")
def folder_index(request: HttpRequest) -> list[dict[str, Any]]:
    """Folders with how many documents the caller may read in each. Superusers see every folder and its
    readers; other managers the folders they may read or that hold something they may read, with the
    readers of those they may read; others only folders that hold something they may read."""
    rows = library_folders(user=request.user)
    grants = {f.pk: f for f in folder_grants_shown(user=request.user).prefetch_related("groups", "users")}
    return [{**row, "access": _folder_access(grants[row["id"]]) if row["id"] in grants else None} for row in rows]


@folders.post("", response={201: FolderOut, 409: ErrorOut, **BODY, **NOT_FOUND}, auth=WRITE, summary="Create a folder")
def folder_add(request: HttpRequest, payload: FolderIn) -> Status[dict[str, Any]]:
    """A new folder; private unless `public`. 409 when the name is taken."""
    _allow(request, "kb.add_folder")
    groups, users = readers_of(group_ids=payload.groups, user_ids=payload.users)
    folder = folder_create(name=payload.name, public=payload.public, groups=groups, users=users)
    return Status(201, _folder_out(folder_row(user=request.user, folder=folder), user=request.user, shown=True))


@folders.get("/{pk}", response={200: FolderOut, **PARAMS, **NOT_FOUND}, auth=READ, summary="One folder")
def folder_detail(request: HttpRequest, pk: int) -> dict[str, Any]:
    """A folder the caller would see in the list (404 otherwise), with its count of readable documents."""
    return _folder_out(folder_get(user=request.user, pk=pk), user=request.user)


@folders.put(
    "/{pk}/access", response={200: FolderOut, **BODY, **NOT_FOUND}, auth=WRITE, summary="Change a folder's readers"
)
def folder_access(request: HttpRequest, pk: int, payload: FolderAccessIn) -> dict[str, Any]:
    """Every document that inherits the folder's access follows, in the same transaction. Needs
    `kb.change_folder` and read access to the folder (403 otherwise)."""
    folder = _folder_to_change(request, pk, "kb.change_folder")
    groups, users = readers_of(group_ids=payload.groups, user_ids=payload.users)
    folder_set_access(folder=folder, public=payload.public, groups=groups, users=users)
    return _folder_out(folder_row(user=request.user, folder=folder), user=request.user, shown=True)


@folders.delete("/{pk}", response={204: None, 409: ErrorOut, **PARAMS, **NOT_FOUND}, auth=WRITE, summary="Delete an empty folder")
def folder_remove(request: HttpRequest, pk: int) -> Status[None]:
    """Refused (409) while the folder holds documents: they would lose the access they inherit."""
    folder_delete(folder=_folder_to_change(request, pk, "kb.delete_folder"))
    return Status(204, None)
