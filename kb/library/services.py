"""Writes to the document store: upload, access changes, re-queueing, deletion."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from typing import IO, Any

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.files import File
from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from accounts.acl import principals_admit
from kb import queues
from kb.library.access import document_stage_acl, document_sync_acl, hold_folder_grants, staff_may
from kb.library.events import publish_document_status
from kb.library.ingest.extract import UnsupportedFile, detect_mime
from kb.library.models import Chunk, Document, Folder
from kb.library.selectors import documents_replaceable, documents_stale
from kb.upkeep import Ended, Lease

HEAD_BYTES = 8192
MAX_NAME_CHARS = 255  # what file systems allow for one name; Document.filename holds 300


class UploadRejected(ValueError):
    """An upload refused before anything was stored; the message is shown to the uploader."""


@dataclass(frozen=True)
class UploadResult:
    document: Document
    created: bool  # a new document row
    queued: bool  # new content will be (re)indexed; False means the same content was already there


def _sha256(stream: IO[bytes]) -> str:
    digest = hashlib.sha256()
    stream.seek(0)
    for block in iter(partial(stream.read, 1 << 20), b""):
        digest.update(block)
    stream.seek(0)
    return digest.hexdigest()


def upload_validate(*, name: str, stream: IO[bytes], size: int) -> str:
    """The file's MIME type, or UploadRejected with the reason. Reads only the first bytes."""
    if len(name) > MAX_NAME_CHARS:
        raise UploadRejected(f"{name[:40]}…: the file name is {len(name):,} characters long; at most {MAX_NAME_CHARS}")
    if any(c in "/\\" or not c.isprintable() for c in name):
        raise UploadRejected(f"{name!r}: the file name holds a path separator or a control character")
    limit = settings.KB_MAX_UPLOAD_MB
    if size > limit * 1024 * 1024:
        raise UploadRejected(f"{name}: the file is {size / 1048576:.1f} MB; the limit is {limit} MB")
    if size == 0:
        raise UploadRejected(f"{name}: the file is empty")
    stream.seek(0)
    head = stream.read(HEAD_BYTES)
    stream.seek(0)
    try:
        return detect_mime(filename=name, head=head)
    except UnsupportedFile as exc:
        raise UploadRejected(str(exc)) from None


@transaction.atomic
def document_upload(
    *,
    name: str,
    stream: IO[bytes],
    size: int,
    folder: Folder | None = None,
    uploaded_by: Any = None,
    title: str = "",
    groups: Iterable[Group] | None = None,
    users: Iterable[Any] | None = None,
    public: bool | None = None,
    audience_default: str = "",
    enqueue: bool = True,
) -> UploadResult:
    """Store an upload and queue it for indexing.

    The same content again in the same folder is a no-op; a changed file with the same
    name replaces the previous version. Both match only documents the uploader may read
    (kb.library.selectors.documents_replaceable): anything else is neither named to them nor
    replaced, and the upload becomes a new document. A replaced version keeps its text and
    its audience until the new version's chunks replace them (indexing.replace_chunks);
    the new access waits in `pending_acl`, and a failed new version leaves it so.
    Access: explicit `public`/`groups`/`users` override the folder's grants. With
    `enqueue=False` the caller indexes it itself (`manage.py ingest --sync`).
    """
    mime = upload_validate(name=name, stream=stream, size=size)
    sha = _sha256(stream)
    # The folder first, as folder_set_access locks it: this upload reads the grants it is committed with.
    if not hold_folder_grants(folder.pk if folder else None):
        raise UploadRejected(f"{name}: the folder was deleted meanwhile; reload the folder list")
    if folder is not None and _acts_as_staff(uploaded_by) and not staff_may(uploaded_by, "kb.add_document", folder):
        raise UploadRejected(f"{name}: you may not upload into a folder you cannot read")
    same_place = documents_replaceable(uploaded_by).select_for_update().filter(folder=folder)
    existing = next((d for d in same_place.filter(sha256=sha) if _may_know_file(uploaded_by, d)), None)
    if existing is not None:
        return UploadResult(existing, created=False, queued=False)
    document = same_place.filter(filename=name).first()
    created = document is None
    if document is None:
        document = Document(folder=folder, filename=name)
    else:
        if _acts_as_staff(uploaded_by) and not staff_may(uploaded_by, "kb.change_document", document):
            raise UploadRejected(f"{name}: a document of that name is here already; replacing it needs the "
                                 "permission to change documents and access to both its versions")
        document.version += 1  # the row is locked: earlier runs of the pipeline now write nothing
        if document.file.name:  # a FieldFile is truthy exactly when it has a name
            transaction.on_commit(partial(document.file.storage.delete, document.file.name))
    # Without an explicit title the document's own (its H1, <title> or PDF metadata) is
    # taken when it is indexed; a new version may bring a new one.
    document.title = title
    document.mime_type = mime
    document.sha256 = sha
    document.size = size
    document.uploaded_by = uploaded_by
    document.audience_default = audience_default
    document.status = Document.Status.QUEUED
    document.failed_stage = ""
    document.failure_reason = ""
    document.file.save(name, File(stream, name=name), save=False)
    explicit = public is not None or groups is not None or users is not None
    document.inherit_access = not explicit and folder is not None
    document.public = bool(public) if explicit else folder is None
    document.save()
    if explicit:
        document.groups.set(list(groups or []))
        document.users.set(list(users or []))
    if created:
        document_sync_acl(document=document)
    else:
        document_stage_acl(document=document)
    if enqueue:
        _enqueue([document.pk])
    return UploadResult(document, created=created, queued=True)


