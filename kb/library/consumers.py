"""Live pipeline status for the library page: `/ws/library/`.

The worker announces "document N changed" on one channel-layer group
(`kb.library.events.publish_document_status`); each connected page looks the document up *as its own
user* (kb.library.selectors.document_status_rows, which starts from kb.library.access) and sends it
only if that user may follow it. Announcements carry no document data, so nothing
reaches a page through the group that its user could not read.

Pages also say which documents they show (`{"type": "watch", "ids": [...]}`); those
that are still moving through the pipeline are re-read every second as well, so a
status is never missed when a worker runs without the publish hook or an announcement
is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from channels.db import database_sync_to_async

from accounts.websocket import UserConsumer
from kb.library.events import GROUP, DocumentStatusEvent
from kb.library.selectors import TERMINAL_STATUSES, document_status_rows

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
MAX_WATCHED = 1000


class DocumentStatusConsumer(UserConsumer):
    async def connect(self) -> None:
        self.watched: set[int] = set()
        self.sent: dict[int, tuple[str, str]] = {}
        self.poller: asyncio.Task[None] | None = None
        self.user: Any = await self.accept_user()
        if self.user is None:
            return
        await self.channel_layer.group_add(GROUP, self.channel_name)
        self.poller = asyncio.create_task(self._poll())

    async def disconnect(self, code: int) -> None:
        if self.poller is not None:
            self.poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.poller
        await self.channel_layer.group_discard(GROUP, self.channel_name)
        await super().disconnect(code)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if not isinstance(content, dict) or content.get("type") != "watch":
            return
        raw = content.get("ids") or []
        ids = [int(i) for i in raw[:MAX_WATCHED] if isinstance(i, int) or (isinstance(i, str) and i.isdigit())]
        self.watched.update(ids)
        if len(self.watched) > MAX_WATCHED:
            self.watched = set(sorted(self.watched)[-MAX_WATCHED:])
        await self._send_rows(ids, force=True)

    async def document_status(self, event: DocumentStatusEvent) -> None:
        await self._send_rows([event["id"]], force=False)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(POLL_SECONDS)
            moving = [pk for pk in self.watched if self.sent.get(pk, ("", ""))[0] not in TERMINAL_STATUSES]
            if moving:
                try:
                    await self._send_rows(moving, force=False)
                except Exception:  # keep polling: the next round may succeed
                    log.warning("library status poll failed", exc_info=True)

    async def _send_rows(self, ids: list[int], *, force: bool) -> None:
        if not ids:
            return
        rows = await database_sync_to_async(document_status_rows)(user=self.user, ids=ids)
        # An id this user cannot follow (or that is gone) never answers: stop polling for it.
        self.watched -= set(ids) - {row["id"] for row in rows}
        for row in rows:
            key = (row["status"], row["updated"])
            if force or self.sent.get(row["id"]) != key:
                self.sent[row["id"]] = key
                await self.send_json(row)
