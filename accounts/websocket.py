"""The websocket door every consumer shares: only logged-in users get past it, and their
sockets close when their session ends or their access changes.

Each accepted socket joins its user's channel-layer group; logout, a password change,
deactivation and a change of groups send one event there (accounts.signals), and every
socket of that user closes. A socket never outlives the session that opened it, and one
opened under old groups never keeps streaming under them. One user holds at most
KB_WS_MAX_PER_USER sockets at once, on every Daphne together (accounts.socket_slots).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, TypedDict

import redis
from asgiref.sync import async_to_sync, sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import get_channel_layer
from django.conf import settings

from accounts.socket_slots import LEASE_SECONDS, socket_slot_release, socket_slot_renew, socket_slot_take

log = logging.getLogger(__name__)

# Application close codes (4000-4999) mirroring HTTP's meaning.
CLOSE_UNAUTHENTICATED = 4401  # not signed in, or the session ended: the page must sign in again
CLOSE_ACCESS_CHANGED = 4408  # the user's groups changed: reconnecting sees what they may read now
CLOSE_TOO_MANY_SOCKETS = 4429  # the user already holds KB_WS_MAX_PER_USER open sockets


class UserEndEvent(TypedDict):
    type: str  # "user.end" -> UserConsumer.user_end
    code: int


def user_group(user_id: int) -> str:
    return f"user.{user_id}"


def user_sockets_close(user_id: int, *, code: int) -> None:
    """Close every open socket of a user (any process, any Daphne): the channel layer delivers it."""
    layer = get_channel_layer()
    if layer is None:
        return
    event: UserEndEvent = {"type": "user.end", "code": code}
    try:
        async_to_sync(layer.group_send)(user_group(user_id), dict(event))
    except Exception:  # Redis down: the logout must still succeed (and no live event reaches those sockets)
        log.error("could not close the open sockets of user %s", user_id, exc_info=True)


class UserConsumer(AsyncJsonWebsocketConsumer):
    """Base of every consumer: `accept_user()` at connect, closed by `user_sockets_close`."""

    user_group_name: str | None = None
    slot_user: int | None = None  # whose socket slot this one holds (accounts.socket_slots)
    slot_lease: asyncio.Task[None] | None = None

    async def accept_user(self) -> Any | None:
        """The scope's user once the socket is accepted, or None after closing it with 4401 (not signed in)
        or 4429 (the user holds KB_WS_MAX_PER_USER sockets already).

        Accepting first matters: closing before accepting gives the client only a bare HTTP 403. The socket
        joins the user's group before it is accepted, so a logout at once after the client sees it open
        still reaches it.
        """
        user: Any = self.scope.get("user")
        if user is None or not user.is_authenticated or not user.is_active:
            await self.accept()
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return None
        if settings.KB_WS_MAX_PER_USER:
            if not await sync_to_async(socket_slot_take, thread_sensitive=False)(user.pk, self.channel_name):
                log.info("user %s holds the most websockets allowed (KB_WS_MAX_PER_USER): closing another", user.pk)
                await self.accept()
                await self.close(code=CLOSE_TOO_MANY_SOCKETS)
                return None
            self.slot_user = user.pk
            self.slot_lease = asyncio.create_task(self._renew_slot(user.pk))
        self.user_group_name = user_group(user.pk)
        await self.channel_layer.group_add(self.user_group_name, self.channel_name)
        await self.accept()
        return user

    async def user_end(self, event: UserEndEvent) -> None:
        await self.close(code=event["code"])

    async def _renew_slot(self, user_id: int) -> None:
        while True:
            await asyncio.sleep(LEASE_SECONDS / 3)
            try:
                await sync_to_async(socket_slot_renew, thread_sensitive=False)(user_id, self.channel_name)
            except redis.RedisError:  # Redis down: the socket stays open, its slot lapses meanwhile
                log.warning("could not renew the websocket slot of user %s", user_id, exc_info=True)

    async def disconnect(self, code: int) -> None:
        if self.slot_lease is not None:
            self.slot_lease.cancel()
        if self.slot_user is not None:
            try:
                await sync_to_async(socket_slot_release, thread_sensitive=False)(self.slot_user, self.channel_name)
            except redis.RedisError:  # the slot lapses within LEASE_SECONDS
                log.warning("could not free the websocket slot of user %s", self.slot_user, exc_info=True)
        if self.user_group_name:
            await self.channel_layer.group_discard(self.user_group_name, self.channel_name)
