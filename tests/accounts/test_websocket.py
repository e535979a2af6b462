"""accounts.websocket.accept_user, the gate of every websocket, through the library socket."""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from accounts.websocket import CLOSE_UNAUTHENTICATED
from kb.asgi import application


@pytest.fixture(autouse=True)
async def _close_thread_connections() -> Any:
    """Consumers reach the DB from a worker thread; close it so the test DB can be dropped."""
    yield
    from django.db import connections

    await database_sync_to_async(connections.close_all)()


async def _session_cookie(user: Any) -> str:
    client = Client()
    await database_sync_to_async(client.force_login)(user)
    return client.cookies["sessionid"].value


@pytest.mark.django_db(transaction=True)
async def test_a_logged_in_user_stays_connected(people: dict[str, Any]) -> None:
    cookie = await _session_cookie(people["alice"])
    communicator = WebsocketCommunicator(
        application, "/ws/library/", headers=[(b"cookie", f"sessionid={cookie}".encode()), (b"origin", b"http://localhost")]
    )
    connected, _ = await communicator.connect()
    assert connected
    await communicator.send_json_to({"type": "watch", "ids": []})
    assert await communicator.receive_nothing(timeout=0.5)  # not closed: an anonymous socket is (below)
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_an_anonymous_user_is_closed_with_4401() -> None:
    communicator = WebsocketCommunicator(application, "/ws/library/", headers=[(b"origin", b"http://localhost")])
    connected, _ = await communicator.connect()
    assert connected
    closed = await communicator.receive_output()
    assert closed == {"type": "websocket.close", "code": CLOSE_UNAUTHENTICATED}
    await communicator.disconnect()  # ends the consumer's channel-layer read, which cancelling may not


@pytest.mark.django_db(transaction=True)
async def test_a_foreign_origin_is_refused(people: dict[str, Any]) -> None:
    cookie = await _session_cookie(people["alice"])
    communicator = WebsocketCommunicator(
        application, "/ws/library/", headers=[(b"cookie", f"sessionid={cookie}".encode()), (b"origin", b"http://evil.example")]
    )
    connected, _ = await communicator.connect()
    assert not connected
    await communicator.disconnect()
