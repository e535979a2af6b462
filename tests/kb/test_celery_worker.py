from __future__ import annotations

import subprocess
import time

import pytest

from kb.celery import ping
from tests.conftest import SharedWorker


def test_a_real_worker_answers_a_task_through_redis(celery_worker: subprocess.Popen[str]) -> None:
    result = ping.delay("hello")
    assert result.get(timeout=60) == "pong:hello"
    assert celery_worker.poll() is None


@pytest.mark.django_db(transaction=True)
def test_the_paused_session_worker_takes_nothing_queued_after_it(_shared_worker: SharedWorker) -> None:
    """Between tests the session's worker is stopped; a task queued right after must wait in Redis for
    whichever worker the next test runs, not vanish into the stopped one (it did: stopped mid-BRPOP)."""
    import redis
    from django.conf import settings

    from kb.queues import INGEST

    _shared_worker.get()
    assert ping.apply_async(("before",), queue=INGEST).get(timeout=60) == "pong:before"
    _shared_worker.pause()
    broker = redis.Redis.from_url(settings.REDIS_URL)
    try:
        ping.apply_async(("after",), queue=INGEST)
        time.sleep(1.5)  # past kombu's one-second BRPOP
        assert broker.llen(INGEST) == 1
    finally:
        broker.delete(INGEST)
