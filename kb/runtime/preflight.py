"""Say which setting points at which unreachable server, instead of a traceback wall."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit


def _where(url: str, default_port: int) -> str:
    parts = urlsplit(url)
    try:
        port = parts.port or default_port
    except ValueError:
        port = default_port
    return f"{parts.hostname or 'localhost'}:{port}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def database_problem(url: str) -> str | None:
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except (psycopg.Error, ValueError) as exc:
        name = urlsplit(url).path.lstrip("/") or "?"
        return f"DATABASE_URL: cannot connect to PostgreSQL at {_where(url, 5432)} (database {name!r}): {_first_line(exc)}"
    return None


def redis_problem(url: str) -> str | None:
    import redis

    try:
        redis.Redis.from_url(url, socket_timeout=3, socket_connect_timeout=3).ping()
    except (redis.RedisError, ValueError) as exc:
        return f"REDIS_URL: cannot connect to Redis at {_where(url, 6379)}: {_first_line(exc)}"
    return None


def service_problems(database_url: str, redis_url: str) -> list[str]:
    return [p for p in (database_problem(database_url), redis_problem(redis_url)) if p]


def explain(exc: BaseException) -> str | None:
    """A one-line explanation for a configuration or connection error, or None for anything else."""
    from django.core.exceptions import ImproperlyConfigured
    from django.db import OperationalError

    from kb.runtime.embedded import EmbeddedServiceError

    if isinstance(exc, (ImproperlyConfigured, EmbeddedServiceError)):
        return str(exc)
    if isinstance(exc, OperationalError):
        from django.conf import settings

        return database_problem(database_url(settings.DATABASES["default"])) or f"database error: {_first_line(exc)}"
    import redis

    if isinstance(exc, redis.ConnectionError):
        from django.conf import settings

        return redis_problem(settings.REDIS_URL) or f"Redis error: {_first_line(exc)}"
    return None


def database_url(config: Mapping[str, object]) -> str:
    return f"postgresql://{config.get('USER') or ''}@{config.get('HOST') or 'localhost'}:{config.get('PORT') or 5432}/{config.get('NAME')}"
