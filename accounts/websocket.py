"""The websocket door every consumer shares: only logged-in users get past it."""

from __future__ import annotations

from typing import Any

from channels.generic.websocket import AsyncWebsocketConsumer

# Application close codes (4000-4999) mirroring HTTP's meaning.
CLOSE_UNAUTHENTICATED = 4401


async def accept_user(consumer: AsyncWebsocketConsumer) -> Any | None:
    """The scope's user once the socket is accepted, or None after closing it with 4401.

    Accepting first matters: closing before accepting gives the client only a bare HTTP 403.
    """
    user: Any = consumer.scope.get("user")
    await consumer.accept()
    if user is None or not user.is_authenticated:
        await consumer.close(code=CLOSE_UNAUTHENTICATED)
        return None
    return user
