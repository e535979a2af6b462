"""Counters of the finished answers, by outcome and by time to first token and to the end: what /metrics's
kb_answers_total and kb_answer_latency_seconds read (kb.metrics, docs/OPERATIONS.md "Metrics").

They are bumped here as each answer finishes (chat.services), so that a scrape reads one Redis hash instead
of every stored answer: its cost stays flat as history grows (docs/measurements/metrics_scrape.md). Redis
because every web, worker and sweeper process already shares it and HINCRBY is atomic; the embedded one
keeps its data across restarts. The hash is named after the database, so a scratch database (tests,
benchmarks, `manage.py evaluate`) on the same Redis never counts into the live one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cache

import redis
from django.conf import settings

from chat.models import Message

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0)  # seconds
OUTCOMES: dict[str, str] = {Message.Status.DONE: "answered", Message.Status.REFUSED: "refused",
                            Message.Status.FAILED: "failed"}
PHASES = ("first_token", "total")


@dataclass(frozen=True)
class AnswerCounts:
    outcomes: dict[str, int]  # by outcome (OUTCOMES' values), every one present
    buckets: dict[str, list[tuple[str, int]]]  # by phase: (upper bound, answers at or under it), cumulative, +Inf last
    sums: dict[str, float]  # by phase: seconds


@cache
def _redis() -> redis.Redis:
    """One client (and connection pool) per process: answer_finished runs once per answer."""
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2, decode_responses=True)


def answers_key() -> str:
    """The Redis hash of the counters: this database's own."""
    return f"kb:metrics:answers:{settings.DATABASES['default']['NAME']}"


def answer_finished(status: str, *, first_token_ms: float | None = None, total_ms: float | None = None) -> None:
    """Count an answer that has just finished as `status`, with its times (None: not reached), in one round trip.

    Each time goes into its own bucket (the first bound it is at or under, else +Inf) and into the sum;
    `answers_counted` adds the buckets up into Prometheus's cumulative ones. Never raises: with Redis out of
    reach the answer stays stored and only the figures miss it (logged).
    """
    outcome = OUTCOMES.get(status)
    if outcome is None:
        return
    pipeline = _redis().pipeline(transaction=True)
    key = answers_key()
    pipeline.hincrby(key, f"outcome:{outcome}", 1)
    for phase, ms in zip(PHASES, (first_token_ms, total_ms), strict=True):
        if ms is not None:
            bucket = next((str(bound) for bound in LATENCY_BUCKETS if ms <= bound * 1000), "+Inf")
            pipeline.hincrby(key, f"{phase}:le:{bucket}", 1)
            pipeline.hincrbyfloat(key, f"{phase}:sum", ms / 1000)
    try:
        pipeline.execute()
    except redis.RedisError:
        log.warning("the answer counters are out of reach: an answer (%s) went uncounted", outcome, exc_info=True)


def answers_counted() -> AnswerCounts:
    """The counters as they stand (one HGETALL); raises redis.RedisError when Redis is out of reach."""
    stored = {str(field): value for field, value in _redis().hgetall(answers_key()).items()}
    buckets: dict[str, list[tuple[str, int]]] = {}
    for phase in PHASES:
        below, buckets[phase] = 0, []
        for bound in (*map(str, LATENCY_BUCKETS), "+Inf"):
            below += int(stored.get(f"{phase}:le:{bound}", 0))
            buckets[phase].append((bound, below))
    return AnswerCounts(outcomes={o: int(stored.get(f"outcome:{o}", 0)) for o in OUTCOMES.values()},
                        buckets=buckets, sums={phase: float(stored.get(f"{phase}:sum", 0)) for phase in PHASES})
