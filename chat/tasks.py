"""Celery interface to answer production; the work is chat.services.answer_produce."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from celery.signals import worker_process_init, worker_ready
from django.conf import settings

from kb.celery import when_job_lost

log = logging.getLogger(__name__)


# The answer itself stops at KB_ANSWER_TIMEOUT; these limits catch a generator that ignores it.
# A lost pool process is not retried (as documents are): the job is acknowledged and the answer
# fails at once (_answer_job_lost), so a question that kills its process cannot kill the next one.
@shared_task(name="chat.answer_message", bind=True, acks_late=True, reject_on_worker_lost=False, ignore_result=True,
             soft_time_limit=int(settings.KB_ANSWER_TIMEOUT) + 30, time_limit=int(settings.KB_ANSWER_TIMEOUT) + 60)
def answer_message(self: Any, message_id: int, job_id: str | None = None, language: str | None = None) -> str | None:
    """`language`: the asker's when they asked (what the answer's own sentences are written in)."""
    from chat.services import answer_produce

    return answer_produce(message_id=message_id, job_id=job_id, worker=self.request.hostname or "", language=language)


def _answer_job_lost(message_id: int, job_id: str | None = None, language: str | None = None) -> None:
    """answer_produce never raises for a failed answer, so a lost job means a lost process: without
    this, the reader would wait out the whole lease. Takes answer_message's arguments, `language` unused
    (the lost-job sentence is stored as written and translated where it is shown)."""
    from chat.services import answer_job_lost

    answer_job_lost(message_id=message_id, job_id=job_id)


when_job_lost(answer_message, _answer_job_lost)


@worker_process_init.connect
def _load_the_embedding_model(**_: Any) -> None:
    """Each worker process loads the model as it starts (after the fork: torch's thread pools are not
    fork-safe), and one that serves answers traces its query encoder too (57 MiB more, which an ingest
    process would never use), so no question waits seconds for them on a process's first answer."""
    from kb import queues
    from kb.celery import app
    from kb.text import embedding

    embedding.model()
    if queues.ANSWERS in app.amqp.queues.consume_from:  # the worker's --queues, which its pool processes inherit
        embedding.query_encoder()


@worker_ready.connect
def _start_sweeper(sender: Any = None, **_: object) -> None:
    """Every worker heals lost work (chat.sweeper), starting with the answers it was producing and the
    documents it was indexing when it died, if it did: those its name claimed before it started; then it
    beats, failing the answers and queueing again the documents of workers that stopped beating."""
    from chat.services import answers_orphaned
    from chat.sweeper import start, start_heartbeat
    from kb.library.services import documents_orphaned

    controller = getattr(sender, "controller", None)  # sent by the worker's consumer; its controller is the worker
    if controller is not None:
        try:
            answers_orphaned(worker=controller.hostname, before=controller.startup_time)
            documents_orphaned(worker=controller.hostname, before=controller.startup_time)
        except Exception:  # the database may be restarting too: their lease still ends them
            log.exception("could not end the work this worker was doing when it stopped")
        start_heartbeat(controller.hostname)
    start()
