"""Ingest files and folders from disk: what `manage.py ingest` and the demo loader run."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.contrib.auth.models import Group, User
from django.db.models import Q
from django.utils import timezone

from kb.library.events import document_indexed
from kb.library.ingest.pipeline import ingest
from kb.library.models import Document, Folder
from kb.library.services import DOCUMENT_LEASE, UploadRejected, document_queue_ingest, document_upload

Progress = Callable[[str], None]


@dataclass
class BatchSummary:
    ready: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # "name: reason"
    unchanged: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)  # still queued or running when we stopped waiting

    def lines(self, *, list_pending: bool = True) -> list[str]:
        out = [
            f"{len(self.ready)} ready, {len(self.unchanged)} unchanged, "
            f"{len(self.failed)} failed, {len(self.pending)} still in progress"
        ]
        out += [f"  failed: {line}" for line in self.failed]
        if list_pending:
            out += [f"  in progress: {line}" for line in self.pending]
        return out


def expand_paths(paths: Iterable[Path]) -> Iterator[Path]:
    """Files as given, folders recursively, hidden files skipped, in a stable order."""
    for path in paths:
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
        else:
            yield path


def resolve_access(
    *, folder: str | None, groups: Iterable[str], users: Iterable[str]
) -> tuple[Folder | None, list[Group] | None, list[Any] | None]:
    """Folder, groups and users by name; a missing group or user is an error, not a silent grant to nobody."""
    folder_obj = Folder.objects.get_or_create(name=folder)[0] if folder else None
    group_names, user_names = list(groups), list(users)
    group_objs = list(Group.objects.filter(name__in=group_names))
    user_objs = list(User.objects.filter(username__in=user_names))
    missing = sorted(set(group_names) - {g.name for g in group_objs}) + sorted(
        set(user_names) - {u.username for u in user_objs}
    )
    if missing:
        raise ValueError(f"unknown group or user: {', '.join(missing)}")
    explicit = bool(group_names or user_names)
    return folder_obj, (group_objs if explicit else None), (user_objs if explicit else None)


def ingest_paths(
    paths: Iterable[Path],
    *,
    folder: Folder | None = None,
    groups: list[Group] | None = None,
    users: list[Any] | None = None,
    uploaded_by: Any = None,
    sync: bool = False,
    wait_seconds: float = 0,
    progress: Progress = lambda name: None,
) -> BatchSummary:
    """Upload every file; index in-process (`sync`) or on the workers, waiting up to `wait_seconds`.

    A file that is rejected or fails is reported with its reason; the others go on.
    """
    summary = BatchSummary()
    queued: dict[int, str] = {}
    explicit = groups is not None or users is not None
    for path in expand_paths(paths):
        name = str(path)
        try:
            with path.open("rb") as stream:
                result = document_upload(
                    name=path.name,
                    stream=stream,
                    size=path.stat().st_size,
                    folder=folder,
                    uploaded_by=uploaded_by,
                    groups=groups,
                    users=users,
                    public=False if explicit else None,
                    enqueue=not sync,
                )
        except (UploadRejected, OSError) as exc:
            summary.failed.append(f"{name}: {exc}")
            progress(name)
            continue
        document = result.document
        # Same content as before: nothing to do, unless its earlier run never finished
        # (queue message lost with a restarted Redis, or its worker died).
        lost = Document.objects.filter(Q(status=Document.Status.QUEUED) | DOCUMENT_LEASE.lapsed(timezone.now()), pk=document.pk).exists()
        if not result.queued and not lost:
            summary.unchanged.append(name)
        elif sync:
            ingest(document.pk)
            queued[document.pk] = name
        else:
            if not result.queued:
                document_queue_ingest(documents=Document.objects.filter(pk=document.pk))
            queued[document.pk] = name
        progress(name)
    _collect(summary, queued, wait_seconds=0 if sync else wait_seconds)
    if sync and queued:
        document_indexed.send(sender=ingest_paths, document_ids=list(queued), sync=True)
    return summary


def _collect(summary: BatchSummary, queued: dict[int, str], *, wait_seconds: float) -> None:
    deadline = time.monotonic() + wait_seconds
    done = {Document.Status.READY, Document.Status.FAILED}
    while True:
        states = {d.pk: d for d in Document.objects.filter(pk__in=queued).only("status", "failure_reason", "failed_stage")}
        if all(d.status in done for d in states.values()) or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    for pk, name in queued.items():
        document = states.get(pk)
        if document is None:
            summary.failed.append(f"{name}: deleted while indexing")
        elif document.status == Document.Status.READY:
            summary.ready.append(name)
        elif document.status == Document.Status.FAILED:
            summary.failed.append(f"{name}: {document.failure_reason} (stage: {document.failed_stage})")
        else:
            summary.pending.append(f"{name}: {document.status}")
