"""Scheduled source runs (issue 27 item 3): which sources are due, beat's tick queueing them on a real worker,
and the beat process `make run` starts."""

from __future__ import annotations

import subprocess
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from kb.library.models import Folder, Source
from kb.library.sources.schedule import sources_due
from kb.library.sources.sync import source_lock
from kb.runtime.launcher import beat_argv
from tests.conftest import ROOT, service_env, stop_process


def _source(name: str, folder: Folder, **fields: Any) -> Source:
    return Source.objects.create(name=name, kind=Source.Kind.FOLDER, location=f"/srv/{name}", folder=folder, **fields)


@pytest.mark.django_db
def test_due_are_the_scheduled_sources_whose_interval_passed_and_not_running() -> None:
    folder = Folder.objects.create(name="Handbook")
    now = timezone.now()
    never_run = _source("never-run", folder, every=900)
    elapsed = _source("elapsed", folder, every=900, last_started_at=now - timedelta(seconds=901),
                      last_status=Source.RunStatus.OK)
    _source("recent", folder, every=900, last_started_at=now - timedelta(seconds=600), last_status=Source.RunStatus.OK)
    _source("by-hand", folder, every=None, last_started_at=now - timedelta(days=30))
    # A worker killed mid-run leaves `running` behind but no lock: due again once its interval passed.
    stale = _source("stale", folder, every=900, last_started_at=now - timedelta(hours=2),
                    last_status=Source.RunStatus.RUNNING)
    assert {s.name for s in sources_due(now)} == {never_run.name, elapsed.name, stale.name}
    assert {s.name for s in sources_due(now + timedelta(seconds=300))} == {"never-run", "elapsed", "recent", "stale"}

    with source_lock(elapsed.pk) as taken:  # a run under way holds the lock: never queued alongside it
        assert taken
        assert {s.name for s in sources_due(now)} == {"never-run", "stale"}
    assert "elapsed" in {s.name for s in sources_due(now)}


@pytest.mark.django_db
def test_a_source_every_minute_runs_at_every_tick_though_its_run_started_after_the_last_one() -> None:
    """Beat ticks every 60 s; a run starts a moment after the tick that queued it, so at the next tick a
    little under 60 s have passed. It is due all the same; one started half a minute ago is not."""
    folder = Folder.objects.create(name="Handbook")
    now = timezone.now()
    _source("started-after-last-tick", folder, every=60, last_started_at=now - timedelta(seconds=57))
    _source("started-just-now", folder, every=60, last_started_at=now - timedelta(seconds=20))
    assert [s.name for s in sources_due(now)] == ["started-after-last-tick"]


def test_the_tick_queues_due_sources_and_a_worker_runs_them(tmp_path: Path, celery_worker: Any) -> None:
    from kb.library.tasks import sources_due as tick

    share = tmp_path / "share"
    share.mkdir()
    (share / "parking.md").write_text("# Parking\n\nVisitors park in bay seventeen behind the loading dock.\n")
    folder = Folder.objects.create(name="Facilities")
    due = Source.objects.create(name="facilities", kind=Source.Kind.FOLDER, location=str(share), folder=folder, every=60)
    Source.objects.create(name="manual", kind=Source.Kind.FOLDER, location=str(share), folder=folder)

    assert tick() == 1
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        due.refresh_from_db()
        if due.last_status in (Source.RunStatus.OK, Source.RunStatus.FAILED):
            break
        time.sleep(0.5)
    assert due.last_status == Source.RunStatus.OK, due.last_reason
    assert due.documents.get().source_path == "parking.md"
    assert Source.objects.get(name="manual").last_status == Source.RunStatus.NEVER
    assert tick() == 0  # it ran within its interval


@pytest.mark.slow
def test_beat_as_the_launcher_starts_it_runs_with_its_files_in_var_dir(tmp_path: Path) -> None:
    """The argv `make run` uses for beat (kb.runtime.launcher.Launcher.start) starts a beat that keeps
    its schedule and pid lock in VAR_DIR; a second one on the same VAR_DIR refuses to start."""
    argv = beat_argv(tmp_path)
    env = service_env(KB_VAR_DIR=str(tmp_path))
    beat = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "celerybeat.pid").exists() and time.monotonic() < deadline:
            assert beat.poll() is None, beat.stdout.read() if beat.stdout else ""
            time.sleep(0.2)
        assert (tmp_path / "celerybeat.pid").read_text().strip() == str(beat.pid)
        second = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert second.returncode != 0 and "already exists" in second.stderr + second.stdout
        assert beat.poll() is None
        assert any(p.name.startswith("celerybeat-schedule") for p in tmp_path.iterdir())
    finally:
        stop_process(beat)
