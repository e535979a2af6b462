"""Security-suite fixtures: one real Daphne on the test database for the websocket surfaces."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from tests.chat.test_e2e_daphne import child, free_port, listening, wait_until
from tests.conftest import service_env


@pytest.fixture
def daphne(settings: Any) -> Iterator[int]:
    """A Daphne serving kb.asgi on a free port; yields the port."""
    port = free_port()
    env = service_env(SECRET_KEY=settings.SECRET_KEY, DEBUG="0", KB_ANSWER_BACKEND="extractive")
    argv = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "kb.asgi:application"]
    with child("security-daphne", argv, env) as web:
        wait_until(lambda: listening(port), "daphne", [web])
        yield port


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client
