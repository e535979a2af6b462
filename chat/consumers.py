"""Websocket consumers; they relay, the services decide."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from django.utils import translation
from django.utils.translation import gettext
from pydantic import BaseModel, Field, ValidationError

from accounts.language import scope_language
from accounts.websocket import UserConsumer
from chat.events import ChatEventMessage, Event, group_name

# Close codes in the application range (4000-4999), mirroring HTTP's meaning.
CLOSE_FORBIDDEN = 4403  # not your conversation, or no such conversation: the same answer for both


class AskIn(BaseModel):
    """A follow-up question sent over the socket: {"type": "ask", "question": "..."}."""

    type: str = Field(pattern="^ask$")
    question: str = Field(min_length=1, max_length=2000)


def _stored_text(message_id: int) -> str:
    from chat.models import Message

    return Message.objects.filter(pk=message_id).values_list("text", flat=True).first() or ""


class ChatConsumer(UserConsumer):
    """/ws/chat/<conversation>/: the owner's stream of that conversation's events.

    On connect it joins the conversation's group first, then replays what is stored, so
    nothing produced in between is lost; token offsets (`at`) drop what the replay
    already covered. The replay is the latest page of messages (chat.selectors.MESSAGES_PAGE;
    the REST API has the earlier ones); optional `?since=<message id>` replays only later messages.
    What it writes itself is in the reader's language (accounts.language.scope_language), as is
    what the answer's producer writes for them (chat.services.question_ask passes it on).
    """

    conversation_id: int
    group: str
    language: str

    async def connect(self) -> None:
        from chat.selectors import conversation_for_user

        user = await self.accept_user()
        if user is None:
            return
        pk = self.scope["url_route"]["kwargs"]["pk"]
        conversation = await database_sync_to_async(conversation_for_user)(user, pk)
        if conversation is None:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.conversation_id, self.group = conversation.pk, group_name(conversation.pk)
        self.language = await database_sync_to_async(scope_language)(self.scope)
        self.sent: dict[int, int] = {}  # message id -> characters of its text this client has
        self.seen: set[tuple[int | None, str, str]] = set()  # (message, type, state) of one-off events sent
        self.finished: set[int] = set()
        await self.channel_layer.group_add(self.group, self.channel_name)
        with translation.override(self.language):
            replay = await database_sync_to_async(self._replay)(conversation, user)
        for event in replay:
            await self._relay(event)

    def _replay(self, conversation: Any, user: Any) -> list[Event]:
        from chat.selectors import conversation_replay

        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        since = query.get("since", [""])[0]
        return conversation_replay(conversation, viewer=user, since=int(since) if since.isdigit() else None)

    async def disconnect(self, code: int) -> None:
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)
        await super().disconnect(code)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        from chat.services import ChatError, question_ask

        with translation.override(self.language):
            try:
                ask = AskIn.model_validate(content)
            except ValidationError:
                await self.send_json({"type": "error", "message": None, "error": gettext(
                    'send {"type": "ask", "question": "..."} (1 to 2000 characters)')})
                return
            try:
                await database_sync_to_async(question_ask)(
                    user=self.scope["user"], question=ask.question, conversation_id=self.conversation_id
                )
            except ChatError as exc:
                await self.send_json({"type": "error", "message": None, "error": str(exc)})

    async def chat_event(self, message: ChatEventMessage) -> None:
        await self._relay(message["event"])

    async def _relay(self, event: Event) -> None:
        kind, message_id = event["type"], event["message"]
        if message_id in self.finished:
            return
        if event["type"] == "token":
            await self._token(event["message"], event["at"], event["text"])
            return
        if kind in ("question", "status", "citations"):
            key = (message_id, kind, event["state"] if event["type"] == "status" else "")
            if key in self.seen:
                return
            self.seen.add(key)
        elif kind in ("done", "refused", "error") and message_id is not None:
            self.finished.add(message_id)
        await self.send_json(event)

    async def _token(self, message_id: int, at: int, text: str) -> None:
        have = self.sent.get(message_id, 0)
        if at > have:
            # Something between what we have and this token never reached us (a full channel
            # layer drops messages): the stored text has it, because it is written before it is sent.
            stored = await database_sync_to_async(_stored_text)(message_id)
            if len(stored) > have:
                await self.send_json({"type": "token", "message": message_id, "at": have, "text": stored[have:]})
                have = self.sent[message_id] = len(stored)
        if at + len(text) <= have:
            return
        if at < have:
            text, at = text[have - at :], have
        await self.send_json({"type": "token", "message": message_id, "at": at, "text": text})
        self.sent[message_id] = at + len(text)
