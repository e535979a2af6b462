"""The Celery queues: ingestion and answers each have their own workers (docs/SCALING.md).

The names are plain constants, so the launcher can name the queues without loading Django's settings.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.exceptions import OperationalError

from kb.celery import app

logger = logging.getLogger(__name__)

INGEST = "ingest"  # documents, and everything else not routed elsewhere
ANSWERS = "answers"  # chat answers: latency-bound, never behind a document


def send(task: str, *args: Any, countdown: float | None = None) -> bool:
    """Queue a job of the task named `task` with `args` (after `countdown` seconds); False (logged) when the
    broker is out of reach. The job keeps no result: the database row it works on is the record, and each
    caller decides what an unsent job means: a document stays queued for the sweep to send again, an answer
    fails at once and the asker is told to ask again.

    Sent by name, so the code that queues a job never imports the task's module: the tasks import the services
    they wrap, and nothing they run imports them back."""
    try:
        app.send_task(task, args=args, countdown=countdown, ignore_result=True)
    except OperationalError as exc:
        logger.warning("could not queue %s%r, the broker is unreachable: %s", task, args, exc)
        return False
    return True
