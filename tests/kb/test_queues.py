"""Answers and ingestion on separate queues: a question never waits behind a document."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from typing import Any, cast

import pytest

from kb.celery import app
from kb.queues import ANSWERS, INGEST
from kb.runtime.launcher import WORKER_DATABASE, workers
from tests.chat.conftest import EXPORT_QUESTION, SHIPMENTS
from tests.conftest import ROOT, service_env, start_worker, stop_process
from tests.factories import ingested_document

# Backends opened since the test's worker started (the session's worker keeps a connection of its own) whose
# last statement wrote an answer.
ANSWER_BACKEND = """SELECT pid, backend_start FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'UPDATE "chat_message"%%'
    AND backend_start >= %s"""

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_make_run_starts_one_worker_per_queue_with_deliberate_cpu_shares() -> None:
    by_queue = {worker.queue: worker for worker in workers()}
    assert set(by_queue) == {INGEST, ANSWERS}
    assert by_queue[ANSWERS].env["OMP_NUM_THREADS"] == "1"  # one torch thread per answer process
    assert by_queue[INGEST].niceness > by_queue[ANSWERS].niceness  # answers get the CPU first
    for queue, worker in by_queue.items():
        argv = worker.argv()
        assert argv[argv.index("--queues") + 1] == queue
        # One task at a time per process: each keeps one database connection rather than a pool.
        database = _database_settings(worker.env)
        assert database["CONN_MAX_AGE"] == 300 and "pool" not in database["OPTIONS"], database
    assert "pool" in _database_settings({})["OPTIONS"]  # the web process keeps its bounded pool


def _database_settings(env: dict[str, str]) -> dict[str, Any]:
    """DATABASES['default'] as a process started with `env` sees it."""
    code = "import json; from django.conf import settings; print(json.dumps(settings.DATABASES['default'], default=str))"
    out = subprocess.run([sys.executable, "-c", code], env=service_env(DJANGO_SETTINGS_MODULE="kb.settings", **env),
                         cwd=ROOT, capture_output=True, text=True, check=True, timeout=60).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def test_a_question_is_answered_while_the_ingest_queue_is_full(people: dict[str, Any]) -> None:
    from chat.models import Message
    from chat.services import question_ask
    from kb.library.models import Document
    from kb.library.services import document_upload

    ingested_document(SHIPMENTS, "shipments.md")
    notes = [f"# Note {i}\n\nBody of note {i}.\n".encode() for i in range(3)]
    backlog = [
        document_upload(name=f"queued-{i}.md", stream=io.BytesIO(data), size=len(data)).document
        for i, data in enumerate(notes)
    ]
    worker = start_worker("answers-only", queues=ANSWERS)  # as make run's answer worker: no ingestion
    try:
        answer = question_ask(user=people["alice"], question=EXPORT_QUESTION).answer
        deadline = time.monotonic() + 60
        while Message.objects.get(pk=answer.pk).status not in Message.FINISHED and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        stop_process(worker)
        with app.connection_for_write() as connection:  # later tests' workers must not meet these tasks
            cast(Any, connection.default_channel).queue_purge(INGEST)  # kombu's virtual channel has it
    assert Message.objects.get(pk=answer.pk).status == Message.Status.DONE
    # The documents queued before the question are still waiting for an ingest worker.
    assert set(Document.objects.filter(pk__in=[d.pk for d in backlog]).values_list("status", flat=True)) == {"queued"}


def _answered(user: Any) -> str:
    from chat.models import Message
    from chat.services import question_ask

    answer = question_ask(user=user, question=EXPORT_QUESTION).answer
    deadline = time.monotonic() + 60
    while Message.objects.get(pk=answer.pk).status not in Message.FINISHED and time.monotonic() < deadline:
        time.sleep(0.1)
    return str(Message.objects.get(pk=answer.pk).status)


def test_an_answer_pool_process_keeps_its_database_connection_and_replaces_a_dead_one(people: dict[str, Any]) -> None:
    """Celery closes every connection around each task unless told otherwise (settings.CELERY_DB_REUSE_MAX);
    then each answer opened a new PostgreSQL backend and began with cold catalog caches."""
    from django.db import connection

    ingested_document(SHIPMENTS, "shipments.md")
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        [(began,)] = cursor.fetchall()
    worker = start_worker("answers-keep-a-connection", queues=ANSWERS, pool="prefork", **WORKER_DATABASE)
    try:
        assert _answered(people["alice"]) == "done"
        with connection.cursor() as cursor:
            cursor.execute(ANSWER_BACKEND, [began])
            first = cursor.fetchall()
        assert len(first) == 1, f"the answer's connection was not kept: {first}"
        assert _answered(people["alice"]) == "done"
        with connection.cursor() as cursor:
            cursor.execute(ANSWER_BACKEND, [began])
            assert cursor.fetchall() == first  # the same backend, not a new one with the same query
            cursor.execute("SELECT pg_terminate_backend(%s)", [first[0][0]])
        assert _answered(people["alice"]) == "done"  # a killed connection is replaced, not reused
    finally:
        stop_process(worker)
