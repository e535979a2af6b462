"""The periodic sweep that heals lost work: documents re-queued, expired answers failed.

It runs in a daemon thread of every Celery worker (started on `worker_ready`, hooked up in
chat/tasks.py), so it needs no extra process; the sweeps are conditional updates, so
several workers sweeping at once do each thing once. It lives in chat, the top layer,
because it sweeps both chat's answers and kb's documents.

Beside it, each worker's heartbeat: every KB_WORKER_HEARTBEAT_SECONDS the worker renews a key
in Redis that expires after three beats, fails the running answers of any worker whose key
has expired and queues its documents again. A worker killed outright (main process and all) is
noticed in about three beats, not after the answer's or the document's lease; a thread, not the
task loop, beats, so a busy worker stays alive.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

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


PRESENCE = "kb:worker-alive:{}"


def _presence(client: Any) -> Callable[[str], bool]:
    return lambda worker: bool(client.exists(PRESENCE.format(worker)))


def heartbeat(client: Any, worker: str, interval: float) -> tuple[int, int]:
    """Say `worker` is alive for three beats; fail the answers, and queue again the documents, of the workers
    that stopped saying so. Returns (answers failed, documents queued again or failed)."""
    from chat.services import answers_of_silent_workers
    from kb.library.services import documents_of_silent_workers

    silence = 3 * interval
    client.set(PRESENCE.format(worker), "1", px=int(silence * 1000))
    if int(client.info("server")["uptime_in_seconds"]) <= silence:
        # Redis started again lately, without the keys: a live worker may not have beaten since.
        return 0, 0
    before, alive = timezone.now() - timedelta(seconds=silence), _presence(client)
    failed = answers_of_silent_workers(alive=alive, before=before)
    requeued = documents_of_silent_workers(alive=alive, before=before)
    if failed or requeued:
        log.warning("workers silent for %.0f s: failed %d answers, queued %d documents again", silence, failed,
                    requeued)
    return failed, requeued


def _beat_forever(worker: str, interval: float, stop: threading.Event) -> None:
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    while True:
        try:
            heartbeat(client, worker, interval)
        except Exception:  # Redis or the database may be restarting: beat again next time
            log.exception("heartbeat failed")
        finally:
            connection.close()
        if stop.wait(interval):
            return


def start_heartbeat(worker: str, stop: threading.Event | None = None) -> threading.Thread | None:
    """Beat every KB_WORKER_HEARTBEAT_SECONDS in a daemon thread; None when switched off (0)."""
    interval = float(settings.KB_WORKER_HEARTBEAT_SECONDS)
    if interval <= 0 or not worker:
        return None
    thread = threading.Thread(target=_beat_forever, args=(worker, interval, stop or threading.Event()),
                              name="kb-heartbeat", daemon=True)
    thread.start()
    return thread