def _acts_as_staff(uploader: Any) -> bool:
    """Uploads through the page and the API are by staff, held to the staff rule (kb.library.access.staff_may).
    No uploader is the operator (`manage.py ingest`, the demo), who may do anything; a non-staff
    uploader comes only from code calling this directly, and matches only what they may read."""
    return uploader is not None and bool(uploader.is_staff)


def _may_know_file(uploader: Any, document: Document) -> bool:
    """Whether "same content" may be answered about `document`'s stored file: while a new version
    waits, only to its audience, else the reply would confirm a guess of a file they may not fetch."""
    return uploader is None or document.pending_acl is None or principals_admit(document.pending_acl, uploader)


def _enqueue(ids: list[int]) -> None:
    """After commit. A job the broker does not take (Redis restarting) leaves its document queued: the
    upload still succeeds, and the sweep (kb.upkeep) sends the job again once its lease runs out."""
    for pk in ids:
        transaction.on_commit(partial(queues.send, "kb.ingest_document", pk))


def document_queue_ingest(*, documents: QuerySet[Document]) -> int:
    """Re-queue documents (retry, re-index); returns how many. Work starts after commit."""
    ids = list(documents.values_list("pk", flat=True))
    Document.objects.filter(pk__in=ids).update(status=Document.Status.QUEUED, failed_stage="", failure_reason="")
    _enqueue(ids)
    return len(ids)


def documents_refresh_stale(*, batch: int) -> int:
    """Queue up to `batch` stale documents (indexed under another model or format: selectors.documents_stale), the
    longest-indexed first, when no document is queued or being indexed; how many. Beat calls it every minute, so an
    upgrade's new index format reaches every document in the background, a batch at a time, behind uploads and
    syncs; readers keep the old chunks until each document's new ones replace them."""
    if batch <= 0 or Document.objects.filter(Q(status__in=Document.RUNNING) | Q(status=Document.Status.QUEUED)).exists():
        return 0
    return document_queue_ingest(documents=Document.objects.filter(
        pk__in=list(documents_stale().order_by("indexed_at", "pk").values_list("pk", flat=True)[:batch])))


