"""/ws/chat/<conversation>/ with Channels' communicator, the Redis channel layer and a producer thread."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from channels.db import database_sync_to_async

from accounts.websocket import CLOSE_UNAUTHENTICATED
from chat.consumers import CLOSE_FORBIDDEN
from chat.models import Message
from chat.services import question_ask
from kb.library.models import Document
from tests.chat.conftest import EXPORT_QUESTION, Producer, events_until, finished, joined_tokens, open_chat
from tests.chat.openai_stub import StubOpenAI

pytestmark = pytest.mark.django_db(transaction=True)


async def ask(user: Any, question: str = EXPORT_QUESTION, conversation_id: int | None = None) -> Any:
    return await database_sync_to_async(question_ask)(user=user, question=question, conversation_id=conversation_id,
                                                      enqueue=False)


async def connected(conversation_id: int, user: Any, query: str = "") -> Any:
    """A communicator on the conversation, already accepted."""
    communicator = await open_chat(conversation_id, user, query=query)
    assert (await communicator.connect())[0]
    return communicator


async def answered(user: Any, producer: Producer) -> Any:
    """A question whose answer the producer has finished."""
    asked = await ask(user)
    producer.start(asked.answer.pk)
    await database_sync_to_async(producer.join)()
    return asked


def use_stub(settings: Any, stub: StubOpenAI) -> None:
    settings.KB_ANSWER_BACKEND = "openai"
    settings.KB_OPENAI_BASE_URL = stub.url
    settings.KB_OPENAI_READ_TIMEOUT = 10.0


async def test_anonymous_is_closed_with_4401(people: dict[str, Any]) -> None:
    asked = await ask(people["alice"])
    communicator = await open_chat(asked.conversation.pk)
    connected, _ = await communicator.connect()
    assert connected
    assert await communicator.receive_output() == {"type": "websocket.close", "code": CLOSE_UNAUTHENTICATED}
    await communicator.disconnect()


@pytest.mark.parametrize("intruder", ["bob", "sam", "admin"])
async def test_another_users_conversation_is_closed_with_4403(people: dict[str, Any], intruder: str) -> None:
    asked = await ask(people["alice"])
    for pk in (asked.conversation.pk, asked.conversation.pk + 1000):  # foreign and missing look the same
        communicator = await open_chat(pk, people[intruder])
        await communicator.connect()
        assert await communicator.receive_output() == {"type": "websocket.close", "code": CLOSE_FORBIDDEN}
        await communicator.disconnect()


async def test_the_owner_receives_status_tokens_citations_done_in_order(
    corpus: dict[str, Document], people: dict[str, Any], producer: Producer
) -> None:
    asked = await ask(people["alice"])
    communicator = await connected(asked.conversation.pk, people["alice"])
    events = await events_until(communicator, lambda e: e["type"] == "status")  # the replay: queued
    producer.start(asked.answer.pk)
    events += await events_until(communicator, finished)
    await communicator.disconnect()
    assert events[0] == {"type": "question", "message": asked.question.pk, "text": EXPORT_QUESTION}
    states = [e["state"] for e in events if e["type"] == "status"]
    assert states == ["queued", "retrieving", "generating"]
    kinds = [e["type"] for e in events if e["type"] != "question"]
    first_token = kinds.index("token")
    assert kinds[:first_token] == ["status"] * 3
    assert set(kinds[first_token:-2]) == {"token"} and kinds[-2:] == ["citations", "done"]
    done = events[-1]
    assert done["message"] == asked.answer.pk and joined_tokens(events, asked.answer.pk) == done["text"]
    assert [c["number"] for c in events[-2]["citations"]] == [1]


async def test_model_tokens_reach_the_socket_one_by_one_as_the_server_sends_them(
    corpus: dict[str, Document], people: dict[str, Any], producer: Producer, settings: Any
) -> None:
    tokens = ["The", " Export", " button", " opens", " the", " Export", " dialog", " [1]", "."]
    with StubOpenAI(tokens, delay=0.25) as stub:
        use_stub(settings, stub)
        asked = await ask(people["alice"])
        communicator = await connected(asked.conversation.pk, people["alice"])
        producer.start(asked.answer.pk)
        arrivals: list[tuple[float, dict[str, Any]]] = []
        while not arrivals or not finished(arrivals[-1][1]):
            event = await communicator.receive_json_from(timeout=20)
            arrivals.append((time.monotonic(), event))
        await communicator.disconnect()
        sent = list(stub.sent)
    token_events = [(t, e) for t, e in arrivals if e["type"] == "token"]
    # One word behind the model at most (the citation filter holds the word being written).
    assert len(token_events) >= len(tokens) - 2
    assert token_events[0][0] < sent[-1][0], "the first token only arrived after the server had sent the last"
    for (arrived, _event), (written, _token) in zip(token_events, sent[1:], strict=False):
        assert arrived >= written - 0.01  # never before the model wrote the next token
    assert arrivals[-1][1]["type"] == "done" and arrivals[-1][1]["text"] == "The Export button opens the Export dialog [1]."
    assert arrivals[-1][1]["backend"] == "openai"


async def test_a_reconnect_mid_answer_receives_the_full_text_once(
    corpus: dict[str, Document], people: dict[str, Any], producer: Producer, settings: Any
) -> None:
    tokens = ["Open", " the", " Shipments", " screen", " and", " press", " Export", " at", " the", " top", " right",
              " [1]", "."]
    with StubOpenAI(tokens, pause_after=6) as stub:
        use_stub(settings, stub)
        asked = await ask(people["alice"])
        first = await connected(asked.conversation.pk, people["alice"])
        producer.start(asked.answer.pk)
        before = await events_until(first, lambda e: e["type"] == "token" and "Shipments" in e["text"])
        await first.disconnect()
        partial = joined_tokens(before, asked.answer.pk)
        assert partial and not partial.endswith(".")

        second = await connected(asked.conversation.pk, people["alice"])
        replayed = await events_until(second, lambda e: e["type"] == "token")
        assert replayed[-1]["at"] == 0 and replayed[-1]["text"].startswith(partial)
        stub.resume()
        after = replayed + await events_until(second, finished)
        await second.disconnect()
    done = after[-1]
    assert done["type"] == "done"
    assert joined_tokens(after, asked.answer.pk) == done["text"] == "Open the Shipments screen and press Export at the top right [1]."
    assert [e["type"] for e in after].count("done") == 1 and [e["type"] for e in after].count("citations") == 1


async def test_a_late_reader_gets_the_finished_answer_from_storage(
    corpus: dict[str, Document], people: dict[str, Any], producer: Producer
) -> None:
    asked = await answered(people["alice"], producer)
    communicator = await connected(asked.conversation.pk, people["alice"])
    events = await events_until(communicator, finished)
    assert [e["type"] for e in events] == ["question", "token", "citations", "done"]
    assert events[1]["text"] == events[-1]["text"] and events[-1]["withheld"] is False
    # ?since= skips what the client already has.
    later = await connected(asked.conversation.pk, people["alice"], query=f"since={asked.answer.pk}")
    assert await later.receive_nothing(timeout=0.3)
    await communicator.disconnect()
    await later.disconnect()


async def test_a_follow_up_question_over_the_socket_joins_the_conversation(
    corpus: dict[str, Document], people: dict[str, Any], producer: Producer
) -> None:
    asked = await answered(people["alice"], producer)
    communicator = await connected(asked.conversation.pk, people["alice"])
    await events_until(communicator, finished)

    await communicator.send_json_to({"type": "ask", "question": "Where do saved filters appear?"})
    events = await events_until(communicator, lambda e: e["type"] == "status")
    assert events[0]["type"] == "question" and events[-1]["state"] == "queued"
    answer_id = events[-1]["message"]
    producer.start(answer_id)
    events = await events_until(communicator, finished)
    assert events[-1]["type"] == "done" and "Views menu" in events[-1]["text"]
    answer = await database_sync_to_async(Message.objects.get)(pk=answer_id)
    assert answer.conversation_id == asked.conversation.pk

    await communicator.send_json_to({"type": "ask", "question": ""})
    problem = await communicator.receive_json_from()
    assert problem["type"] == "error" and problem["message"] is None
    await communicator.disconnect()


@pytest.mark.slow
async def test_an_idle_socket_outlives_the_redis_read_timeout(
    corpus: dict[str, Document], people: dict[str, Any], producer: Producer
) -> None:
    # A reader waits on a queued answer (a busy worker, a model loading) for longer than one
    # blocking channel-layer read: the socket must stay open through it.
    asked = await ask(people["alice"])
    communicator = await connected(asked.conversation.pk, people["alice"])
    await events_until(communicator, lambda e: e["type"] == "status")
    await asyncio.sleep(7)
    producer.start(asked.answer.pk)
    events = await events_until(communicator, finished)
    assert events[-1]["type"] == "done"
    await communicator.disconnect()
