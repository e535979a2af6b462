"""Celery interface to the ingestion pipeline; the work is in kb.ingest.pipeline."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="kb.ingest_document", acks_late=True)
def ingest_document(document_id: int) -> str:
    from kb.ingest.pipeline import ingest
    from search.stats import lexeme_stats_schedule

    status = ingest(document_id)
    if status == "ready":
        lexeme_stats_schedule()  # in-process (--sync) ingestion refreshes the statistics itself
    return status
