"""accounts.websocket, the gate of every websocket, through the library socket (tests/chat/conftest.py
closes the consumers' database connections after each test)."""

from __future__ import annotations

from typing import Any

import pytest
from channels.testing import WebsocketCommunicator

from accounts.websocket import CLOSE_UNAUTHENTICATED
from kb.asgi import application
from tests.chat.conftest import session_cookie


async def library_socket(user: Any = None, origin: bytes = b"http://localhost") -> tuple[WebsocketCommunicator, bool]:
    headers = [(b"origin", origin)]
    if user is not None:
        headers.append((b"cookie", f"sessionid={await session_cookie(user)}".encode()))
    communicator = WebsocketCommunicator(application, "/ws/library/", headers=headers)
    connected, _ = await communicator.connect()
    return communicator, connected


@pytest.mark.django_db(transaction=True)
async def test_a_logged_in_user_stays_connected(people: dict[str, Any]) -> None:
    communicator, connected = await library_socket(people["alice"])
    assert connected
    await communicator.send_json_to({"type": "watch", "ids": []})
    assert await communicator.receive_nothing(timeout=0.5)  # not closed: an anonymous socket is (below)
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_an_anonymous_user_is_closed_with_4401() -> None:
    communicator, connected = await library_socket()
    assert connected
    closed = await communicator.receive_output()
    assert closed == {"type": "websocket.close", "code": CLOSE_UNAUTHENTICATED}
    await communicator.disconnect()  # ends the consumer's channel-layer read, which cancelling may not


@pytest.mark.django_db(transaction=True)
async def test_a_foreign_origin_is_refused(people: dict[str, Any]) -> None:
    communicator, connected = await library_socket(people["alice"], origin=b"http://evil.example")
    assert not connected
    await communicator.disconnect()
