"""Deleting a group closes its members' open sockets, chat and library (issue 28, item 9): the deletion drops the
memberships without m2m_changed, so a socket opened under the group would have kept streaming under it.
Real Redis channel layer; the signal fires from a real delete, one group or a queryset (the admin's bulk action)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import Group
from django.db import transaction
from django.test import Client

from accounts.websocket import CLOSE_ACCESS_CHANGED
from chat.models import Conversation
from tests.security.test_sockets import opened

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
async def _close_thread_connections() -> Any:
    """Consumers reach the DB from a worker thread; close it so the test DB can be dropped."""
    yield
    from django.db import connections

    await database_sync_to_async(connections.close_all)()


def _one(group: Group) -> None:
    group.delete()


def _bulk(group: Group) -> None:
    Group.objects.filter(name__in=[group.name, "nobody's"]).delete()


def _signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("delete", [_one, _bulk])
async def test_deleting_a_group_closes_its_members_sockets(
    people: dict[str, Any], delete: Callable[[Group], None]
) -> None:
    alice, dave, bob = people["alice"], people["dave"], people["bob"]  # alice and dave are in engineering
    clients = {user.username: await database_sync_to_async(_signed_in)(user) for user in (alice, dave, bob)}
    conversation = await database_sync_to_async(Conversation.objects.create)(owner=alice, title="rotation")
    members = [await opened(clients["alice"], f"/ws/chat/{conversation.pk}/"),
               await opened(clients["alice"], "/ws/library/"), await opened(clients["dave"], "/ws/library/")]
    bystander = await opened(clients["bob"], "/ws/library/")

    await database_sync_to_async(delete)(people["groups"]["engineering"])

    for communicator in members:
        assert await communicator.receive_output(timeout=5) == {"type": "websocket.close", "code": CLOSE_ACCESS_CHANGED}
    assert await bystander.receive_nothing(timeout=0.5)
    assert not await database_sync_to_async(Group.objects.filter(name="engineering").exists)()
    for communicator in (*members, bystander):
        await communicator.disconnect()


async def test_a_deletion_rolled_back_closes_nothing(people: dict[str, Any]) -> None:
    """The sockets close after the deletion commits (a socket reconnecting at once meets the new groups)."""
    client = await database_sync_to_async(_signed_in)(people["alice"])
    library = await opened(client, "/ws/library/")

    def delete_then_roll_back() -> None:
        with transaction.atomic():
            people["groups"]["engineering"].delete()
            transaction.set_rollback(True)

    await database_sync_to_async(delete_then_roll_back)()
    assert await library.receive_nothing(timeout=0.5)
    assert await database_sync_to_async(Group.objects.filter(name="engineering").exists)()
    await library.disconnect()
