"""Celery interface to the ingestion pipeline; the work is in kb.ingest.pipeline."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings


# The soft limit raises inside the pipeline, which records why; the hard one (prefork pools)
# kills a stuck parser, and the sweeper re-queues or fails the document after its lease.
@shared_task(name="kb.ingest_document", acks_late=True, soft_time_limit=settings.KB_INGEST_TIME_LIMIT,
             time_limit=settings.KB_INGEST_TIME_LIMIT + 60)
def ingest_document(document_id: int) -> str:
    from kb.events import document_indexed
    from kb.ingest.pipeline import ingest

    status = ingest(document_id)
    if status == "ready":
        document_indexed.send(sender=ingest_document, document_ids=[document_id], sync=False)
    return status
