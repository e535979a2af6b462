"""One run of a source: list it, compare with its documents (path + etag + sha256), then act through
kb.library.services, the same path as an upload, so permissions and version rules apply to every change.

Order of safety: a listing that fails deletes nothing; a listing that would delete more than the
source's shrink guard (a share of its documents) is held until a run with `confirm`; everything is
planned before anything is written. Documents are indexed in this process (the run is itself a job on
the ingest queue), so the run's result counts what failed and how many chunks were embedded.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from kb.library.events import document_indexed
from kb.library.ingest.pipeline import ingest
from kb.library.models import Document, Source, SourceChange
from kb.library.services import UploadRejected, document_delete, document_upload
from kb.library.sources.kinds import source_list_entries
from kb.library.sources.listing import Entry, ListingError, selected, sub_path

log = logging.getLogger(__name__)

LOCK_CLASS = 27_0001  # first key of the advisory lock of a source's runs; the second is the source's id
PATH_SEPARATOR = " › "  # a document's file name is its path at the source, readable and unique per path


class SourceBusy(Exception):
    """Another run of the same source holds its lock; this one did nothing."""


@dataclass
class SyncResult:
    status: str  # Source.RunStatus: ok, failed or held
    reason: str = ""
    listed: int = 0
    unchanged: int = 0
    changed: int = 0
    new: int = 0
    deleted: int = 0
    renamed: int = 0
    failed: int = 0
    chunks_embedded: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)  # (path, reason), one per failed file

    def fail(self, path: str, reason: str) -> None:
        self.failures.append((path, reason))
        self.failed = len(self.failures)

    def summary(self) -> str:
        return (f"{self.status}: listed {self.listed}, unchanged {self.unchanged}, changed {self.changed}, "
                f"new {self.new}, deleted {self.deleted}, renamed {self.renamed}, failed {self.failed}; "
                f"{self.chunks_embedded} chunks embedded" + (f" ({self.reason})" if self.reason else ""))


@dataclass
class _Plan:
    unchanged: list[tuple[Document, Entry]] = field(default_factory=list)
    changed: list[tuple[Document, Entry]] = field(default_factory=list)
    new: list[Entry] = field(default_factory=list)
    renamed: list[tuple[Document, Entry]] = field(default_factory=list)
    gone: list[Document] = field(default_factory=list)


class _Progress:
    """The run's state on its source row, written as it moves (one cheap UPDATE a step), so the admin, the
    API and the library show it live; and its changes (kb.library.models.SourceChange) from seen to searchable,
    so the source's index lag and pending files are known at any moment, even of a run killed mid-way."""

    def __init__(self, source: Source, seen_at: datetime) -> None:
        self.source, self.seen_at = source, seen_at
        # A change listed now happened after the previous listing at the earliest (a file copied with an
        # old mtime, an old commit merged since); a source never listed counts from when it was added.
        self.floor = source.last_listed_at or source.created_at
        self.lags: list[float] = []

    def update(self, **fields: Any) -> None:
        Source.objects.filter(pk=self.source.pk).update(**fields)

    def since(self, modified: float | None) -> datetime:
        """When a change started, for its lag: the time it changed at the source, kept between the previous
        listing and this one; where the kind does not know it (a deletion), when this run saw it."""
        if modified is None:
            return self.seen_at
        return min(max(datetime.fromtimestamp(modified, tz=UTC), self.floor), self.seen_at)

    def seen(self, changes: Sequence[tuple[str, str, datetime]]) -> None:
        """Record (path, action, since) as pending. A change already recorded keeps when it started, and a
        file that failed stays failed while it is tried again: a file refused on every run is reported
        with its reason, never as a pending change as old as its first failure."""
        SourceChange.objects.bulk_create(
            [SourceChange(source=self.source, path=path, action=action, since=since, first_seen_at=self.seen_at)
             for path, action, since in changes],
            update_conflicts=True, unique_fields=["source", "path"], update_fields=["action"],
        )

    def searchable(self, path: str) -> None:
        """The change at `path` is searchable now (indexed, moved or deleted): its lag is measured."""
        change = SourceChange.objects.filter(source=self.source, path=path).first()
        if change is not None:
            self.lags.append((timezone.now() - change.since).total_seconds())
            change.delete()

    def settle(self, result: SyncResult, plan: _Plan) -> None:
        """After a complete run only failed files remain: this run's, and unchanged documents still failed."""
        failed = dict(result.failures)
        failed.update({d.source_path: d.failure_reason for d, _ in plan.unchanged if d.status == Document.Status.FAILED})
        SourceChange.objects.filter(source=self.source).exclude(path__in=list(failed)).delete()
        SourceChange.objects.bulk_create(
            [SourceChange(source=self.source, path=path, action=SourceChange.Action.NEW, since=self.seen_at,
                          first_seen_at=self.seen_at, failure_reason=reason[:4000] or "failed")
             for path, reason in failed.items()],
            update_conflicts=True, unique_fields=["source", "path"], update_fields=["failure_reason"],
        )


