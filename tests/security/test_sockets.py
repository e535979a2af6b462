"""Open websockets end with the session, the password, the account or the groups they were opened under
(issue 11, item 6). Real Redis channel layer; the signals fire from real logout and saves."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from accounts.websocket import CLOSE_ACCESS_CHANGED, CLOSE_UNAUTHENTICATED

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
async def _close_thread_connections() -> Any:
    """Consumers reach the DB from a worker thread; close it so the test DB can be dropped."""
    yield
    from django.db import connections

    await database_sync_to_async(connections.close_all)()


async def opened(client: Client, path: str) -> WebsocketCommunicator:
    from kb.asgi import application

    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    communicator = WebsocketCommunicator(application, path, headers=[(b"origin", b"http://localhost"), (b"cookie", cookie)])
    assert (await communicator.connect())[0]
    return communicator


def _logout(client: Client, user: Any) -> None:
    client.logout()


def _new_password(client: Client, user: Any) -> None:
    user.set_password("a new one")
    user.save()


def _deactivated(client: Client, user: Any) -> None:
    user.is_active = False
    user.save(update_fields=["is_active"])


def _group_removed(client: Client, user: Any) -> None:
    user.groups.remove(*user.groups.all())


def _removed_from_group_side(client: Client, user: Any) -> None:
    user.groups.get(name="engineering").user_set.clear()


@pytest.mark.parametrize(
    ("change", "code"),
    [(_logout, CLOSE_UNAUTHENTICATED), (_new_password, CLOSE_UNAUTHENTICATED), (_deactivated, CLOSE_UNAUTHENTICATED),
     (_group_removed, CLOSE_ACCESS_CHANGED), (_removed_from_group_side, CLOSE_ACCESS_CHANGED)],
)
async def test_open_sockets_close_when_the_session_or_access_changes(
    people: dict[str, Any], change: Callable[[Client, Any], None], code: int
) -> None:
    alice, bob = people["alice"], people["bob"]
    clients = {}
    for user in (alice, bob):
        clients[user.username] = Client()
        await database_sync_to_async(clients[user.username].force_login)(user)
    library = await opened(clients["alice"], "/ws/library/")
    second = await opened(clients["alice"], "/ws/library/")  # every socket of hers, not just one
    bystander = await opened(clients["bob"], "/ws/library/")

    await database_sync_to_async(change)(clients["alice"], alice)

    for communicator in (library, second):
        assert await communicator.receive_output(timeout=5) == {"type": "websocket.close", "code": code}
    assert await bystander.receive_nothing(timeout=0.5)
    for communicator in (library, second, bystander):
        await communicator.disconnect()
