"""A worker SIGKILLed mid-embedding leaves the document retryable, never half-indexed."""

from __future__ import annotations

import io
import os
import signal
import time
from typing import Any

import pytest
from django.db import transaction

from kb.library.models import Chunk, Document
from kb.library.services import document_upload
from tests.conftest import start_worker, stop_process

SECTION = (
    "## Procedure {n}\n\nStep {n} of the depot procedure moves pallets from bay {n} to the outbound dock. "
    "The forklift driver confirms the pallet label, scans the bay code, and records the weight in the "
    "handheld before the pallet leaves the bay. Damaged pallets go to the quarantine lane instead, where "
    "the shift lead inspects them within one hour and decides whether the goods can still ship today.\n\n"
)
SECTIONS = 60  # a chunk each: embedding them takes seconds, so the kill lands while it runs, and no more
BIG = "# Depot procedures\n\n" + "".join(SECTION.format(n=n) for n in range(SECTIONS))


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def status_of(document: Document) -> str:
    return str(Document.objects.get(pk=document.pk).status)


def big_document_being_embedded() -> Document:
    """Upload BIG and return once a worker is embedding it."""
    data = BIG.encode()
    with transaction.atomic():
        document = document_upload(name="procedures.md", stream=io.BytesIO(data), size=len(data)).document
    wait_for(lambda: status_of(document) == Document.Status.EMBEDDING, 120, "the embedding stage")
    return document


def assert_indexed_exactly_once(document: Document) -> None:
    document.refresh_from_db()
    assert document.status == Document.Status.READY
    ordinals = list(Chunk.objects.filter(document=document).values_list("ordinal", flat=True))
    assert len(ordinals) == document.chunk_count >= SECTIONS
    assert sorted(ordinals) == list(range(len(ordinals)))


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_sigkill_the_whole_worker_during_embedding_and_another_worker_indexes_it_once_within_seconds() -> None:
    """The worker dies outright (main process and all): nothing reports the lost job, and the lease is 600 s.
    Its heartbeat stops; another worker's (kb.upkeep) queues the document again after three beats (of a second
    here, both workers' KB_WORKER_HEARTBEAT_SECONDS: the default five would make it fifteen seconds of waiting)."""
    beat = {"KB_WORKER_HEARTBEAT_SECONDS": "1"}
    worker = start_worker("worker-to-kill", **beat)
    try:
        document = big_document_being_embedded()
        assert Document.objects.get(pk=document.pk).worker.startswith("worker-to-kill")
        os.killpg(worker.pid, signal.SIGKILL)
        killed = time.monotonic()
        worker.wait(10)
    finally:
        stop_process(worker)

    time.sleep(0.5)
    assert status_of(document) == Document.Status.EMBEDDING  # stuck where it died...
    assert not Chunk.objects.filter(document=document).exists()  # ...with nothing half-written

    other = start_worker("worker-after-the-kill", **beat)  # only now: it would take the first job
    try:
        wait_for(lambda: status_of(document) in (Document.Status.READY, Document.Status.FAILED), 240, "the retry")
    finally:
        stop_process(other)
    assert time.monotonic() - killed < 120, "queued again by the lease, not the heartbeat"
    assert_indexed_exactly_once(document)
    assert document.attempts == 2


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_pool_process_killed_mid_embedding_is_retried_at_once_by_its_worker() -> None:
    """The OOM killer's usual victim is the pool process: the worker's main process reports the lost job
    and the document goes back to the queue at once. No sweeper runs here, and the lease is 600 s."""
    import psutil

    worker = start_worker("worker-pool-process-killed-mid-embedding", queues="ingest", pool="prefork",
                          KB_SWEEP_SECONDS="0")
    try:
        document = big_document_being_embedded()
        [pool_process] = psutil.Process(worker.pid).children()
        pool_process.send_signal(signal.SIGKILL)
        wait_for(lambda: status_of(document) in (Document.Status.READY, Document.Status.FAILED), 240, "the retry")
        assert worker.poll() is None
    finally:
        stop_process(worker)
    assert_indexed_exactly_once(document)
    assert document.attempts == 2


@pytest.mark.django_db
def test_a_document_whose_jobs_keep_getting_lost_fails_with_the_reason(settings: Any) -> None:
    from kb.library.services import document_job_lost

    settings.KB_INGEST_MAX_ATTEMPTS = 2
    data = b"# Notes\n\nA short page."
    document = document_upload(name="notes.md", stream=io.BytesIO(data), size=len(data), enqueue=False).document
    Document.objects.filter(pk=document.pk).update(status=Document.Status.EMBEDDING, attempts=1)
    assert document_job_lost(document_id=document.pk) == Document.Status.QUEUED  # one try left: again, at once
    Document.objects.filter(pk=document.pk).update(status=Document.Status.EXTRACTING, attempts=2)
    assert document_job_lost(document_id=document.pk) == Document.Status.FAILED
    document.refresh_from_db()
    assert (document.failed_stage, document.failure_reason) == (
        Document.Status.EXTRACTING, "the worker stopped while processing it 2 times (too big or too slow to process?)")
    assert document_job_lost(document_id=document.pk) is None  # no longer running: nothing to do
