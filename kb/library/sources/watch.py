"""Folder sources watched for changes (issue 51): a saved file starts a sync a few seconds later, instead of
at the next scheduled run, which stays the safety net.

`manage.py watch_sources` runs one Watcher, started by `make run` next to beat (kb.runtime.launcher). For each
folder source with `watch` on it watches the directory (its sub-path) through watchdog (inotify on Linux),
recursively and without following symbolic links, under the roots the operator allows (policy.local_root_check,
checked again at every refresh). An event counts only when the sync would list its path (`listing.selected`:
the sub-path, the include and exclude globs, no hidden part, a supported type), so an editor's swap and
backup files and the hidden temporary file of an atomic save start nothing, while the rename that ends the
save does. Events of one source are debounced (KB_SOURCE_WATCH_DEBOUNCE seconds of quiet, at most
KB_SOURCE_WATCH_MAX_WAIT after the first), then the saves start a run as a push webhook does
(webhooks.push_received: a SourcePush of origin "watch", the source's last push, kb.sync_source queued).

A change is never lost to a run already under way, which may have listed before the save: while the
source's run lock is held (schedule.sources_running) the change waits, and queues a follow-up once the run
ends. A run this watcher queued that has not started yet lists after the save, so it covers it.
The set of watched sources is read again every KB_SOURCE_WATCH_REFRESH seconds (sources added, removed,
switched on or off, moved); a directory that disappears, is replaced or cannot be read is logged and watched
again when it is back, with one sync to catch up, as for every source when its watch begins.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path, PurePosixPath

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone
from watchdog.events import (
    DirDeletedEvent,
    DirMovedEvent,
    EventsLostEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

from kb import queues
from kb.library.models import Source, SourcePush
from kb.library.sources.listing import ListingError, selected, sub_path
from kb.library.sources.policy import local_root_check
from kb.library.sources.schedule import sources_running
from kb.library.sources.webhooks import QueueUnavailable, WebhookRefused, push_received

log = logging.getLogger(__name__)

# What can change a listing: a file written, created, moved in or out, deleted; a directory moved or deleted
# with its files. Opening or reading a file, and a directory's own "modified" (one per change in it), cannot.
EVENTS: list[type[FileSystemEvent]] = [FileCreatedEvent, FileModifiedEvent, FileClosedEvent, FileMovedEvent,
                                       FileDeletedEvent, DirMovedEvent, DirDeletedEvent, EventsLostEvent]
TICK_SECONDS = 0.25  # how often due changes are looked for
# A run queued here that has not started after this long is taken as lost (a worker killed with its
# prefetched jobs) and queued again; until then, the worker is busy with other runs and it will come.
LOST_AFTER = timedelta(minutes=10)


@dataclass(frozen=True)
class Target:
    """One watched source as the watcher sees it: its directory, a real path under an allowed root, and what
    its sync selects there."""

    source_id: int
    name: str
    root: Path  # the source's location, links resolved: listed paths are relative to it
    directory: Path  # root / sub-path: what is watched
    under: str
    include: tuple[str, ...]
    exclude: tuple[str, ...]

    def concerns(self, path: str, *, directory: bool) -> bool:
        """Whether a change at the absolute `path` may change what the sync lists: a file it would select, or
        a directory (moved or deleted with its files) that no hidden part hides."""
        try:
            relative = PurePosixPath(Path(path).relative_to(self.root).as_posix())
        except ValueError:
            return False
        if directory:
            return not any(part.startswith(".") for part in relative.parts)
        return selected(str(relative), under=self.under, include=self.include, exclude=self.exclude)


def target_of(source: Source) -> Target:
    """The source as a Target; ListingError with the reason when it cannot be watched (outside the allowed
    roots, no such directory, a sub-path through a symbolic link): the same checks as its listing."""
    root = local_root_check(source.location)
    under = sub_path(source.path)
    directory = root / under
    if not directory.is_dir():
        raise ListingError(f"{directory}: no such directory (is the share mounted?)")
    if Path(os.path.realpath(directory)) != directory:
        raise ListingError(f"{source.path!r}: the sub-path passes through a symbolic link; give the directory itself")
    return Target(source.pk, source.name, root, directory, under, tuple(source.include), tuple(source.exclude))


def watched_targets() -> tuple[dict[int, Target], dict[int, str]]:
    """Every folder source with `watch` on: those that can be watched, and why each other one cannot."""
    targets, refused = {}, {}
    for source in Source.objects.filter(kind=Source.Kind.FOLDER, watch=True):
        try:
            targets[source.pk] = target_of(source)
        except ListingError as exc:
            refused[source.pk] = f"{source.name}: {exc}"
    return targets, refused


def save_digest(paths: set[str], at: datetime) -> str:
    """What makes one watched save itself (SourcePush.digest): its paths and when it was seen."""
    return hashlib.sha256("\n".join([*sorted(paths), at.isoformat()]).encode()).hexdigest()


def queue_sync(source_id: int) -> bool:
    """Queue a run of the source on the ingest queue; False (logged) when the broker is out of reach."""
    return queues.send("kb.sync_source", source_id)


@dataclass
class Pending:
    """Changes of one source not yet handed to a run: when the first and the last were seen (monotonic
    seconds), and the paths (none: a catch-up run, when the watch begins)."""

    first: float
    last: float
    paths: set[str] = field(default_factory=set)


class _Handler(FileSystemEventHandler):
    """Runs in the observer's thread: only notes the change for the watcher's loop."""

    def __init__(self, watcher: Watcher, directory: Path) -> None:
        self.watcher, self.directory = watcher, directory

    def on_any_event(self, event: FileSystemEvent) -> None:
        paths = [os.fsdecode(p) for p in (event.src_path, event.dest_path) if p]
        if isinstance(event, EventsLostEvent):  # the kernel's queue overflowed: anything may have changed
            self.watcher.note_all(self.directory)
            return
        for path in paths:
            self.watcher.note(self.directory, path, is_directory=event.is_directory)


@dataclass
class _Watch:
    observer: BaseObserver
    identity: tuple[int, int]  # the directory's device and inode when the watch began

    def alive(self, directory: Path) -> bool:
        """False once the directory is gone or replaced (the kernel's watch follows the old one) or an
        emitter stopped (the directory was deleted under it)."""
        try:
            found = os.stat(directory, follow_symlinks=False)
        except OSError:
            return False
        return ((found.st_dev, found.st_ino) == self.identity and self.observer.is_alive()
                and all(emitter.is_alive() for emitter in self.observer.emitters))


class Watcher:
    """The watched folder sources of this deployment: `run` until stopped, or `tick` as tests do."""

    def __init__(self, *, debounce: float | None = None, max_wait: float | None = None,
                 refresh: float | None = None) -> None:
        self.debounce = settings.KB_SOURCE_WATCH_DEBOUNCE if debounce is None else debounce
        self.max_wait = settings.KB_SOURCE_WATCH_MAX_WAIT if max_wait is None else max_wait
        self.refresh_every = settings.KB_SOURCE_WATCH_REFRESH if refresh is None else refresh
        self.targets: dict[int, Target] = {}
        self.pending: dict[int, Pending] = {}
        self.queued: dict[int, datetime] = {}  # when this watcher last queued a run of each source
        self.watches: dict[Path, _Watch] = {}
        self.said: dict[object, str] = {}  # the last problem logged per source or directory, said once
        self.refreshed = float("-inf")
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- the observer's thread

    def note(self, directory: Path, path: str, *, is_directory: bool) -> None:
        """A change at `path` under the watched `directory`: pending for each source it concerns."""
        if path == str(directory):  # the watched directory itself deleted: the next refresh finds it gone
            return
        now = time.monotonic()
        with self._lock:
            for target in self.targets.values():
                if target.directory == directory and target.concerns(path, directory=is_directory):
                    pending = self.pending.setdefault(target.source_id, Pending(now, now))
                    pending.last = now
                    pending.paths.add(Path(path).relative_to(target.root).as_posix())

    def note_all(self, directory: Path) -> None:
        now = time.monotonic()
        with self._lock:
            for target in self.targets.values():
                if target.directory == directory:
                    self.pending.setdefault(target.source_id, Pending(now, now)).last = now

    # ---------------------------------------------------------------- the loop's thread

    def refresh(self) -> None:
        """Read the watched sources again; start, restart and stop the directories' watches to match."""
        targets, refused = watched_targets()
        for source_id, reason in refused.items():
            self._say(source_id, reason)
        now = time.monotonic()
        with self._lock:
            for source_id, target in targets.items():
                self.said.pop(source_id, None)  # a later problem is said again
                if self.targets.get(source_id) != target:  # new, or moved or selecting otherwise: caught up
                    log.info("watching %s (%s)", target.name, target.directory)
                    self.pending.setdefault(source_id, Pending(now, now))
            for source_id in self.targets.keys() - targets.keys():
                log.info("no longer watching %s", self.targets[source_id].name)
                self.pending.pop(source_id, None)
                self.queued.pop(source_id, None)
            self.targets = targets
        wanted = {target.directory for target in targets.values()}
        for directory in list(self.watches):
            if directory not in wanted or not self.watches[directory].alive(directory):
                self._stop(self.watches.pop(directory))
                if directory in wanted:
                    self._say(directory, f"{directory}: watched again (it was deleted, replaced or became unreadable)")
                    self.note_all(directory)  # what changed meanwhile is caught up
        for directory in wanted - self.watches.keys():
            try:
                self.watches[directory] = self._start(directory)
            except OSError as exc:  # unreadable, or the inotify limits (fs.inotify.max_user_watches) reached
                self._say(directory, f"{directory}: cannot be watched, tried again every {self.refresh_every:g} s "
                                     f"(scheduled runs still sync it): {exc}")
        self.refreshed = time.monotonic()

    def _start(self, directory: Path) -> _Watch:
        found = os.stat(directory, follow_symlinks=False)
        observer = Observer()
        observer.schedule(_Handler(self, directory), str(directory), recursive=True, event_filter=EVENTS)
        try:
            observer.start()
        except BaseException:
            self._stop(_Watch(observer, (0, 0)))
            raise
        self.said.pop(directory, None)
        return _Watch(observer, (found.st_dev, found.st_ino))

    @staticmethod
    def _stop(watch: _Watch) -> None:
        watch.observer.stop()
        if watch.observer.is_alive():
            watch.observer.join(5)

    def _say(self, key: object, problem: str) -> None:
        if self.said.get(key) != problem:
            log.warning("%s", problem)
            self.said[key] = problem

    def due(self, now: float) -> list[int]:
        """Sources whose changes have been quiet for the debounce, or waited the longest wait."""
        with self._lock:
            return [source_id for source_id, p in self.pending.items()
                    if now - p.last >= self.debounce or now - p.first >= self.max_wait]

    def tick(self) -> list[int]:
        """Refresh when it is time, then hand each source's due changes to a run; the sources queued."""
        if time.monotonic() - self.refreshed >= self.refresh_every:
            self.refresh()
        due = self.due(time.monotonic())
        if not due:
            return []
        running = sources_running()
        sources = Source.objects.in_bulk(due)
        sent = []
        for source_id in due:
            source = sources.get(source_id)
            if source is None or source_id in running:  # running: it may have listed before the change, so it
                continue  # waits for the run to end (a deleted source goes at the next refresh)
            now = timezone.now()
            queued = self.queued.get(source_id)
            if queued is not None and now - queued < LOST_AFTER and (
                    source.last_started_at is None or source.last_started_at < queued):
                with self._lock:  # a run queued here and not started yet lists after these changes
                    self.pending.pop(source_id, None)
                continue
            with self._lock:
                pending = self.pending.pop(source_id)
            if not self._start_run(source, pending, now):
                with self._lock:  # tried again after another debounce
                    self.pending.setdefault(source_id, pending).last = time.monotonic()
                continue
            self.queued[source_id] = now
            sent.append(source_id)
            log.info("%s: %d change(s) seen, sync queued", source.name, len(pending.paths))
        return sent

    @staticmethod
    def _start_run(source: Source, pending: Pending, now: datetime) -> bool:
        """Queue a run: the saves recorded as a push is (webhooks.push_received: a SourcePush of origin "watch",
        the source's last push), a catch-up without a record. False when the broker is out of reach."""
        if not pending.paths:
            return queue_sync(source.pk)
        try:
            push_received(source, SourcePush.Origin.WATCH, save_digest(pending.paths, now), now=now)
        except (QueueUnavailable, WebhookRefused) as exc:  # refused: the same paths at the same instant, never
            log.warning("%s: %s", source.name, exc)
            return False
        return True

    def run(self, stop: threading.Event) -> None:
        """Until `stop` is set. A database or broker out of reach is logged and tried again; nothing here
        stops the process but `stop`."""
        try:
            while not stop.is_set():
                try:
                    self.tick()
                except Exception:
                    log.exception("watching the folder sources failed; trying again")
                    close_old_connections()
                    stop.wait(self.refresh_every)
                stop.wait(TICK_SECONDS)
        finally:
            self.close()

    def close(self) -> None:
        for watch in self.watches.values():
            self._stop(watch)
        self.watches.clear()
