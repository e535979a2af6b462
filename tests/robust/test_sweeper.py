"""Issue 12 item 6: lost work heals itself. Expired answers fail (and their readers hear it),
stuck documents are re-queued, and the embedded broker keeps queued tasks across a restart.

Before: an answer whose worker died stayed "running" forever, a document stuck in a stage
or queued after a broker restart was never re-queued, and a Redis restart lost every task.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction
from django.utils import timezone

from chat.events import group_name
from chat.models import Message
from chat.services import ANSWER_LEASE, question_ask
from kb.library.models import Document
from kb.library.services import DOCUMENT_LEASE, document_upload
from kb.runtime import embedded
from kb.upkeep import PRESENCE, expire, heartbeat, leases, orphaned, sweep, worker_started
from tests.chat.conftest import EXPORT_QUESTION, SHIPMENTS
from tests.chat.openai_stub import StubOpenAI
from tests.conftest import start_worker, stop_process
from tests.kb.test_worker_killed import wait_for


@contextmanager
def listening_to(conversation_id: int) -> Iterator[Any]:
    """What a websocket reader of the conversation receives: its group on the real channel layer."""
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(group_name(conversation_id), channel)

    async def receive() -> dict[str, Any]:
        return dict((await asyncio.wait_for(layer.receive(channel), 90))["event"])

    yield async_to_sync(receive)


def upload(name: str, text: str, **kwargs: Any) -> Document:
    data = text.encode()
    return document_upload(name=name, stream=io.BytesIO(data), size=len(data), **kwargs).document


@pytest.mark.django_db(transaction=True)
def test_expired_answers_fail_and_their_readers_are_told(people: dict[str, Any], settings: Any) -> None:
    settings.KB_ANSWER_LEASE_SECONDS = 60
    long_ago = timezone.now() - timedelta(seconds=120)
    lost = question_ask(user=people["alice"], question="running when its worker died?", enqueue=False).answer
    never_started = question_ask(user=people["alice"], question="its job was lost?", enqueue=False).answer
    busy = question_ask(user=people["alice"], question="still being answered?", enqueue=False).answer
    Message.objects.filter(pk=lost.pk).update(status=Message.Status.RUNNING, started_at=long_ago)
    Message.objects.filter(pk=never_started.pk).update(created_at=long_ago)
    Message.objects.filter(pk=busy.pk).update(status=Message.Status.RUNNING, started_at=timezone.now())

    with listening_to(lost.conversation_id) as receive:
        assert expire(ANSWER_LEASE) == {"answers failed": 2}
        event = receive()
    assert event["type"] == "error" and event["message"] == lost.pk and "ask again" in event["error"]
    states = dict(Message.objects.filter(pk__in=[lost.pk, never_started.pk, busy.pk]).values_list("pk", "status"))
    assert states == {lost.pk: "failed", never_started.pk: "failed", busy.pk: "running"}
    assert expire(ANSWER_LEASE) == {}  # once


@pytest.mark.django_db
def test_stuck_documents_are_requeued_and_repeat_offenders_fail(
    settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.KB_INGEST_LEASE_SECONDS, settings.KB_INGEST_MAX_ATTEMPTS = 60, 3
    long_ago = timezone.now() - timedelta(seconds=120)
    died = upload("died.md", "# Died\n\nwhile extracting", enqueue=False)
    killer = upload("killer.md", "# Killer\n\nkills every worker", enqueue=False)
    lost = upload("lost.md", "# Lost\n\nqueued before the broker restarted", enqueue=False)
    working = upload("working.md", "# Working\n\nright now", enqueue=False)
    Document.objects.filter(pk=died.pk).update(status="extracting", attempts=1, updated_at=long_ago)
    Document.objects.filter(pk=killer.pk).update(status="embedding", attempts=3, updated_at=long_ago)
    Document.objects.filter(pk=lost.pk).update(updated_at=long_ago)
    Document.objects.filter(pk=working.pk).update(status="chunking", attempts=1, updated_at=timezone.now())

    with django_capture_on_commit_callbacks() as queued:
        assert expire(DOCUMENT_LEASE) == {"documents queued again": 2, "documents failed": 1}
    assert len(queued) == 2
    rows = {d.pk: d for d in Document.objects.all()}
    assert (rows[died.pk].status, rows[lost.pk].status, rows[working.pk].status) == ("queued", "queued", "chunking")
    assert (rows[killer.pk].status, rows[killer.pk].failed_stage) == ("failed", "embedding")
    assert "stopped while processing it 3 times" in rows[killer.pk].failure_reason
    with django_capture_on_commit_callbacks() as queued:
        assert expire(DOCUMENT_LEASE) == {}  # sent again once per lease at most
    assert not queued


def _answer_whose_worker_dies(people: dict[str, Any], env: dict[str, str], *, worker: dict[str, str],
                              replacement: dict[str, str]) -> tuple[Message, dict[str, Any]]:
    """Ask; SIGKILL the worker (`start_worker(**worker)`, all its processes) while the answer waits on the
    model server; start `replacement`; return the answer and the first error event its readers hear."""
    with StubOpenAI(["Press", " Export", " now", " [1]", "."], pause_after=2) as stub:
        env = {"KB_ANSWER_BACKEND": "openai", "KB_OPENAI_BASE_URL": stub.url, **env}
        process = start_worker(**worker, **env)
        try:
            with transaction.atomic():
                answer = question_ask(user=people["alice"], question=EXPORT_QUESTION).answer
            assert stub.paused.wait(90), "the worker never reached the model server"
            with listening_to(answer.conversation_id) as receive:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
                assert Message.objects.get(pk=answer.pk).status == Message.Status.RUNNING
                stub.resume()
                started_again = start_worker(**replacement, **env)
                try:
                    event = receive()
                    while event["type"] != "error":
                        event = receive()
                finally:
                    stop_process(started_again)
        finally:
            stop_process(process)
    answer.refresh_from_db()
    assert answer.status == Message.Status.FAILED and event["message"] == answer.pk
    return answer, event


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_sigkill_the_worker_mid_answer_and_the_reader_hears_it_failed(
    corpus: dict[str, Document], people: dict[str, Any]
) -> None:
    """Killed outright, main process and all, and never started again under its name: another worker's
    heartbeat (kb.upkeep) notices its silence and fails the answer in seconds, not after the lease."""
    answer, _ = _answer_whose_worker_dies(people, {"KB_WORKER_HEARTBEAT_SECONDS": "1", "KB_SWEEP_SECONDS": "0"},
                                          worker={"name": "worker-killed-mid-answer"},
                                          replacement={"name": "worker-after-the-kill"})
    assert answer.error.startswith("worker lost (worker-killed-mid-answer"), answer.error
    assert (answer.finished_at - answer.started_at).total_seconds() < 60  # the lease is 420 s


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_started_again_under_its_name_fails_the_answer_it_died_with_at_once(
    corpus: dict[str, Document], people: dict[str, Any]
) -> None:
    """`make run` starts a dead worker again under its old name (kb.runtime.launcher): the answer it was
    producing fails as it starts, not when the lease (420 s by default) runs out. No sweeper runs here."""
    name = f"answers-started-again-{os.getpid()}@localhost"
    answer, _ = _answer_whose_worker_dies(people, {"KB_SWEEP_SECONDS": "0"},
                                          worker={"pool": "prefork", "hostname": name}, replacement={"hostname": name})
    assert answer.worker == name and answer.error.startswith("worker lost")
    assert (answer.finished_at - answer.started_at).total_seconds() < 60


@pytest.mark.django_db(transaction=True)
def test_only_answers_the_worker_claimed_before_it_started_are_orphans(people: dict[str, Any]) -> None:
    started = timezone.now()
    answers = {}
    for key, worker, claimed in (("died with it", "a@host", started - timedelta(seconds=5)),
                                 ("another worker's", "b@host", started - timedelta(seconds=5)),
                                 ("claimed since", "a@host", started + timedelta(seconds=1)),
                                 ("no worker named", "", started - timedelta(seconds=5))):
        answer = question_ask(user=people["alice"], question=key, enqueue=False).answer
        Message.objects.filter(pk=answer.pk).update(status=Message.Status.RUNNING, worker=worker, started_at=claimed)
        answers[key] = answer.pk
    assert orphaned(ANSWER_LEASE, worker="a@host", before=started) == {"answers failed": 1}
    assert orphaned(ANSWER_LEASE, worker="", before=started) == {}
    statuses = dict(Message.objects.filter(pk__in=answers.values()).values_list("pk", "status"))
    assert {key: statuses[pk] for key, pk in answers.items()} == {
        "died with it": "failed", "another worker's": "running", "claimed since": "running", "no worker named": "running"}


def running_documents(cases: tuple[tuple[str, str, Any, str], ...]) -> dict[str, int]:
    """A document per (key, worker that claimed it, when its row last moved, status)."""
    documents = {}
    for key, worker, moved, status in cases:
        document = upload(f"{key}.md", SHIPMENTS.replace("Shipments", key), enqueue=False)
        Document.objects.filter(pk=document.pk).update(status=status, worker=worker, updated_at=moved, attempts=1)
        documents[key] = document.pk
    return documents


def statuses_of(documents: dict[str, int]) -> dict[str, str]:
    found = dict(Document.objects.filter(pk__in=documents.values()).values_list("pk", "status"))
    return {key: found[pk] for key, pk in documents.items()}


@pytest.mark.django_db
def test_only_documents_the_worker_claimed_before_it_started_are_orphans(django_capture_on_commit_callbacks: Any) -> None:
    started = timezone.now()
    documents = running_documents((("died-with-it", "a@host", started - timedelta(seconds=5), "embedding"),
                                   ("another-workers", "b@host", started - timedelta(seconds=5), "extracting"),
                                   ("moved-since", "a@host", started + timedelta(seconds=1), "embedding"),
                                   ("in-process", "", started - timedelta(seconds=5), "chunking"),
                                   ("finished", "a@host", started - timedelta(seconds=5), "ready")))
    with django_capture_on_commit_callbacks() as queued:
        assert orphaned(DOCUMENT_LEASE, worker="a@host", before=started) == {"documents queued again": 1}
        assert orphaned(DOCUMENT_LEASE, worker="", before=started) == {}
    assert len(queued) == 1
    assert statuses_of(documents) == {"died-with-it": "queued", "another-workers": "extracting",
                                      "moved-since": "embedding", "in-process": "chunking", "finished": "ready"}


def redis_up_for(client: Any, seconds: float) -> None:
    """Until the session's Redis has run `seconds` (another test may have just restarted it)."""
    wait_for(lambda: int(client.info("server")["uptime_in_seconds"]) > seconds, seconds + 5, "Redis's uptime")


