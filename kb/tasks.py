"""Celery interface to the ingestion pipeline; the work is in kb.ingest.pipeline."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from celery.signals import task_failure
from django.conf import settings


# The soft limit raises inside the pipeline, which records why; the hard one (prefork pools) kills a
# stuck parser. A job whose pool process is lost or killed is acknowledged and reported to
# _ingest_job_failed, which queues the document again or fails it after KB_INGEST_MAX_ATTEMPTS tries.
@shared_task(name="kb.ingest_document", acks_late=True, reject_on_worker_lost=False,
             soft_time_limit=settings.KB_INGEST_TIME_LIMIT, time_limit=settings.KB_INGEST_TIME_LIMIT + 60)
def ingest_document(document_id: int) -> str:
    from kb.events import document_indexed
    from kb.ingest.pipeline import ingest

    status = ingest(document_id)
    if status == "ready":
        document_indexed.send(sender=ingest_document, document_ids=[document_id], sync=False)
    return status


@task_failure.connect
def _ingest_job_failed(*, sender: Any = None, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None,
                       **_: Any) -> None:
    """The pipeline records its own failures, so one reported here means the job's process was lost or
    hit the hard time limit. Celery reports it from the worker's main process; without this the
    document would sit in its stage until the lease runs out (KB_INGEST_LEASE_SECONDS, 600 s)."""
    from kb.services import document_job_lost

    if getattr(sender, "name", None) != ingest_document.name:
        return
    document_id = args[0] if args else (kwargs or {})["document_id"]
    document_job_lost(document_id=int(document_id))
