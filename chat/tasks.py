"""Celery interface to answer production; the work is chat.services.answer_produce."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from celery.signals import task_failure, worker_process_init, worker_ready

from chat import conf


# The answer itself stops at KB_ANSWER_TIMEOUT; these limits catch a generator that ignores it.
# A lost pool process is not retried (as documents are): the job is acknowledged and the answer
# fails at once (_answer_job_failed), so a question that kills its process cannot kill the next one.
@shared_task(name="chat.answer_message", acks_late=True, reject_on_worker_lost=False, ignore_result=True,
             soft_time_limit=int(conf.answer_timeout()) + 30, time_limit=int(conf.answer_timeout()) + 60)
def answer_message(message_id: int, job_id: str | None = None) -> str | None:
    from chat.services import answer_produce

    return answer_produce(message_id=message_id, job_id=job_id)


@task_failure.connect
def _answer_job_failed(*, sender: Any = None, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None,
                       **_: Any) -> None:
    """answer_produce never raises for a failed answer, so a failure reported here means its process
    was lost (SIGKILL, the OOM killer) or hit the hard time limit. Celery reports it from the worker's
    main process and acknowledges the job: without this, the reader waits out the whole lease."""
    from chat.services import answer_job_lost

    if getattr(sender, "name", None) != answer_message.name:
        return
    call = dict(zip(("message_id", "job_id"), args, strict=False)) | (kwargs or {})
    answer_job_lost(message_id=int(call["message_id"]), job_id=call.get("job_id"))


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
