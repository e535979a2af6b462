"""`/ws/library/`: live pipeline status, only for documents the user may follow."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.utils import timezone

from accounts.websocket import CLOSE_UNAUTHENTICATED
from kb.asgi import application
from kb.library.events import publish_document_status
from kb.library.models import Document


@pytest.fixture(autouse=True)
async def _close_thread_connections() -> Any:
    """Consumers reach the DB from a worker thread; close it so the test DB can be dropped."""
    yield
    from django.db import connections

    await database_sync_to_async(connections.close_all)()


async def connect(user: Any | None) -> WebsocketCommunicator:
    headers = [(b"origin", b"http://localhost")]
    if user is not None:
        client = Client()
        await database_sync_to_async(client.force_login)(user)
        headers.append((b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()))
    communicator = WebsocketCommunicator(application, "/ws/library/", headers=headers)
    connected, _ = await communicator.connect()
    assert connected
    return communicator


@pytest.mark.django_db(transaction=True)
async def test_an_anonymous_socket_is_closed() -> None:
    communicator = await connect(None)
    assert await communicator.receive_output() == {"type": "websocket.close", "code": CLOSE_UNAUTHENTICATED}
    await communicator.wait()


@pytest.mark.django_db(transaction=True)
async def test_each_user_hears_only_about_documents_they_may_follow(
    people: dict[str, Any], library_docs: dict[str, Any]
) -> None:
    public, secret = library_docs["public"], library_docs["secret"]
    carol, bob = await connect(people["carol"]), await connect(people["bob"])
    try:
        for socket in (carol, bob):
            await socket.send_json_to({"type": "watch", "ids": [public.pk, secret.pk]})
        first = await carol.receive_json_from(timeout=5)
        assert (first["id"], first["status"]) == (public.pk, "ready")
        assert await carol.receive_nothing(timeout=0.5)
        seen = {(await bob.receive_json_from(timeout=5))["id"] for _ in range(2)}
        assert seen == {public.pk, secret.pk}

        # A worker moves the restricted document on and announces it.
        await database_sync_to_async(
            Document.objects.filter(pk=secret.pk).update
        )(status=Document.Status.FAILED, failed_stage="embedding", failure_reason="disk full", updated_at=timezone.now())
        await sync_to_async(publish_document_status)(secret.pk)
        update = await bob.receive_json_from(timeout=5)
        assert (update["id"], update["status"], update["reason"]) == (secret.pk, "failed", "disk full")
        assert await carol.receive_nothing(timeout=1.5)  # neither the announcement nor the poll reaches her
    finally:
        await carol.disconnect()
        await bob.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_a_watched_document_is_polled_without_an_announcement(
    people: dict[str, Any], library_docs: dict[str, Any]
) -> None:
    public = library_docs["public"]
    await database_sync_to_async(Document.objects.filter(pk=public.pk).update)(status=Document.Status.QUEUED)
    socket = await connect(people["carol"])
    try:
        await socket.send_json_to({"type": "watch", "ids": [public.pk]})
        assert (await socket.receive_json_from(timeout=5))["status"] == "queued"
        await database_sync_to_async(Document.objects.filter(pk=public.pk).update)(
            status=Document.Status.CHUNKING, updated_at=timezone.now()
        )
        assert (await socket.receive_json_from(timeout=5))["status"] == "chunking"
    finally:
        await socket.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_a_watch_list_is_cut_at_its_bound_before_any_query(
    people: dict[str, Any], library_docs: dict[str, Any]
) -> None:
    from kb.library.consumers import MAX_WATCHED

    public = library_docs["public"]
    socket = await connect(people["carol"])
    try:
        beyond = [10**9 + n for n in range(MAX_WATCHED)] + [public.pk]  # the real one comes after the bound
        await socket.send_json_to({"type": "watch", "ids": beyond})
        assert await socket.receive_nothing(timeout=1)
        await socket.send_json_to({"type": "watch", "ids": [public.pk]})
        assert (await socket.receive_json_from(timeout=5))["id"] == public.pk
    finally:
        await socket.disconnect()