def documents_end(documents: QuerySet[Document], why: str) -> Ended:
    """Queue again the `documents` whose work was lost, each conditional on the state read; those of them in a
    running stage that already took KB_INGEST_MAX_ATTEMPTS tries fail instead, so a file that kills workers
    cannot loop. A document queued again needs no reason (`why`); a failed one says how many tries it took."""
    now, tries = timezone.now(), settings.KB_INGEST_MAX_ATTEMPTS
    offenders = list(documents.filter(status__in=Document.RUNNING, attempts__gte=tries).values_list("pk", flat=True))
    failed = documents.filter(pk__in=offenders).update(
        status=Document.Status.FAILED,
        failed_stage=F("status"),
        failure_reason=f"the worker stopped while processing it {tries} times (too big or too slow to process?)",
        updated_at=now,
    )
    again = list(documents.exclude(pk__in=offenders).values_list("pk", flat=True))
    # updated_at moves on, so a document still waiting in a long queue is sent again once per lease at most.
    queued = documents.filter(pk__in=again).update(status=Document.Status.QUEUED, updated_at=now)
    _enqueue(again)
    for pk in offenders + again:
        publish_document_status(pk)
    return +Counter({"queued again": queued, "failed": failed})


# Kept by kb.upkeep (registered in kb.library.apps): a document in a stage or queued for KB_INGEST_LEASE_SECONDS,
# one whose worker was started again or fell silent, is queued again (or fails: documents_end).
DOCUMENT_LEASE = Lease(work="documents", model=Document, running=Q(status__in=Document.RUNNING), moved="updated_at",
                       waiting=Q(status=Document.Status.QUEUED), waited="updated_at",
                       seconds=lambda: settings.KB_INGEST_LEASE_SECONDS, end=documents_end)


def document_job_lost(*, document_id: int) -> str | None:
    """The job indexing `document_id` ended without finishing it: its pool process was killed (the
    OOM killer) or ran past the hard time limit. Queue it again at once, or fail it once it has taken
    KB_INGEST_MAX_ATTEMPTS tries, rather than leave it in its stage until the lease runs out.
    Returns the new status; None when the document was no longer in a running stage."""
    ended = documents_end(DOCUMENT_LEASE.rows(DOCUMENT_LEASE.running, pk=document_id), "job lost")
    if ended["failed"]:
        return Document.Status.FAILED
    return Document.Status.QUEUED if ended["queued again"] else None


@transaction.atomic
def document_set_access(
    *,
    document: Document,
    inherit: bool,
    public: bool = False,
    groups: Iterable[Group] = (),
    users: Iterable[Any] = (),
) -> list[str]:
    """Change who may read a document; its chunks follow in the same transaction."""
    hold_folder_grants(document.folder_id)  # before the document's row, as folder_set_access does
    document.inherit_access = inherit
    document.public = public
    document.save(update_fields=["inherit_access", "public", "updated_at"])
    document.groups.set(list(groups))
    document.users.set(list(users))
    return document_sync_acl(document=document)


@transaction.atomic
def folder_set_access(*, folder: Folder, public: bool, groups: Iterable[Group] = (), users: Iterable[Any] = ()) -> int:
    """Change a folder's grants and re-derive every inheriting document; returns how many changed.

    The folder's row is locked first, so a reader of its grants still open (an upload, a
    re-upload, an access change: kb.library.access.hold_folder_grants) finishes before and its
    document is re-derived here, or starts after and reads the new grants."""
    Folder.objects.select_for_update().filter(pk=folder.pk).first()
    folder.public = public
    folder.save(update_fields=["public"])
    folder.groups.set(list(groups))
    folder.users.set(list(users))
    return folder_sync_documents(folder=folder)


def folder_sync_documents(*, folder: Folder) -> int:
    """Re-derive every document that inherits `folder`'s grants (after they changed); returns how many."""
    inheriting = Document.objects.filter(folder=folder, inherit_access=True).select_related("folder")
    for document in inheriting:
        document_sync_acl(document=document)
    return len(inheriting)


@transaction.atomic
def document_delete(*, document: Document) -> None:
    """Remove a document, its chunks and its stored file."""
    Chunk.objects.filter(document=document).delete()
    stored = document.file
    document.delete()
    if stored.name:
        transaction.on_commit(partial(stored.storage.delete, stored.name))


class DocumentStateConflict(ValueError):
    """The request does not fit the document's or folder's current state (HTTP 409); the message says why."""


