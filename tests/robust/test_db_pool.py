"""Issue 12 item 1: a busy Daphne keeps at most KB_DB_POOL_SIZE PostgreSQL connections.

Before the pool, each thread Django's ASGI handler ran sync code in kept its own persistent
connection, so connections grew with the number of requests until PostgreSQL refused more.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection

from accounts.tokens import token_create
from kb.runtime.embedded import free_port
from tests.conftest import child, listening, service_env, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

POOL_SIZE = 3


APP = "kb-pool-daphne"  # the Daphne's application_name (libpq reads PGAPPNAME): only its connections count


def backend_count() -> int:
    """Connections to the test database held by the Daphne under test (not a worker's that happens to be open)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND application_name = %s", [APP])
        return int(cursor.fetchone()[0])


def test_concurrent_requests_share_a_bounded_pool(people: dict[str, Any], settings: Any) -> None:
    _, token = token_create(user=people["alice"])
    port = free_port()
    baseline = backend_count()
    env = service_env(SECRET_KEY=settings.SECRET_KEY, KB_DB_POOL_SIZE=str(POOL_SIZE), PGAPPNAME=APP)
    argv = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "kb.asgi:application"]
    with child("pool-daphne", argv, env) as web:
        wait_until(lambda: listening(port), "daphne", [web])

        def get(path: str) -> int:
            request = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                             headers={"Authorization": f"Bearer {token}"})
            with urllib.request.urlopen(request, timeout=30) as response:
                json.loads(response.read())
                return int(response.status)

        peak = 0
        with ThreadPoolExecutor(12) as pool:
            for _ in range(8):
                statuses = list(pool.map(get, ["/api/me", "/api/conversations"] * 12))
                assert statuses == [200] * len(statuses)
                peak = max(peak, backend_count() - baseline)
        assert 1 <= peak <= POOL_SIZE, f"{peak} connections held by one Daphne, pool size {POOL_SIZE}"
