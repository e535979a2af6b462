"""The chat's own sentences in the asker's language (issue 48 item 6): a refusal and an error reach the asker over
/ws/chat/<id>/ in the language they chose, else the one their browser asked for at the handshake; the answer's
quotes stay in the document's words."""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from accounts.language import user_language_set
from chat.answering import NOT_FOUND, TRY_AGAIN
from chat.models import Message
from chat.services import answer_produce, question_ask
from kb.library.models import Document
from tests.chat import conftest as chat_conftest
from tests.chat.conftest import OOD_QUESTION, Producer, events_until, finished, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

POLISH_REFUSAL = "Nie udało się tego znaleźć w dokumentach, które możesz czytać, więc nie będę zgadywać."


async def chat_socket(conversation_id: int, user: Any, accept_language: str = "") -> WebsocketCommunicator:
    from kb.asgi import application

    headers = [(b"origin", b"http://localhost"), (b"cookie", f"sessionid={await session_cookie(user)}".encode())]
    if accept_language:
        headers.append((b"accept-language", accept_language.encode()))
    communicator = WebsocketCommunicator(application, f"/ws/chat/{conversation_id}/", headers=headers)
    chat_conftest._opened.append(communicator)  # disconnected at the end, as open_chat's are
    assert (await communicator.connect())[0]
    return communicator


async def test_a_refusal_reaches_the_asker_in_the_language_they_chose(
    corpus: dict[str, Document], people: dict[str, Any], producer: Producer
) -> None:
    carol = people["carol"]
    await database_sync_to_async(user_language_set)(user=carol, language="pl")
    asked = await database_sync_to_async(question_ask)(user=carol, question=OOD_QUESTION, enqueue=False)
    socket = await chat_socket(asked.conversation.pk, carol, accept_language="de-DE,de;q=0.9")  # her choice wins
    await events_until(socket, lambda e: e["type"] == "status")
    producer.start(asked.answer.pk)
    events = await events_until(socket, finished)
    refused = events[-1]
    assert refused["type"] == "refused" and refused["text"].startswith(POLISH_REFUSAL)
    assert "Użyj słów, których używałyby dokumenty" in refused["text"] and NOT_FOUND not in refused["text"]

    # What the consumer writes itself is in her language too.
    await socket.send_json_to({"type": "ask"})
    error = await socket.receive_json_from(timeout=10)
    assert error == {"type": "error", "message": None,
                     "error": 'wyślij {"type": "ask", "question": "..."} (od 1 do 2000 znaków)'}
    # A reader who connects later is replayed the stored refusal as it was written for her.
    later = await chat_socket(asked.conversation.pk, carol)
    replay = await events_until(later, finished)
    assert replay[-1]["text"] == refused["text"]


async def test_without_a_choice_the_handshakes_accept_language_decides(people: dict[str, Any]) -> None:
    dave = people["dave"]
    asked = await database_sync_to_async(question_ask)(user=dave, question=OOD_QUESTION, enqueue=False)
    socket = await chat_socket(asked.conversation.pk, dave, accept_language="de-DE,de;q=0.9,en;q=0.5")
    await events_until(socket, lambda e: e["type"] == "status")
    await socket.send_json_to({"type": "ask", "question": " "})
    error = await socket.receive_json_from(timeout=10)
    assert error == {"type": "error", "message": None, "error": "die Frage ist leer"}
    english = await chat_socket(asked.conversation.pk, dave)  # no header: English
    await events_until(english, lambda e: e["type"] == "status")
    await english.send_json_to({"type": "ask", "question": " "})
    assert (await english.receive_json_from(timeout=10))["error"] == "the question is empty"


def test_the_worker_writes_in_the_language_the_question_was_asked_in(people: dict[str, Any]) -> None:
    """The page's language travels with the job (chat.tasks.answer_message's `language`): a Chinese reader who
    never chose one gets the refusal in Chinese; with neither, English."""
    chinese = question_ask(user=people["bob"], question=OOD_QUESTION, enqueue=False)
    assert answer_produce(message_id=chinese.answer.pk, language="zh-hans") == Message.Status.REFUSED
    assert Message.objects.get(pk=chinese.answer.pk).text.startswith("在您可以阅读的文档中找不到相关内容")
    plain = question_ask(user=people["bob"], question=OOD_QUESTION, enqueue=False)
    answer_produce(message_id=plain.answer.pk)
    assert Message.objects.get(pk=plain.answer.pk).text == f"{NOT_FOUND} {TRY_AGAIN}"