def document_name(path: str) -> str:
    """The document's file name for a path at the source: the path itself, its separators made readable."""
    return PATH_SEPARATOR.join(PurePosixPath(path).parts)


@contextmanager
def source_lock(source_id: int) -> Iterator[bool]:
    """A PostgreSQL advisory lock per source, held by this database session for the run: True when taken."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [LOCK_CLASS, source_id])
        taken = bool(cursor.fetchone()[0])
    try:
        yield taken
    finally:
        if taken:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [LOCK_CLASS, source_id])


def source_sync(source: Source, *, confirm: bool = False) -> SyncResult:
    """Bring the source's documents in line with the source; `confirm` lets a held shrink go ahead.
    Raises SourceBusy when another run of it is under way."""
    with source_lock(source.pk) as taken:
        if not taken:
            raise SourceBusy(f"{source.name}: another run of this source is under way")
        started = timezone.now()
        progress = _Progress(source, started)
        progress.update(last_status=Source.RunStatus.RUNNING, last_reason="", last_step="listing",
                        last_started_at=started, last_finished_at=None, **dict.fromkeys(_COUNTS, 0))
        try:
            result = _run(source, progress, confirm=confirm)
        except Exception as exc:
            log.exception("sync of source %s failed", source.name)
            result = SyncResult(status=Source.RunStatus.FAILED, reason=f"internal error: {type(exc).__name__}: {exc}")
            _record(source, result, progress)
            raise
        _record(source, result, progress)
        return result


def _run(source: Source, progress: _Progress, *, confirm: bool) -> SyncResult:
    try:
        under = sub_path(source.path)
        entries = [e for e in source_list_entries(source)
                   if selected(e.path, under=under, include=source.include, exclude=source.exclude)]
    except ListingError as exc:
        return SyncResult(status=Source.RunStatus.FAILED, reason=str(exc))
    result = SyncResult(status=Source.RunStatus.OK, listed=len(entries))
    plan = _plan(source, entries)
    progress.seen([(e.path, SourceChange.Action.CHANGED, progress.since(e.modified)) for _, e in plan.changed]
                  + [(e.path, SourceChange.Action.NEW, progress.since(e.modified)) for e in plan.new]
                  + [(e.path, SourceChange.Action.RENAMED, progress.since(e.modified)) for _, e in plan.renamed]
                  + [(d.source_path, SourceChange.Action.DELETED, progress.seen_at) for d in plan.gone])
    planned = len(plan.changed) + len(plan.new) + len(plan.renamed) + len(plan.gone)
    progress.update(last_listed=result.listed, last_listed_at=progress.seen_at, last_planned=planned,
                    last_unchanged=len(plan.unchanged), last_step="applying")
    tracked = len(plan.unchanged) + len(plan.changed) + len(plan.renamed) + len(plan.gone)
    if plan.gone and len(plan.gone) > source.shrink_guard * tracked and not confirm:
        result.status = Source.RunStatus.HELD
        result.reason = (f"{len(plan.gone)} of {tracked} documents would be deleted, more than "
                         f"{source.shrink_guard:.0%}; nothing was changed: confirm the run to go ahead")
        return result
    result.unchanged = len(plan.unchanged)
    for document, entry in plan.renamed:
        _link(document, entry, rename=True)
        result.renamed += 1
        progress.searchable(entry.path)
        progress.update(last_renamed=result.renamed)
    for document in plan.gone:
        document_delete(document=document)
        result.deleted += 1
        progress.searchable(document.source_path)
        progress.update(last_deleted=result.deleted)
    to_index = [d.pk for d, _ in plan.unchanged if d.status == Document.Status.QUEUED]  # left by a stopped run
    for document, entry in plan.changed:
        pk = _upload(source, entry, result, replacing=document)
        if pk is not None:
            result.changed += 1
            to_index.append(pk)
        progress.update(last_changed=result.changed, last_failed=result.failed)
    for entry in plan.new:
        pk = _upload(source, entry, result, replacing=None)
        if pk is not None:
            result.new += 1
            to_index.append(pk)
        progress.update(last_new=result.new, last_failed=result.failed)
    progress.update(last_step="indexing", last_to_index=len(to_index))
    _index(to_index, result, progress)
    progress.settle(result, plan)
    return result


def _plan(source: Source, entries: list[Entry]) -> _Plan:
    """Match entries to documents: by path (unchanged when the etag or the content hash is the same),
    then a new path whose content is that of a vanished path (same type) as a rename."""
    plan = _Plan()
    documents = {d.source_path: d for d in source.documents.defer("canonical_text", "pages", "headings")}
    listed = {e.path for e in entries}
    for entry in entries:
        document = documents.get(entry.path)
        if document is None:
            plan.new.append(entry)
        elif (document.source_etag and document.source_etag == entry.etag) or document.sha256 == entry.sha256():
            plan.unchanged.append((document, entry))
        else:
            plan.changed.append((document, entry))
    vanished: dict[tuple[str, str], Document] = {}
    for path, document in documents.items():
        if path not in listed:
            vanished.setdefault((document.sha256, PurePosixPath(path).suffix.lower()), document)
    still_new = []
    for entry in plan.new:
        document = vanished.pop((entry.sha256(), PurePosixPath(entry.path).suffix.lower()), None)
        if document is None:
            still_new.append(entry)
        else:
            plan.renamed.append((document, entry))
    plan.new = still_new
    moved = {d.pk for d, _ in plan.renamed}
    plan.gone = [d for path, d in documents.items() if path not in listed and d.pk not in moved]
    # An unchanged file whose etag moved (touched, re-cloned) keeps its document; only the tag is refreshed.
    for document, entry in plan.unchanged:
        if document.source_etag != entry.etag:
            Document.objects.filter(pk=document.pk).update(source_etag=entry.etag)
    return plan


def _link(document: Document, entry: Entry, *, rename: bool = False) -> None:
    """Tie a document to its path at the source (the one write here that is not kb.library.services': the link)."""
    fields = {"source_path": entry.path, "source_etag": entry.etag}
    if rename:
        fields["filename"] = document_name(entry.path)
    Document.objects.filter(pk=document.pk).update(**fields)


def _upload(source: Source, entry: Entry, result: SyncResult, *, replacing: Document | None) -> int | None:
    """Upload one file as a new document or a new version of `replacing`; the id to index, or None when
    it failed (recorded in `result`) or needs no indexing."""
    name = replacing.filename if replacing is not None else document_name(entry.path)
    if replacing is None:
        other = Document.objects.filter(folder=source.folder, filename=name).exclude(source=source).first()
        if other is not None:
            result.fail(entry.path, f"the folder already holds a document named {name!r} that is not from this "
                                    "source; it was left alone")
            return None
    try:
        data = entry.read()
        with transaction.atomic():
            upload = document_upload(name=name, stream=io.BytesIO(data), size=len(data), folder=source.folder,
                                     enqueue=False)
            document = upload.document
            if replacing is not None and document.pk != replacing.pk:
                # The new content is another document's already: that one stands for it, this one goes.
                document_delete(document=replacing)
                result.fail(entry.path, f"its new content is the same as {document.source_path or document.filename!r}'s, "
                                        "indexed once there")
                return None
            if not upload.queued:
                result.fail(entry.path, f"the same content is already in the folder as {document.filename!r}; "
                                        "indexed once there")
                return None
            Document.objects.filter(pk=document.pk).update(source=source)
            _link(document, entry)
    except UploadRejected as exc:
        result.fail(entry.path, str(exc))
        return None
    except OSError as exc:
        result.fail(entry.path, f"could not be read: {exc}")
        return None
    return document.pk


def _index(ids: list[int], result: SyncResult, progress: _Progress) -> None:
    """Index the run's documents here, one by one; a broken file fails alone with the pipeline's reason."""
    ready = []
    for done, pk in enumerate(ids, start=1):
        status = ingest(pk)
        row = Document.objects.filter(pk=pk).values("status", "failure_reason", "source_path", "chunk_count",
                                                    "chunks_reused").first()
        if row is not None and status == Document.Status.READY:
            ready.append(pk)
            result.chunks_embedded += row["chunk_count"] - row["chunks_reused"]
            progress.searchable(row["source_path"])
        elif row is not None and row["status"] == Document.Status.FAILED:
            result.fail(row["source_path"], row["failure_reason"])
        progress.update(last_indexed=done, last_failed=result.failed, last_chunks_embedded=result.chunks_embedded)
    if ready:
        document_indexed.send(sender=source_sync, document_ids=ready, sync=True)


# The run's counts, reset when it starts and written as it goes.
_COUNTS = ("last_listed", "last_unchanged", "last_changed", "last_new", "last_deleted", "last_renamed", "last_failed",
           "last_chunks_embedded", "last_planned", "last_to_index", "last_indexed")


def _record(source: Source, result: SyncResult, progress: _Progress) -> None:
    now = timezone.now()
    fields: dict[str, Any] = {
        "last_status": result.status, "last_reason": result.reason[:4000], "last_step": "", "last_listed": result.listed,
        "last_unchanged": result.unchanged, "last_changed": result.changed, "last_new": result.new,
        "last_deleted": result.deleted, "last_renamed": result.renamed, "last_failed": result.failed,
        "last_chunks_embedded": result.chunks_embedded, "last_finished_at": now,
    }
    if result.status == Source.RunStatus.OK:
        fields["last_success_at"] = now
    if progress.lags:
        fields["last_lag_seconds"] = max(progress.lags)
    progress.update(**fields)
