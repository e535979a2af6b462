"""Websocket consumers; they relay, the services decide."""

from __future__ import annotations

from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer

# Close codes in the application range (4000-4999), mirroring HTTP's meaning.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403


class HelloConsumer(AsyncJsonWebsocketConsumer):
    """Greets a logged-in user: proves the session reaches the websocket side."""

    async def connect(self) -> None:
        user: Any = self.scope.get("user")
        await self.accept()  # closing before accepting would only give the client a bare HTTP 403
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        await self.send_json({"type": "hello", "user": user.get_username()})
