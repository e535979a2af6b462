"""Bounded requests at the ASGI edge, before Django reads a body or a consumer parses a message.

Django's ASGI handler copies the whole request body (to a spooled temporary file) before any
view runs, so a size check inside a view comes too late. Here a declared Content-Length over
the path's limit is answered 413 at once, a body that streams past it is cut off with 413,
and a websocket message over the message limit closes the socket with 4413 (too big).

The web server applies the same `body_limit` one step earlier, before it stores any of the body
(kb.runtime.daphne_server); this layer holds for any other ASGI server that runs the app.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

Scope = dict[str, Any]
Receive = Any
Send = Any

CLOSE_TOO_BIG = 4413  # ASGI lets an app close only with 1000 or 3000-4999; 4xxx mirrors HTTP 413
# Paths that take a file: the library's one-file upload and the admin's document forms,
# and the documents API's upload (only the collection itself: its other paths take JSON).
UPLOAD_PREFIXES = ("/library/upload", "/admin/")
UPLOAD_PATHS = ("/api/documents", "/api/documents/")


class _TooLarge(Exception):
    pass


def body_limit(path: str) -> int:
    """Bytes a request body to `path` may have."""
    if path.startswith(UPLOAD_PREFIXES) or path in UPLOAD_PATHS:
        return (settings.KB_MAX_UPLOAD_MB + 1) * 2**20  # the file and its form fields
    return settings.KB_MAX_BODY_KB * 1024


def too_large_body(limit: int) -> bytes:
    """The 413 response's JSON body, the same from Daphne (kb.runtime.daphne_server) and from here."""
    return f'{{"detail": "the request body is larger than {limit:,} bytes"}}'.encode()


async def _too_large(send: Send, limit: int) -> None:
    body = too_large_body(limit)
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class BoundedRequests:
    """ASGI middleware around the whole application (HTTP and websockets)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            await self.app(scope, self._bounded_messages(receive, send), send)
        else:
            await self.app(scope, receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = body_limit(scope["path"])
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            await _too_large(send, limit)
            return
        seen = 0

        async def bounded() -> dict[str, Any]:
            nonlocal seen
            message = dict(await receive())
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge
            return message

        try:
            await self.app(scope, bounded, send)
        except _TooLarge:  # raised while Django reads the body, before any response started
            await _too_large(send, limit)

    @staticmethod
    def _bounded_messages(receive: Receive, send: Send) -> Receive:
        limit = settings.KB_MAX_WS_MESSAGE_KB * 1024

        async def bounded() -> dict[str, Any]:
            message = dict(await receive())
            if message["type"] == "websocket.receive":
                size = len(message.get("text") or "") + len(message.get("bytes") or b"")
                if size > limit:
                    await send({"type": "websocket.close", "code": CLOSE_TOO_BIG})
                    return {"type": "websocket.disconnect", "code": CLOSE_TOO_BIG}
            return message

        return bounded
