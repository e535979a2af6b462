"""The periodic sweep that heals lost work: documents re-queued, expired answers failed.

It runs in a daemon thread of every Celery worker (started on `worker_ready`, hooked up in
chat/tasks.py), so it needs no extra process; the sweeps are conditional updates, so
several workers sweeping at once do each thing once. It lives in chat, the top layer,
because it sweeps both chat's answers and kb's documents.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from django.conf import settings
from django.db import connection

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweepReport:
    documents_requeued: int
    documents_failed: int
    answers_failed: int


def sweep() -> SweepReport:
    from chat.services import answers_expire
    from kb.library.services import documents_requeue_stuck

    requeued, failed = documents_requeue_stuck()
    report = SweepReport(documents_requeued=requeued, documents_failed=failed, answers_failed=answers_expire())
    if requeued or failed or report.answers_failed:
        log.warning("sweep: %s", report)
    return report


def _sweep_forever(interval: float, stop: threading.Event) -> None:
    while not stop.wait(interval):
        try:
            sweep()
        except Exception:  # the database may be restarting: try again next time
            log.exception("sweep failed")
        finally:
            connection.close()  # back to the pool between sweeps


def start(stop: threading.Event | None = None) -> threading.Thread | None:
    """Sweep every KB_SWEEP_SECONDS in a daemon thread; None when sweeping is switched off."""
    interval = float(settings.KB_SWEEP_SECONDS)
    if interval <= 0:
        return None
    thread = threading.Thread(target=_sweep_forever, args=(interval, stop or threading.Event()), name="kb-sweeper",
                              daemon=True)
    thread.start()
    return thread
