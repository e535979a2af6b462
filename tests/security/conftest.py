"""Security-suite fixtures: the session's real Daphne on the test database for the websocket surfaces."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.conftest import port_of


@pytest.fixture
def daphne(web_server: str) -> int:
    """The port of the session's Daphne (tests.conftest.web_server), which serves kb.asgi as `make run` does."""
    return port_of(web_server)


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client