@pytest.mark.django_db
def test_only_running_work_of_silent_workers_from_before_their_silence_is_failed_or_queued_again(
    people: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    import redis
    from django.conf import settings

    now = timezone.now()
    answers = {}
    for key, worker, claimed, status in (("silent", "gone@host", now - timedelta(seconds=30), "running"),
                                         ("alive", "here@host", now - timedelta(seconds=30), "running"),
                                         ("just claimed", "gone@host", now, "running"),
                                         ("queued", "", now - timedelta(seconds=30), "pending")):
        answer = question_ask(user=people["alice"], question=key, enqueue=False).answer
        Message.objects.filter(pk=answer.pk).update(status=status, worker=worker, started_at=claimed)
        answers[key] = answer.pk
    documents = running_documents((("silent", "gone@host", now - timedelta(seconds=30), "embedding"),
                                   ("alive", "here@host", now - timedelta(seconds=30), "extracting"),
                                   ("just-moved", "gone@host", now, "embedding"),
                                   ("in-process", "", now - timedelta(seconds=30), "chunking")))
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(PRESENCE.format("gone@host"))
    redis_up_for(client, 15)
    with django_capture_on_commit_callbacks() as queued:
        # Says here@host is alive, then ends the silent worker's work.
        assert heartbeat(client, "here@host", 5.0) == {"answers failed": 1, "documents queued again": 1}
        assert client.pttl(PRESENCE.format("here@host")) > 14_000
        assert heartbeat(client, "here@host", 5.0) == {}
    assert len(queued) == 1  # the silent worker's document, sent to the ingest queue once
    statuses = dict(Message.objects.filter(pk__in=answers.values()).values_list("pk", "status"))
    assert {key: statuses[pk] for key, pk in answers.items()} == {
        "silent": "failed", "alive": "running", "just claimed": "running", "queued": "pending"}
    assert Message.objects.get(pk=answers["silent"]).error.startswith("worker lost (gone@host stopped)")
    assert statuses_of(documents) == {"silent": "queued", "alive": "extracting", "just-moved": "embedding",
                                      "in-process": "chunking"}
    client.delete(PRESENCE.format("here@host"))


@pytest.mark.django_db
def test_the_apps_register_their_leases_and_each_pass_ends_the_work_of_both(
    people: dict[str, Any], settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    """kb.upkeep imports neither app: chat and the documents app register their leases from AppConfig.ready, and
    the sweep and a worker's start go through that registry, so one pass ends an answer and a document."""
    assert {lease.work: lease for lease in leases()} == {"answers": ANSWER_LEASE, "documents": DOCUMENT_LEASE}
    settings.KB_ANSWER_LEASE_SECONDS = settings.KB_INGEST_LEASE_SECONDS = 60
    started, long_ago = timezone.now(), timezone.now() - timedelta(seconds=120)
    died_with = question_ask(user=people["alice"], question="running when a@host died?", enqueue=False).answer
    Message.objects.filter(pk=died_with.pk).update(status=Message.Status.RUNNING, worker="a@host",
                                                   started_at=started - timedelta(seconds=5))
    documents = running_documents((("died-with-a", "a@host", started - timedelta(seconds=5), "embedding"),))
    with django_capture_on_commit_callbacks() as queued:
        assert worker_started("a@host", started) == {"answers failed": 1, "documents queued again": 1}
    assert len(queued) == 1 and statuses_of(documents) == {"died-with-a": "queued"}
    assert Message.objects.get(pk=died_with.pk).status == Message.Status.FAILED

    never_produced = question_ask(user=people["alice"], question="its job was lost?", enqueue=False).answer
    Message.objects.filter(pk=never_produced.pk).update(created_at=long_ago)
    Document.objects.filter(pk=documents["died-with-a"]).update(updated_at=long_ago)  # and its job lost too
    with django_capture_on_commit_callbacks() as queued:
        assert sweep() == {"answers failed": 1, "documents queued again": 1}
        assert sweep() == {}
    assert len(queued) == 1 and Message.objects.get(pk=never_produced.pk).status == Message.Status.FAILED


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_sigkill_a_pool_process_mid_answer_and_the_reader_hears_it_at_once(
    corpus: dict[str, Document], people: dict[str, Any]
) -> None:
    """The OOM killer's usual victim is the pool process, not the worker: its main process lives on and
    reports the lost job, so the answer fails in seconds instead of after its lease (420 s by default).
    No sweeper runs here, so nothing else could fail it."""
    import psutil

    with StubOpenAI(["Press", " Export", " now", " [1]", "."], pause_after=2) as stub:
        env = {"KB_ANSWER_BACKEND": "openai", "KB_OPENAI_BASE_URL": stub.url, "KB_SWEEP_SECONDS": "0"}
        worker = start_worker("worker-pool-process-killed", pool="prefork", **env)
        try:
            with transaction.atomic():
                answer = question_ask(user=people["alice"], question=EXPORT_QUESTION).answer
            assert stub.paused.wait(90), "the worker never reached the model server"
            with listening_to(answer.conversation_id) as receive:
                [pool_process] = psutil.Process(worker.pid).children()
                pool_process.send_signal(signal.SIGKILL)
                event = receive()
                while event["type"] != "error":
                    event = receive()
            answer.refresh_from_db()
            assert answer.status == Message.Status.FAILED and event["message"] == answer.pk
            assert answer.error.startswith("worker lost") and event["error"] == answer.error.removeprefix("worker lost: ")
            assert (answer.finished_at - answer.started_at).total_seconds() < 30
            # The worker lives on, and its new pool process answers the next question.
            stub.resume()
            with transaction.atomic():
                again = question_ask(user=people["alice"], question=EXPORT_QUESTION).answer
            with listening_to(again.conversation_id) as receive:
                event = receive()
                while event["type"] not in ("done", "error", "refused"):
                    event = receive()
            assert event["type"] == "done" and worker.poll() is None
        finally:
            stop_process(worker)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_redis_restart_loses_no_queued_work(people: dict[str, Any]) -> None:
    import redis
    from django.conf import settings

    with transaction.atomic():
        documents = [upload(f"restart-{n}.md", SHIPMENTS.replace("Shipments", f"Shipments {n}"), public=True)
                     for n in range(3)]
        answer = question_ask(user=people["alice"], question=EXPORT_QUESTION).answer
    # And one a worker was indexing when it died, before the restart: no heartbeat says it is alive.
    [orphan] = running_documents((("orphan", "died-before-the-restart@host", timezone.now() - timedelta(seconds=30),
                                   "embedding"),)).values()
    embedded.stop_redis()  # SIGTERM: the append-only file is flushed, as on any clean restart
    assert embedded.start_redis().started_here
    # Every presence key went with the restart: until live workers have beaten again, none is taken for dead.
    assert heartbeat(redis.Redis.from_url(settings.REDIS_URL), "just-restarted@host", 5.0) == {}
    assert Document.objects.get(pk=orphan).status == Document.Status.EMBEDDING
    # Beating every second, it takes the orphan's worker for dead three seconds after Redis started (five: fifteen).
    worker = start_worker("worker-after-redis-restart", KB_WORKER_HEARTBEAT_SECONDS="1")
    try:
        ids = [d.pk for d in documents] + [orphan]  # the orphan: queued again by the new worker's heartbeat
        wait_for(lambda: set(Document.objects.filter(pk__in=ids).values_list("status", flat=True)) == {"ready"},
                 180, "the queued documents")
        wait_for(lambda: Message.objects.get(pk=answer.pk).status in Message.FINISHED, 120, "the queued answer")
    finally:
        stop_process(worker)
    assert Message.objects.get(pk=answer.pk).status in (Message.Status.DONE, Message.Status.REFUSED)
