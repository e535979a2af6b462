"""The Celery app; tasks live in each app's tasks.py and stay thin wrappers over services."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from celery import Celery
from celery.signals import task_failure, task_postrun, task_prerun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.settings")

app = Celery("kb")


@app.on_configure.connect
def _embedded_services(**_: Any) -> None:
    """`celery -A kb worker` (or beat) is an entry point: it starts or reuses the embedded servers, as manage.py
    does, before its configuration reads the settings. Other processes reach here having done so or not needing to."""
    if "celery.bin.celery" in sys.modules:  # run as the celery command
        from kb.runtime.embedded import ensure_services

        ensure_services()


app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# `celery beat` (one per deployment, started by kb.runtime.launcher) sends these; the work runs on a worker.
app.conf.beat_schedule = {
    "sources-due": {"task": "kb.sources_due", "schedule": 60.0, "options": {"expires": 55}},
    "refresh-stale": {"task": "kb.refresh_stale", "schedule": 60.0, "options": {"expires": 55}},
}


@task_prerun.connect
@task_postrun.connect
def _close_old_connections(**_: Any) -> None:
    """What Django does around a request, around each task: a connection whose query failed (the server
    restarted) or that outlived its max age is closed; the others are kept warm (settings.CELERY_DB_REUSE_MAX)."""
    from django.db import close_old_connections

    close_old_connections()


@app.task(name="kb.ping")
def ping(value: str) -> str:
    """Round trip through the broker and result backend; used by health checks and tests."""
    return f"pong:{value}"


def when_job_lost(task: Any, handler: Callable[..., object]) -> None:
    """Call `handler` with a job's arguments when Celery reports that job of `task` failed.

    For a task whose body records its own failures (and which runs with reject_on_worker_lost=False),
    such a report means the pool process was lost (SIGKILL, the OOM killer) or hit the hard time
    limit. Celery sends it from the worker's main process, which lives on, and acknowledges the job.
    """

    def receiver(*, sender: Any = None, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None,
                 **_: Any) -> None:
        if getattr(sender, "name", None) == task.name:
            handler(*args, **(kwargs or {}))

    task_failure.connect(receiver, weak=False)
