"""Celery interface to answer production; the work is chat.services.answer_produce."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.conf import settings

from chat.services import answer_job_lost, answer_produce
from kb.celery import when_job_lost


# The answer itself stops at KB_ANSWER_TIMEOUT; these limits catch a generator that ignores it.
# A lost pool process is not retried (as documents are): the job is acknowledged and the answer
# fails at once (_answer_job_lost), so a question that kills its process cannot kill the next one.
@shared_task(name="chat.answer_message", bind=True, acks_late=True, reject_on_worker_lost=False, ignore_result=True,
             soft_time_limit=int(settings.KB_ANSWER_TIMEOUT) + 30, time_limit=int(settings.KB_ANSWER_TIMEOUT) + 60)
def answer_message(self: Any, message_id: int, job_id: str | None = None, language: str | None = None) -> str | None:
    """`language`: the asker's when they asked (what the answer's own sentences are written in)."""
    return answer_produce(message_id=message_id, job_id=job_id, worker=self.request.hostname or "", language=language)


def _answer_job_lost(message_id: int, job_id: str | None = None, language: str | None = None) -> None:
    """answer_produce never raises for a failed answer, so a lost job means a lost process: without
    this, the reader would wait out the whole lease. Takes answer_message's arguments, `language` unused
    (the lost-job sentence is stored as written and translated where it is shown)."""
    answer_job_lost(message_id=message_id, job_id=job_id)


when_job_lost(answer_message, _answer_job_lost)
