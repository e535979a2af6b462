"""Celery interface to the ingestion pipeline; the work is in kb.library.ingest.pipeline."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from celery import shared_task
from django.conf import settings

from kb import queues
from kb.celery import when_job_lost
from kb.library.events import document_indexed
from kb.library.ingest.pipeline import ingest
from kb.library.models import Source
from kb.library.services import document_job_lost, documents_refresh_stale
from kb.library.sources import schedule
from kb.library.sources.sync import SourceBusy, SyncResult, source_sync
from kb.library.sources.webhooks import sync_follow_up


# The soft limit raises inside the pipeline, which records why; the hard one (prefork pools) kills a
# stuck parser. A job whose pool process is lost or killed is acknowledged and reported to
# _ingest_job_lost, which queues the document again or fails it after KB_INGEST_MAX_ATTEMPTS tries.
# The document's row is the record, so the job keeps no result: sending one then needs the broker only
# (a result would also subscribe the sender to a Redis channel per job).
@shared_task(name="kb.ingest_document", bind=True, acks_late=True, reject_on_worker_lost=False, ignore_result=True,
             soft_time_limit=settings.KB_INGEST_TIME_LIMIT, time_limit=settings.KB_INGEST_TIME_LIMIT + 60)
def ingest_document(self: Any, document_id: int) -> str:
    status = ingest(document_id, worker=self.request.hostname or "")
    if status == "ready":
        document_indexed.send(sender=ingest_document, document_ids=[document_id], sync=False)
    return status


def _ingest_job_lost(document_id: int) -> None:
    """The pipeline records its own failures, so a lost job means a lost process: without this the
    document would sit in its stage until the lease runs out (KB_INGEST_LEASE_SECONDS, 600 s)."""
    document_job_lost(document_id=document_id)


when_job_lost(ingest_document, _ingest_job_lost)


# One run of a source: listing, uploads and the indexing of what changed, in this job (kb.library.sources.sync), so
# its result holds the counts `manage.py sync --wait` prints. The first run of a large source takes long.
SYNC_TIME_LIMIT = 6 * 3600


@shared_task(name="kb.sync_source", soft_time_limit=SYNC_TIME_LIMIT,  # on the ingest queue, the default
             time_limit=SYNC_TIME_LIMIT + 300)
def sync_source(source_id: int, confirm: bool = False) -> dict[str, Any]:
    source = Source.objects.filter(pk=source_id).first()
    if source is None:
        return asdict(SyncResult(status="failed", reason=f"source {source_id} no longer exists"))
    try:
        result = source_sync(source, confirm=confirm)
    except SourceBusy as exc:  # the run under way follows up on the push that queued this one
        return asdict(SyncResult(status="busy", reason=str(exc)))
    sync_follow_up(source_id)  # a push during the run, after its listing: one more run (the lock is released)
    return asdict(result)


# Beat sends this every minute (kb/celery.py). It expires before the next tick: while the ingest worker is
# busy, ticks lapse instead of piling up, and a due source is queued once the queue moves again.
@shared_task(name="kb.sources_due", ignore_result=True)
def sources_due() -> int:
    """Queue a run of each source whose schedule has come round; how many were queued."""
    return sum(queues.send(sync_source.name, source.pk) for source in schedule.sources_due())


# Beat sends this every minute (kb/celery.py), expiring before the next tick as sources_due does.
@shared_task(name="kb.refresh_stale", ignore_result=True)
def refresh_stale() -> int:
    """Re-index a batch of stale documents while the ingest queue is idle; how many were queued."""
    return documents_refresh_stale(batch=settings.KB_REINDEX_STALE_BATCH)
