from __future__ import annotations

import subprocess

from kb.celery import ping


def test_a_real_worker_answers_a_task_through_redis(celery_worker: subprocess.Popen[str]) -> None:
    result = ping.delay("hello")
    assert result.get(timeout=60) == "pong:hello"
    assert celery_worker.poll() is None
