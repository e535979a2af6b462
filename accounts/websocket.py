"""The websocket door every consumer shares: only logged-in users get past it, and their
sockets close when their session ends or their access changes.

Each accepted socket joins its user's channel-layer group; logout, a password change,
deactivation and a change of groups send one event there (accounts.signals), and every
socket of that user closes. A socket never outlives the session that opened it, and one
opened under old groups never keeps streaming under them.
"""

from __future__ import annotations

import logging
from typing import Any, TypedDict

from asgiref.sync import async_to_sync
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)

# Application close codes (4000-4999) mirroring HTTP's meaning.
CLOSE_UNAUTHENTICATED = 4401  # not signed in, or the session ended: the page must sign in again
CLOSE_ACCESS_CHANGED = 4408  # the user's groups changed: reconnecting sees what they may read now


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

    async def accept_user(self) -> Any | None:
        """The scope's user once the socket is accepted, or None after closing it with 4401.

        Accepting first matters: closing before accepting gives the client only a bare HTTP 403.
        """
        user: Any = self.scope.get("user")
        await self.accept()
        if user is None or not user.is_authenticated or not user.is_active:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return None
        self.user_group_name = user_group(user.pk)
        await self.channel_layer.group_add(self.user_group_name, self.channel_name)
        return user

    async def user_end(self, event: UserEndEvent) -> None:
        await self.close(code=event["code"])

    async def disconnect(self, code: int) -> None:
        if self.user_group_name:
            await self.channel_layer.group_discard(self.user_group_name, self.channel_name)
