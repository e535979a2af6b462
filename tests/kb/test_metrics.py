"""Prometheus /metrics (kb.metrics): off by default, a bearer token or client networks to scrape, and
figures read from the real database and Redis: a real ingested document, a synced folder source with
a broken file, and a real answered and a refused question. The answer figures are Redis counters bumped as
each answer finishes: a scrape reads no stored answer, however many there are."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings as django_settings
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from chat import answer_counters
from chat.models import Conversation, Message
from chat.services import ANSWER_LEASE, question_ask
from kb.env import ip_networks
from kb.library.models import Folder, Source
from kb.library.sources.sync import source_sync
from kb.upkeep import expire
from tests.chat.conftest import EXPORT_QUESTION, OOD_QUESTION, SHIPMENTS
from tests.chat.test_api import answered
from tests.factories import ingested_document

TOKEN = "metrics-token-7f3a"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(autouse=True)
def _counters_from_zero() -> Iterator[None]:
    """Earlier tests' answers were counted in the same hash (Redis outlives a test's rolled-back rows)."""
    redis.Redis.from_url(django_settings.REDIS_URL).delete(answer_counters.answers_key())
    yield


def scraped(client: Client, **headers: Any) -> Samples:
    """The samples of a scrape as {(name, sorted labels): value}."""
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


@pytest.mark.django_db
def test_metrics_are_off_unless_a_token_or_networks_are_set(client: Client, settings: Any) -> None:
    settings.KB_METRICS_TOKEN, settings.KB_METRICS_NETWORKS = "", []
    assert client.get("/metrics").status_code == 404
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer anything").status_code == 404


@pytest.mark.django_db
def test_a_token_is_needed_and_checked(client: Client, settings: Any) -> None:
    settings.KB_METRICS_TOKEN, settings.KB_METRICS_NETWORKS = TOKEN, []
    missing = client.get("/metrics")
    assert missing.status_code == 401 and missing["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Basic {TOKEN}").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}x").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200


@pytest.mark.django_db
def test_networks_limit_who_may_scrape(client: Client, settings: Any) -> None:
    settings.KB_METRICS_TOKEN, settings.KB_METRICS_NETWORKS = "", ip_networks(["10.20.0.0/16"])
    assert client.get("/metrics").status_code == 403  # the test client comes from 127.0.0.1
    assert client.get("/metrics", REMOTE_ADDR="10.20.3.4").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="10.21.3.4").status_code == 403
    settings.KB_METRICS_TOKEN = TOKEN  # both set: both are needed
    assert client.get("/metrics", REMOTE_ADDR="10.20.3.4").status_code == 401
    assert client.get("/metrics", REMOTE_ADDR="10.20.3.4", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="10.21.3.4", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 403


@pytest.mark.django_db
@pytest.mark.parametrize("forwarded", ["203.0.113.5:4711", "[2001:db8::7]:4711", "unknown", "203.0.113.5:x"])
def test_behind_a_proxy_writing_ports_the_internet_is_not_the_proxy(client: Client, settings: Any,
                                                                    forwarded: str) -> None:
    """Networks covering the proxy open /metrics only to the proxy itself: a client it forwards with a port (or
    an entry that cannot be read) is that client (or unknown), never the proxy."""
    settings.KB_METRICS_TOKEN, settings.KB_METRICS_NETWORKS = "", ip_networks(["10.20.0.0/16"])
    settings.KB_TRUSTED_PROXIES = ip_networks(["10.20.0.2"])
    assert client.get("/metrics", REMOTE_ADDR="10.20.0.2").status_code == 200  # the proxy's own scrape
    assert client.get("/metrics", REMOTE_ADDR="10.20.0.2", HTTP_X_FORWARDED_FOR=forwarded).status_code == 403
    assert client.get("/metrics", REMOTE_ADDR="10.20.0.2", HTTP_X_FORWARDED_FOR="10.20.9.9:4711").status_code == 200


@pytest.mark.django_db
def test_the_figures_come_from_documents_sources_queues_and_answers(
    client: Client, settings: Any, people: dict[str, Any], tmp_path: Path
) -> None:
    settings.KB_METRICS_TOKEN, settings.KB_METRICS_NETWORKS = TOKEN, []
    settings.KB_ANSWER_BACKEND = "extractive"
    document = ingested_document(SHIPMENTS, "shipments.md")
    share = tmp_path / "share"
    share.mkdir()
    (share / "policy.md").write_text("# Parking\n\nThe visitor car park behind building C opens at seven.\n")
    (share / "broken.md").write_bytes(b"\x00\x01\x02 not text")
    source = Source.objects.create(name="team share", kind="folder", location=str(share),
                                   folder=Folder.objects.create(name="Share"))
    result = source_sync(source)
    assert result.failed == 1, result.summary()
    assert answered(people["alice"], EXPORT_QUESTION).status == Message.Status.DONE
    assert answered(people["alice"], OOD_QUESTION).status == Message.Status.REFUSED

    samples = scraped(client, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    label = (("source", "team share"),)
    source.refresh_from_db()
    assert source.last_success_at is not None
    assert samples[("kb_source_last_success_timestamp_seconds", label)] == pytest.approx(source.last_success_at.timestamp())
    assert samples[("kb_source_index_lag_seconds", label)] == 0  # every change seen is searchable
    assert samples[("kb_source_files_pending", label)] == 0
    assert samples[("kb_source_files_failed", label)] == 1
    assert samples[("kb_source_running", label)] == 0
    assert samples[("kb_source_last_change_lag_seconds", label)] >= 0
    assert samples[("kb_documents", (("status", "ready"),))] == 2  # the upload and the share's good file
    assert samples[("kb_documents", (("status", "queued"),))] == 0  # every status is there, even at 0
    chunks = document.chunk_count + 1
    assert samples[("kb_ingest_chunks_per_second", ())] == pytest.approx(chunks / 300)
    broker = redis.Redis.from_url(django_settings.CELERY_BROKER_URL)
    assert samples[("kb_queue_depth", (("queue", "ingest"),))] == broker.llen("ingest")
    assert ("kb_queue_depth", (("queue", "answers"),)) in samples
    assert samples[("kb_answers_total", (("outcome", "answered"),))] == 1
    assert samples[("kb_answers_total", (("outcome", "refused"),))] == 1
    assert samples[("kb_answers_total", (("outcome", "failed"),))] == 0
    stored = Message.objects.filter(role=Message.Role.ASSISTANT)
    with_total = stored.exclude(total_ms=None)
    assert samples[("kb_answer_latency_seconds_count", (("phase", "total"),))] == with_total.count() == 2
    assert samples[("kb_answer_latency_seconds_sum", (("phase", "total"),))] == pytest.approx(
        sum(m.total_ms or 0.0 for m in with_total) / 1000)
    assert samples[("kb_answer_latency_seconds_bucket", (("le", "+Inf"), ("phase", "total")))] == 2
    first = stored.exclude(first_token_ms=None)
    assert samples[("kb_answer_latency_seconds_count", (("phase", "first_token"),))] == first.count() >= 1
    for bound in ("0.1", "1.0", "60.0"):  # cumulative: the answers at or under each bound
        assert samples[("kb_answer_latency_seconds_bucket", (("le", bound), ("phase", "first_token")))] == len(
            [m for m in first if (m.first_token_ms or 0.0) <= float(bound) * 1000])
    names = {name for name, _ in samples}
    assert not any("shipments" in str(key).lower() for key in samples), "no document titles in labels"
    assert {"kb_source_index_lag_seconds", "kb_queue_depth", "kb_documents", "kb_ingest_chunks_per_second",
            "kb_answer_latency_seconds_bucket", "kb_answers_total"} <= names


def bucket(samples: Samples, phase: str, bound: str) -> float:
    return samples[("kb_answer_latency_seconds_bucket", (("le", bound), ("phase", phase)))]


@pytest.mark.django_db
def test_a_finished_answer_is_counted_in_the_first_bucket_that_holds_it(client: Client, settings: Any) -> None:
    """A bound is inclusive (Prometheus's le), a time over the last bound is only in +Inf, and an answer with no
    times (failed before its first token) is counted by outcome and in no phase."""
    settings.KB_METRICS_TOKEN, settings.KB_METRICS_NETWORKS = TOKEN, []
    answer_counters.answer_finished(Message.Status.DONE, first_token_ms=100.0, total_ms=60_000.5)
    answer_counters.answer_finished(Message.Status.REFUSED, first_token_ms=100.5, total_ms=2_000.0)
    answer_counters.answer_finished(Message.Status.FAILED)
    samples = scraped(client, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert [samples[("kb_answers_total", (("outcome", o),))] for o in ("answered", "refused", "failed")] == [1, 1, 1]
    assert [bucket(samples, "first_token", b) for b in ("0.1", "0.25", "+Inf")] == [1, 2, 2]
    assert [bucket(samples, "total", b) for b in ("1.0", "2.0", "60.0", "+Inf")] == [0, 1, 1, 2]
    assert samples[("kb_answer_latency_seconds_count", (("phase", "total"),))] == 2
    assert samples[("kb_answer_latency_seconds_sum", (("phase", "total"),))] == pytest.approx(62.0005)
    assert samples[("kb_answer_latency_seconds_sum", (("phase", "first_token"),))] == pytest.approx(0.2005)


@pytest.mark.django_db
def test_an_answer_failed_for_its_lost_job_is_counted(client: Client, settings: Any, people: dict[str, Any]) -> None:
    """The other way an answer finishes: the sweep fails one whose lease ran out (chat.services._fail_lost)."""
    settings.KB_METRICS_TOKEN, settings.KB_METRICS_NETWORKS = TOKEN, []
    asked = question_ask(user=people["alice"], question="Where is the visitor car park?", enqueue=False)
    Message.objects.filter(pk=asked.answer.pk).update(created_at=timezone.now() - timedelta(days=1))
    assert expire(ANSWER_LEASE) == {"answers failed": 1}
    samples = scraped(client, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert samples[("kb_answers_total", (("outcome", "failed"),))] == 1
    assert samples[("kb_answer_latency_seconds_count", (("phase", "total"),))] == 0


def _finish_answers(n: int) -> None:
    for i in range(n):
        answer_counters.answer_finished(Message.Status.DONE, first_token_ms=200.0 + i, total_ms=1_500.0)


@pytest.mark.django_db
def test_processes_finishing_answers_at_once_lose_no_count(client: Client, settings: Any) -> None:
    """Web processes and workers all count into the one hash, and the counts outlive the processes."""
    settings.KB_METRICS_TOKEN, settings.KB_METRICS_NETWORKS = TOKEN, []
    fork = multiprocessing.get_context("fork")
    processes = [fork.Process(target=_finish_answers, args=(250,)) for _ in range(4)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    samples = scraped(client, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert samples[("kb_answers_total", (("outcome", "answered"),))] == 1000
    assert bucket(samples, "first_token", "0.25") == 4 * 51 and bucket(samples, "first_token", "0.5") == 1000
    assert bucket(samples, "total", "1.0") == 0 and bucket(samples, "total", "2.0") == 1000
    assert connection.settings_dict["NAME"] in answer_counters.answers_key()  # a scratch database counts apart


@pytest.mark.django_db
def test_a_scrape_reads_no_stored_answer_however_many_there_are(
    client: Client, settings: Any, people: dict[str, Any]
) -> None:
    settings.KB_METRICS_TOKEN, settings.KB_METRICS_NETWORKS = TOKEN, []

    def scrape_queries() -> list[str]:
        with CaptureQueriesContext(connection) as queries:
            scraped(client, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
        return [query["sql"] for query in queries]

    few = scrape_queries()
    conversation = Conversation.objects.create(owner=people["alice"], title="many")
    Message.objects.bulk_create(
        Message(conversation=conversation, role=Message.Role.ASSISTANT, status=Message.Status.DONE,
                first_token_ms=300.0, total_ms=900.0, finished_at=timezone.now()) for _ in range(2000))
    many = scrape_queries()
    assert len(many) == len(few)
    assert not [sql for sql in many if "chat_message" in sql], "a scrape must not read the stored answers"


@pytest.mark.django_db
def test_without_redis_the_answer_figures_are_left_out_and_answers_still_finish(
    client: Client, settings: Any
) -> None:
    settings.KB_METRICS_TOKEN, settings.KB_METRICS_NETWORKS = TOKEN, []
    settings.REDIS_URL = settings.CELERY_BROKER_URL = "redis://127.0.0.1:9/0"  # the discard port: nothing listens
    answer_counters._redis.cache_clear()
    try:
        answer_counters.answer_finished(Message.Status.DONE, first_token_ms=100.0, total_ms=200.0)  # logs, does not raise
        samples = scraped(client, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    finally:
        answer_counters._redis.cache_clear()
    names = {name for name, _ in samples}
    assert "kb_documents" in names
    assert not names & {"kb_answers_total", "kb_answer_latency_seconds_count", "kb_queue_depth"}