def document_retry(*, document: Document) -> None:
    """Queue a failed document for another attempt; anything else is a conflict, not a silent no-op."""
    if document.status != Document.Status.FAILED:
        raise DocumentStateConflict(f"The document is {document.status}, not failed.")
    document_queue_ingest(documents=Document.objects.filter(pk=document.pk, status=Document.Status.FAILED))


@transaction.atomic
def document_replace_file(*, document: Document, name: str, stream: IO[bytes], size: int, by: Any = None) -> Document:
    """Put a new file in place of `document`'s and index it again: the fix for a corrupt or wrong file, which a
    retry would only fail on again. The document keeps its folder, its access and its place in links; the file
    is validated as an upload is (UploadRejected says why not). Staff need the permission to change documents
    and to read this one (kb.library.access.staff_may); a source's document is fixed at its source, which the
    next run would copy over any replacement."""
    if by is not None and _acts_as_staff(by) and not staff_may(by, "kb.change_document", document):
        raise UploadRejected(f"{name}: replacing a document's file needs the permission to change documents")
    locked = Document.objects.select_for_update().get(pk=document.pk)
    if locked.source_id is not None:
        raise DocumentStateConflict(f"{locked.filename}: this document comes from a source; fix the file there and "
                                    "sync the source again")
    if locked.status in Document.RUNNING:
        raise DocumentStateConflict(f"{locked.filename}: the document is being indexed; wait until it is ready or failed")
    mime = upload_validate(name=name, stream=stream, size=size)
    locked.version += 1  # earlier runs of the pipeline on the old file now write nothing
    if locked.file.name:
        transaction.on_commit(partial(locked.file.storage.delete, locked.file.name))
    locked.title = ""  # the new file's own title, taken when it is indexed
    locked.filename = name
    locked.mime_type = mime
    locked.sha256 = _sha256(stream)
    locked.size = size
    locked.status = Document.Status.QUEUED
    locked.failed_stage = ""
    locked.failure_reason = ""
    locked.attempts = 0  # a new file: KB_INGEST_MAX_ATTEMPTS counts its own tries
    locked.file.save(name, File(stream, name=name), save=False)
    locked.save()
    _enqueue([locked.pk])
    return locked


def document_reindex(*, document: Document) -> None:
    """Index a ready or failed document again (e.g. a stale index version); not while it is being indexed."""
    if document.status not in (Document.Status.READY, Document.Status.FAILED):
        raise DocumentStateConflict(f"The document is {document.status}; wait until it is ready or failed.")
    document_queue_ingest(
        documents=Document.objects.filter(pk=document.pk, status__in=[Document.Status.READY, Document.Status.FAILED])
    )


@transaction.atomic
def folder_create(*, name: str, public: bool, groups: Iterable[Group] = (), users: Iterable[Any] = ()) -> Folder:
    """A new folder with its grants; a name already taken is a conflict (names are unique)."""
    name = name.strip()
    if Folder.objects.filter(name__iexact=name).exists():
        raise DocumentStateConflict(f"A folder named {name!r} already exists.")
    folder = Folder.objects.create(name=name, public=public)
    folder.groups.set(list(groups))
    folder.users.set(list(users))
    return folder


@transaction.atomic
def folder_delete(*, folder: Folder) -> None:
    """Delete an empty folder. A folder with documents is refused: its documents would lose the
    grants they inherit, so moving or deleting them is a decision to make first. Locked first, like a
    change of grants: an upload into it still open finishes before (and is counted) or finds it gone."""
    Folder.objects.select_for_update().filter(pk=folder.pk).first()
    if Document.objects.filter(folder=folder).exists():
        raise DocumentStateConflict(f"The folder {folder.name!r} still holds documents; delete or move them first.")
    if names := list(folder.sources.values_list("name", flat=True)):
        raise DocumentStateConflict(f"The folder {folder.name!r} is filled by the source(s) {', '.join(names)}; "
                                    "remove them first (manage.py source remove NAME).")
    folder.delete()
