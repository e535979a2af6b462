"""Celery interface to answer production; the work is chat.services.answer_produce."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from celery.signals import worker_process_init, worker_ready

from chat import conf


# The answer itself stops at KB_ANSWER_TIMEOUT; these limits catch a generator that ignores it.
@shared_task(name="chat.answer_message", acks_late=True, ignore_result=True,
             soft_time_limit=int(conf.answer_timeout()) + 30, time_limit=int(conf.answer_timeout()) + 60)
def answer_message(message_id: int, job_id: str | None = None) -> str | None:
    from chat.services import answer_produce

    return answer_produce(message_id=message_id, job_id=job_id)


@worker_process_init.connect
def _load_the_embedding_model(**_: Any) -> None:
    """Each worker process loads the model and traces its query encoder as it starts (after the fork:
    torch's thread pools are not fork-safe), so no question waits seconds for them on a process's first answer."""
    from kb.ingest import embedding

    embedding.query_encoder()


@worker_ready.connect
def _start_sweeper(**_: object) -> None:
    """Every worker heals lost work (chat.sweeper)."""
    from chat.sweeper import start

    start()
