"""Celery interface to answer production; the work is chat.services.answer_produce."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="chat.answer_message", acks_late=True, ignore_result=True)
def answer_message(message_id: int, job_id: str | None = None) -> str | None:
    from chat.services import answer_produce

    return answer_produce(message_id=message_id, job_id=job_id)
