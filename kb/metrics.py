"""Prometheus `/metrics` (docs/OPERATIONS.md): the figures an operator's Grafana scrapes, read from the
database and Redis when scraped, so web and worker processes need no shared metric files (no
multiprocess mode) and every web process answers the same.

A scrape's cost does not grow with history. The answer figures (kb_answers_total and the
kb_answer_latency_seconds histogram) are counters in one Redis hash, bumped as each answer finishes
(chat.answer_counters, which says why Redis) and read with one HGETALL: counting the stored answers
instead read every answer at each scrape (median 0.15 s at 100,000 answers, 1.2 s at a million on the
2-core machine: docs/measurements/metrics_scrape.md). Counters rather than a window of recent answers
because a histogram is cumulative counters: `rate()` over a window's counts, which fall as answers leave
it, reads every fall as a reset and inflates the rate. Counters lost with Redis's data start again at 0,
which Prometheus reads as a counter reset (`rate()` and `increase()` stay right). The other figures read
state that does not pile up with use: sources and their pending changes, queues, documents.

Off unless KB_METRICS_TOKEN (a bearer token; or its _FILE) or KB_METRICS_NETWORKS (client networks) is set:
then 404, never public by default. With both set, a scrape needs both. Labels name sources only, never
a document, a title or a user.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from collections.abc import Iterator
from datetime import timedelta

import redis
from django.conf import settings
from django.db.models import Count, Sum
from django.http import Http404, HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from accounts.client_address import request_client_address
from chat.answer_counters import answers_counted
from kb import queues
from kb.env import Network
from kb.library.models import Document, Source
from kb.library.sources.selectors import lag_of, with_lag

log = logging.getLogger(__name__)

CHUNK_RATE_WINDOW = 300  # seconds: kb_ingest_chunks_per_second averages the chunks indexed over this window


def _sources() -> Iterator[Metric]:
    now = timezone.now()
    lag = GaugeMetricFamily("kb_source_index_lag_seconds",
                            "Age of the oldest change seen at the source that is not searchable yet (0: none)",
                            labels=["source"])
    last_lag = GaugeMetricFamily("kb_source_last_change_lag_seconds",
                                 "Longest lag (change at the source to searchable) of the last changes made searchable",
                                 labels=["source"])
    success = GaugeMetricFamily("kb_source_last_success_timestamp_seconds",
                                "When a run of the source last ended ok (Unix time)", labels=["source"])
    pending = GaugeMetricFamily("kb_source_files_pending", "Changes seen at the source, not searchable yet",
                                labels=["source"])
    failed = GaugeMetricFamily("kb_source_files_failed", "Files of the source that failed, each with a reason",
                               labels=["source"])
    running = GaugeMetricFamily("kb_source_running", "1 while a run of the source goes on", labels=["source"])
    for source in with_lag(Source.objects.all()):
        figures = lag_of(source)
        lag.add_metric([source.name], figures.lag_seconds(now))
        if source.last_lag_seconds is not None:
            last_lag.add_metric([source.name], source.last_lag_seconds)
        if source.last_success_at is not None:
            success.add_metric([source.name], source.last_success_at.timestamp())
        pending.add_metric([source.name], figures.pending)
        failed.add_metric([source.name], figures.failed)
        running.add_metric([source.name], 1 if source.last_status == Source.RunStatus.RUNNING else 0)
    yield from (lag, last_lag, success, pending, failed, running)


def _queues() -> Iterator[Metric]:
    depth = GaugeMetricFamily("kb_queue_depth", "Jobs waiting in a Celery queue (not those being worked on)",
                              labels=["queue"])
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        for queue in (queues.INGEST, queues.ANSWERS):
            depth.add_metric([queue], client.llen(queue))
    except redis.RedisError:
        log.warning("/metrics: the broker is out of reach; kb_queue_depth left out", exc_info=True)
        return
    finally:
        client.close()
    yield depth


def _documents() -> Iterator[Metric]:
    by_status = dict.fromkeys(Document.Status.values, 0)
    for row in Document.objects.order_by().values("status").annotate(n=Count("pk")):
        by_status[row["status"]] = row["n"]
    documents = GaugeMetricFamily("kb_documents", "Documents by pipeline status", labels=["status"])
    for status, n in by_status.items():
        documents.add_metric([status], n)
    yield documents
    since = timezone.now() - timedelta(seconds=CHUNK_RATE_WINDOW)
    chunks = Document.objects.filter(status=Document.Status.READY, indexed_at__gte=since).aggregate(n=Sum("chunk_count"))
    yield GaugeMetricFamily("kb_ingest_chunks_per_second",
                            f"Chunks indexed per second, averaged over the last {CHUNK_RATE_WINDOW} s",
                            value=(chunks["n"] or 0) / CHUNK_RATE_WINDOW)


def _answers() -> Iterator[Metric]:
    try:
        counted = answers_counted()
    except redis.RedisError:
        log.warning("/metrics: Redis is out of reach; kb_answers_total and kb_answer_latency_seconds left out",
                    exc_info=True)
        return
    outcomes = CounterMetricFamily("kb_answers", "Questions answered, refused (NO ANSWER) or failed, counted as each "
                                   "finished", labels=["outcome"])
    for outcome, n in counted.outcomes.items():
        outcomes.add_metric([outcome], n)
    yield outcomes
    latency = HistogramMetricFamily("kb_answer_latency_seconds",
                                    "Time from the question to the answer's first token (phase=first_token) and to its "
                                    "end (phase=total), counted as each answer finished", labels=["phase"])
    for phase, buckets in counted.buckets.items():
        latency.add_metric([phase], buckets, sum_value=counted.sums[phase])
    yield latency


class KnowledgeBaseCollector(Collector):
    """Every kb_* figure, read from the stored state and the answer counters on each scrape."""

    def collect(self) -> Iterator[Metric]:
        yield from _sources()
        yield from _queues()
        yield from _documents()
        yield from _answers()


REGISTRY = CollectorRegistry(auto_describe=False)  # registering must not query: the collector runs per scrape
REGISTRY.register(KnowledgeBaseCollector())


def _refusal(request: HttpRequest) -> HttpResponse | None:
    """Why this request may not scrape (401 no token, 403 wrong token or network), or None when it may."""
    token, networks = settings.KB_METRICS_TOKEN, settings.KB_METRICS_NETWORKS
    if not token and not networks:
        raise Http404("No such page")
    if networks:
        client = request_client_address(request)
        if client is None or not any(_within(client, network) for network in networks):
            return HttpResponse("Forbidden\n", status=403, content_type="text/plain")
    if token:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            response = HttpResponse("A bearer token is needed\n", status=401, content_type="text/plain")
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return response
        if not hmac.compare_digest(given.strip().encode(), token.encode()):
            return HttpResponse("Forbidden\n", status=403, content_type="text/plain")
    return None


def _within(address: str, network: Network) -> bool:
    try:
        return ipaddress.ip_address(address) in network
    except ValueError:
        return False


@require_GET
@never_cache
def metrics(request: HttpRequest) -> HttpResponse:
    refused = _refusal(request)
    if refused is not None:
        return refused
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
