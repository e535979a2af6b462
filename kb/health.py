"""Readiness checks behind /healthz: each returns its facts or raises with the reason."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

Check = Callable[[], dict[str, Any]]


def check_database() -> dict[str, Any]:
    from django.db import OperationalError

    try:
        connection.ensure_connection()
    except OperationalError:
        from kb.runtime.preflight import database_problem, database_url

        raise RuntimeError(database_problem(database_url(connection.settings_dict))) from None
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('server_version')")
        (version,) = cursor.fetchone()
    return {"server_version": version}


def check_pgvector() -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        row = cursor.fetchone()
    if row is None:
        raise RuntimeError("the vector extension is not installed (run migrate)")
    return {"version": row[0]}


def check_redis() -> dict[str, Any]:
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError:
        from kb.runtime.preflight import redis_problem

        raise RuntimeError(redis_problem(settings.REDIS_URL)) from None
    return {"version": client.info("server").get("redis_version")}


def ping_celery() -> dict[str, Any]:
    from kb.celery import app

    replies = app.control.ping(timeout=settings.KB_HEALTH_CELERY_TIMEOUT)
    if not replies:
        raise RuntimeError("no Celery worker answered a ping")
    return {"workers": sorted(name for reply in replies for name in reply)}


class Reused:
    """A check whose outcome (facts or failure) is reused for `seconds()`, by every thread of the process.

    /healthz needs no sign-in, and a worker ping is a broadcast every worker answers, taking up to
    KB_HEALTH_CELERY_TIMEOUT: run on each call, it would let anyone load the workers and hold web
    threads. Callers arriving while it runs wait for its outcome instead of starting their own.
    """

    def __init__(self, check: Check, seconds: Callable[[], float]) -> None:
        self.check, self.seconds = check, seconds
        self._lock = threading.Lock()
        self._last: tuple[float, dict[str, Any] | Exception] | None = None

    def __call__(self) -> dict[str, Any]:
        with self._lock:
            now = time.monotonic()
            if self._last is None or now - self._last[0] >= self.seconds():
                try:
                    outcome: dict[str, Any] | Exception = self.check()
                except Exception as exc:  # reused as well: a failing ping takes the longest
                    outcome = exc
                self._last = (now, outcome)
            outcome = self._last[1]
        if isinstance(outcome, Exception):
            raise outcome.with_traceback(None)
        return dict(outcome)


check_celery = Reused(ping_celery, lambda: settings.KB_HEALTH_CELERY_CACHE_SECONDS)


def check_embedding() -> dict[str, Any]:
    from kb.text import embedding

    dims = embedding.dimensions()
    if dims != settings.KB_EMBEDDING_DIMENSIONS:
        raise RuntimeError(f"model gives {dims} dimensions, the index expects {settings.KB_EMBEDDING_DIMENSIONS}")
    return {"model": settings.KB_EMBEDDING_MODEL, "dimensions": dims}


def check_reranker() -> dict[str, Any]:
    """Optional: "off" is healthy; a configured model must load. Late interaction is reported beside it."""
    from search import late, rerank

    if settings.KB_RERANKER_PATH:
        rerank.scores("health check", ["loads"])
    return {"status": rerank.status(), "late_interaction": late.status()}


def check_replica() -> dict[str, Any]:
    """Optional, like the reranker: where retrieval reads (search.replica); a replica down or behind is reported, not failed."""
    from search import replica

    return replica.state()


CHECKS: dict[str, Check] = {
    "database": check_database,
    "pgvector": check_pgvector,
    "redis": check_redis,
    "celery": check_celery,
    "embedding": check_embedding,
    "reranker": check_reranker,
    "replica": check_replica,
}


# A check that cannot pass while the one it names has failed: during a Redis outage, a worker ping through
# the broker would hold the caller for seconds of reconnecting before failing anyway.
NEEDS = {"pgvector": "database", "celery": "redis", "replica": "database"}


def health_report(checks: dict[str, Check] | None = None) -> dict[str, Any]:
    """Every check's result; `ok` only when all passed, `failed` names the ones that did not."""
    results: dict[str, Any] = {}
    for name, check in (checks or CHECKS).items():
        needed = NEEDS.get(name)
        if needed in results and not results[needed]["ok"]:
            results[name] = {"ok": False, "error": f"not checked: {needed} is unreachable"}
            continue
        try:
            results[name] = {"ok": True, **check()}
        except Exception as exc:  # a health check reports any failure instead of raising it
            results[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    failed = [name for name, result in results.items() if not result["ok"]]
    return {"ok": not failed, "failed": failed, "checks": results}


def sources_report(user: Any) -> list[dict[str, Any]]:
    """Each source `user` may see by the staff rule (kb.library.sources.selectors.sources_viewable), with its index
    lag: staff detail beside the checks. It does not move `ok`: a source behind is not the service down."""
    from kb.library.sources.selectors import lag_of, sources_viewable, with_lag

    now = timezone.now()
    report = []
    for source in with_lag(sources_viewable(user)):
        lag = lag_of(source)
        report.append({
            "name": source.name, "kind": source.kind, "last_status": source.last_status, "last_reason": source.last_reason,
            "last_success_at": source.last_success_at.isoformat() if source.last_success_at else None,
            "lag_seconds": round(lag.lag_seconds(now), 3), "last_change_lag_seconds": source.last_lag_seconds,
            "files_pending": lag.pending, "files_failed": lag.failed,
        })
    return report


def public_summary(report: dict[str, Any]) -> dict[str, Any]:
    """What anyone may see: up or not, and which checks failed. Versions, worker host names and
    connection errors help an attacker map the deployment, so only staff get the full report."""
    return {"ok": report["ok"], "failed": report["failed"]}
