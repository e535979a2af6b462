"""The Celery queues: ingestion and answers each have their own workers (docs/SCALING.md).

A plain module, so the launcher can name the queues without loading Django's settings.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

INGEST = "ingest"  # documents, and everything else not routed elsewhere
ANSWERS = "answers"  # chat answers: latency-bound, never behind a document


def send(task: Any, *args: Any) -> bool:
    """Queue `task(*args)`; False (logged) when the broker is out of reach. The database row a job works
    on is the record, so each caller decides what an unsent job means: a document stays queued for the
    sweeper to send again, an answer fails at once and the asker is told to ask again."""
    from kombu.exceptions import OperationalError

    try:
        task.delay(*args)
    except OperationalError as exc:
        logger.warning("could not queue %s%r, the broker is unreachable: %s", task.name, args, exc)
        return False
    return True
