"""Watched folder sources (issue 51 item 3): a real directory, the real watchdog observer (inotify), a real
worker running the syncs, the real pipeline and search; `manage.py watch_sources` as `make run` starts it."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kb.library.models import Folder, Source, SourcePush
from kb.library.sources.sync import source_lock
from kb.library.sources.watch import Watcher
from kb.runtime.launcher import watcher_argv
from tests.conftest import OUTPUT, ROOT, service_env, start_worker, stop_process
from tests.kb.test_sources import EXPENSES, VACATION, found

DEBOUNCE = 0.6  # seconds: short, so the tests are; the burst below saves well inside it
LUNCH = "# Canteen\n\nThe canteen on the fourth floor serves a vegetarian lasagne every Thursday at noon.\n"


def atomic_save(path: Path, text: str) -> None:
    """As editors and `cp --atomic` save: a hidden temporary file written, then renamed over the file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def until(condition: Callable[[], Any], what: str, timeout: float = 30, step: Callable[[], Any] | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if step is not None:
            step()
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"not within {timeout:.0f} s: {what}")


@pytest.fixture(scope="module")
def shares(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("shares")


@pytest.fixture(scope="module")
def worker(django_db_setup: None, shares: Path) -> Iterator[str]:
    """One worker for the module whose operator allows sources under `shares`: it runs the syncs the watcher queues."""
    hostname = f"watch-worker-{os.getpid()}-{time.monotonic_ns()}@localhost"
    process = start_worker("watch-worker", hostname=hostname, KB_SOURCE_FOLDER_ROOTS=str(shares))
    yield hostname
    stop_process(process)


@pytest.fixture
def share(request: pytest.FixtureRequest, shares: Path, settings: Any, transactional_db: None, worker: str) -> Iterator[Path]:
    """This test's directory, allowed; afterwards, until the worker is idle (no run outlives the test's tables)."""
    from kb.celery import app

    settings.KB_SOURCE_FOLDER_ROOTS = [str(shares)]
    path = shares / request.node.name
    path.mkdir()
    yield path
    inspect = app.control.inspect(destination=[worker], timeout=2)
    until(lambda: not Source.objects.filter(last_status=Source.RunStatus.RUNNING).exists()
          and all(reply and not reply.get(worker) for reply in (inspect.active(), inspect.reserved())),
          "the worker done with the test's runs", timeout=120)


@pytest.fixture
def watcher() -> Iterator[Watcher]:
    watcher = Watcher(debounce=DEBOUNCE, max_wait=10, refresh=0.5)
    yield watcher
    watcher.close()


def folder_source(share: Path, **fields: Any) -> Source:
    folder = Folder.objects.create(name=f"Folder {share.name}", public=True)
    return Source.objects.create(name=share.name, kind=Source.Kind.FOLDER, location=str(share), folder=folder,
                                 watch=fields.pop("watch", True), **fields)


def ran(source: Source) -> bool:
    """Whether the source's last run is over, ok."""
    source.refresh_from_db()
    assert source.last_status != Source.RunStatus.FAILED, source.last_reason
    return source.last_status == Source.RunStatus.OK


def caught_up(watcher: Watcher, source: Source) -> None:
    """Past the run every source gets when its watch begins (what changed unwatched is caught up)."""
    assert until(watcher.tick, "the catch-up run queued") == [source.pk]
    until(lambda: ran(source), "the catch-up run done", timeout=60)
    assert not SourcePush.objects.filter(source=source).exists()  # no save started it


def quiet(watcher: Watcher, seconds: float) -> list[int]:
    """Every source the watcher queues a run of over `seconds`."""
    sent: list[int] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sent += watcher.tick()
        time.sleep(0.05)
    return sent


def test_a_file_saved_in_a_watched_folder_is_searchable_within_seconds(share: Path, people: dict[str, Any]) -> None:
    """End to end, as `make run` runs it: the watcher process and a worker, a reader's search."""
    (share / "vacation.md").write_text(VACATION)
    source = folder_source(share)
    env = service_env(KB_SOURCE_FOLDER_ROOTS=str(share.parent), KB_SOURCE_WATCH_DEBOUNCE=str(DEBOUNCE),
                      KB_SOURCE_WATCH_REFRESH="1")
    with open(OUTPUT / "watch-sources.log", "w") as log:
        process = subprocess.Popen(watcher_argv(), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    try:
        until(lambda: found(people["carol"], "how many vacation days", "twenty-seven vacation days"),
              "the catch-up run when the watch begins", timeout=90)
        saved = time.monotonic()
        atomic_save(share / "travel" / "expenses.md", EXPENSES)
        (share / "vacation.md").write_text(VACATION.replace("twenty-seven", "thirty-one"))  # edited in place
        until(lambda: found(people["carol"], "meals on business trips abroad", "ninety-four euros")
              and found(people["carol"], "how many vacation days", "thirty-one vacation days"),
              "both saves searchable", timeout=30)
        lag = time.monotonic() - saved
        assert process.poll() is None
    finally:
        stop_process(process)
    assert lag < 30
    source.refresh_from_db()
    assert source.last_push_origin == "watch" and source.last_push_at is not None
    pushes = SourcePush.objects.filter(source=source, origin=SourcePush.Origin.WATCH)
    assert pushes.exists() and all(len(p.digest) == 64 for p in pushes)
    assert process.returncode == 0  # stopped by SIGTERM, cleanly


def test_a_burst_of_saves_is_one_run_and_editor_files_are_not_changes(share: Path, watcher: Watcher,
                                                                     people: dict[str, Any]) -> None:
    (share / "canteen.md").write_text(LUNCH)
    source = folder_source(share)
    caught_up(watcher, source)
    during = []
    for n in range(10):  # ten saves, each well inside the debounce of the one before, the watcher's loop going on
        atomic_save(share / "canteen.md", LUNCH.replace("at noon", f"at noon (menu {n})"))
        (share / f".canteen.md.swp{n}").write_text("vim swap")
        (share / "canteen.md~").write_text("backup")
        during += quiet(watcher, 0.05)
    assert during == []
    assert until(watcher.tick, "the burst's run queued") == [source.pk]
    assert quiet(watcher, 3 * DEBOUNCE) == []
    push = SourcePush.objects.get(source=source)
    assert push.origin == "watch"
    until(lambda: ran(source) and found(people["carol"], "vegetarian lasagne canteen", "(menu 9)"),
          "the last save searchable", timeout=60)
    assert source.documents.count() == 1 and source.last_changed == 1


def test_saves_that_never_pause_still_start_a_run_after_the_longest_wait(share: Path) -> None:
    watcher = Watcher(debounce=DEBOUNCE, max_wait=2, refresh=0.5)
    try:
        source = folder_source(share)
        caught_up(watcher, source)
        started = time.monotonic()
        sent: list[int] = []
        while not sent and time.monotonic() - started < 5:  # a file written every 0.2 s, as a log is
            (share / "log.md").write_text(f"# Log\n\nLine {time.monotonic()}\n")
            sent = quiet(watcher, 0.2)
        assert sent == [source.pk] and 2 <= time.monotonic() - started < 3
    finally:
        watcher.close()


def test_an_excluded_hidden_or_unsupported_file_starts_nothing(share: Path, watcher: Watcher) -> None:
    source = folder_source(share, path="docs", exclude=["docs/drafts/*"])
    (share / "docs").mkdir()
    caught_up(watcher, source)
    (share / "docs" / "drafts").mkdir()
    (share / "docs" / "drafts" / "lunch.md").write_text(LUNCH)  # excluded
    (share / "README.md").write_text(LUNCH)  # outside the sub-path
    (share / "docs" / "logo.png").write_bytes(b"\x89PNG not a document")  # not a type it reads
    (share / "docs" / ".notes.md").write_text(LUNCH)  # hidden
    (share / "docs" / "#canteen.md#").write_text(LUNCH)  # an editor's autosave
    assert quiet(watcher, 3 * DEBOUNCE) == []
    atomic_save(share / "docs" / "canteen.md", LUNCH)
    assert until(watcher.tick, "the selected file's run queued") == [source.pk]
    assert set(watcher.queued) == {source.pk}
    assert SourcePush.objects.get(source=source).received_at is not None


def test_a_source_is_watched_only_while_its_watch_is_on(share: Path, watcher: Watcher) -> None:
    source = folder_source(share, watch=False)
    assert quiet(watcher, 2 * DEBOUNCE) == [] and watcher.targets == {}
    (share / "canteen.md").write_text(LUNCH)
    assert quiet(watcher, 3 * DEBOUNCE) == []

    Source.objects.filter(pk=source.pk).update(watch=True)  # switched on: taken up at the next refresh, no restart
    caught_up(watcher, source)
    atomic_save(share / "canteen.md", LUNCH.replace("noon", "one"))
    assert until(watcher.tick, "the save's run queued") == [source.pk]

    Source.objects.filter(pk=source.pk).update(watch=False)
    until(lambda: (watcher.tick(), not watcher.targets)[1], "the watch stopped")
    assert watcher.watches == {}
    atomic_save(share / "canteen.md", LUNCH)
    assert quiet(watcher, 3 * DEBOUNCE) == []


def test_a_source_moved_to_another_directory_is_watched_there(share: Path, watcher: Watcher) -> None:
    old, new = share / "old", share / "new"
    old.mkdir()
    new.mkdir()
    source = folder_source(old)
    caught_up(watcher, source)
    Source.objects.filter(pk=source.pk).update(location=str(new))  # no restart: taken up at the next refresh
    caught_up(watcher, source)
    assert list(watcher.watches) == [new]
    (old / "canteen.md").write_text(LUNCH)
    assert quiet(watcher, 3 * DEBOUNCE) == []
    atomic_save(new / "canteen.md", LUNCH)
    assert until(watcher.tick, "the save's run queued") == [source.pk]


def test_a_change_during_a_run_gets_a_run_after_it(share: Path, watcher: Watcher) -> None:
    """A run under way may have listed before the save: the change waits for it to end, then queues another."""
    source = folder_source(share)
    caught_up(watcher, source)
    with source_lock(source.pk) as taken:  # a run of the source holds its lock (as the worker's would)
        assert taken
        atomic_save(share / "canteen.md", LUNCH)
        assert quiet(watcher, 3 * DEBOUNCE) == []
        assert source.pk in watcher.pending
    assert until(watcher.tick, "the follow-up run queued", timeout=5) == [source.pk]


def test_a_deleted_directory_is_logged_and_watched_again_when_it_is_back(share: Path, watcher: Watcher,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    source = folder_source(share, path="docs")
    docs = share / "docs"
    docs.mkdir()
    caught_up(watcher, source)
    assert list(watcher.watches) == [docs]
    with caplog.at_level(logging.WARNING, logger="kb.library.sources.watch"):
        shutil.rmtree(docs)
        until(lambda: (watcher.tick(), not watcher.watches)[1], "the watch of the deleted directory dropped")
        assert quiet(watcher, 2 * DEBOUNCE) == []  # no crash, nothing queued while it is gone
    assert any("no such directory" in r.getMessage() for r in caplog.records)

    docs.mkdir()
    (docs / "canteen.md").write_text(LUNCH)
    assert until(watcher.tick, "the catch-up run once it is back") == [source.pk]
    assert list(watcher.watches) == [docs]
    until(lambda: ran(source) and source.documents.count() == 1, "the file that came back indexed", timeout=60)
    atomic_save(docs / "expenses.md", EXPENSES)
    assert until(watcher.tick, "the save's run queued") == [source.pk]


def test_a_folder_outside_the_allowed_roots_is_never_watched(share: Path, watcher: Watcher, settings: Any,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    allowed = share / "allowed"
    allowed.mkdir()
    settings.KB_SOURCE_FOLDER_ROOTS = [str(allowed)]
    source = folder_source(share)  # the share itself: above the allowed root
    with caplog.at_level(logging.WARNING, logger="kb.library.sources.watch"):
        (share / "canteen.md").write_text(LUNCH)
        assert quiet(watcher, 3 * DEBOUNCE) == []
    assert watcher.watches == {} and source.pk not in watcher.targets
    assert any("KB_SOURCE_FOLDER_ROOTS" in r.getMessage() for r in caplog.records)
    inside = folder_source(allowed)  # the positive control: a folder under the allowed root is watched
    caught_up(watcher, inside)
    assert inside.pk in watcher.targets and source.pk not in watcher.targets

