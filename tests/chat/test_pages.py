"""Stored messages come as one set of events everywhere, and a long conversation comes a page at a time."""

from __future__ import annotations

import json
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from chat.events import citation_from_stored
from chat.models import Citation, Conversation, Message
from chat.selectors import MESSAGES_PAGE, WITHHELD, conversation_page, conversation_replay
from chat.services import answer_produce, question_ask
from kb.library.models import Chunk, Document
from tests.chat.conftest import EXPORT_QUESTION, OOD_QUESTION, VAULT_QUESTION, events_until
from tests.chat.test_chat_ws import connected

SECRET = "ZX-4412-QUARTZ"


def long_conversation(owner: Any, corpus: dict[str, Document], turns: int) -> Conversation:
    """`turns` finished questions and answers; every third answer quotes the vault document (engineering only)."""
    conversation = Conversation.objects.create(owner=owner, title="long")
    for i in range(turns):
        document = corpus["vault"] if i % 3 == 0 else corpus["shipments"]
        chunk = Chunk.objects.filter(document=document).first()
        assert chunk is not None
        question = Message.objects.create(conversation=conversation, role=Message.Role.USER, text=f"question {i}")
        answer = Message.objects.create(
            conversation=conversation, role=Message.Role.ASSISTANT, question=question, status=Message.Status.DONE,
            text=f"Answer {i}: {chunk.content} [1]", backend="extractive", intent="concept",
            source_documents=[document.pk],
        )
        Citation.objects.create(
            message=answer, number=1, chunk=chunk, document=document, document_title=document.title,
            label=chunk.breadcrumb, link=f"/documents/{document.pk}/#char={chunk.start},{chunk.end}",
            quote=chunk.content, start=chunk.start, end=chunk.end, distance=0.2,
        )
    return conversation


def pages(client: Client, url: str, **params: Any) -> list[dict[str, Any]]:
    """Every page of a conversation, newest first, following the `before` cursor."""
    out: list[dict[str, Any]] = []
    while not out or out[-1]["before"] is not None:
        response = client.get(url, params | ({"before": out[-1]["before"]} if out else {}))
        assert response.status_code == 200, response.content
        out.append(response.json())
    return out


def test_a_long_conversation_comes_a_page_at_a_time_and_each_page_checks_access(
    corpus: dict[str, Document], people: dict[str, Any], client: Client
) -> None:
    alice = people["alice"]
    conversation = long_conversation(alice, corpus, turns=MESSAGES_PAGE // 2 + 5)
    everything = list(conversation.messages.order_by("pk").values_list("pk", flat=True))
    assert len(everything) == MESSAGES_PAGE + 10
    alice.groups.remove(people["groups"]["engineering"])  # the vault answers are hers no more
    client.force_login(alice)
    url = f"/api/conversations/{conversation.pk}"

    first, second = pages(client, url)
    assert len(first["messages"]) == MESSAGES_PAGE and len(second["messages"]) == 10  # the latest page first
    assert first["before"] == first["messages"][0]["id"] and second["before"] is None
    shown = [m["id"] for page in (second, first) for m in page["messages"]]
    assert shown == everything  # nothing skipped, nothing twice, oldest first within each page
    assert first["messages"][0]["role"] == "user"  # a page holds whole turns

    for page in (first, second):
        assert SECRET not in json.dumps(page)
        for m in page["messages"]:
            if m["role"] == "user":
                continue
            quotes_vault = Message.objects.get(pk=m["id"]).source_documents == [corpus["vault"].pk]
            assert m["withheld"] == quotes_vault
            assert (m["text"] == WITHHELD) == quotes_vault and (m["citations"] == []) == quotes_vault
            assert m["events"][-1]["type"] == "done" and m["events"][-1]["text"] == m["text"]

    smaller = pages(client, url, limit=7)
    assert [len(p["messages"]) for p in smaller] == [7] * 8 + [4]
    assert [m["id"] for page in reversed(smaller) for m in page["messages"]] == everything

    assert client.get(url, {"limit": 0}).status_code == 422
    assert client.get(url, {"limit": 201}).status_code == 422


def test_a_page_costs_the_same_queries_however_long_the_conversation(
    corpus: dict[str, Document], people: dict[str, Any], client: Client
) -> None:
    client.force_login(people["alice"])
    short = long_conversation(people["alice"], corpus, turns=3)
    long = long_conversation(people["alice"], corpus, turns=MESSAGES_PAGE * 2)
    counts = []
    for conversation in (short, long):
        with CaptureQueriesContext(connection) as queries:
            assert client.get(f"/api/conversations/{conversation.pk}").status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1]


def test_the_websocket_replay_is_the_latest_page(corpus: dict[str, Document], people: dict[str, Any]) -> None:
    alice = people["alice"]
    conversation = long_conversation(alice, corpus, turns=MESSAGES_PAGE)
    ids = list(conversation.messages.order_by("pk").values_list("pk", flat=True))
    replay = conversation_replay(conversation, viewer=alice)
    replayed = sorted({e["message"] for e in replay if e["message"] is not None})
    assert replayed == ids[-MESSAGES_PAGE:]
    assert [e["message"] for e in conversation_replay(conversation, viewer=alice, since=ids[-3])] == [
        ids[-2], ids[-1], ids[-1], ids[-1]]  # question; token, citations and done of its answer

    page = conversation_page(conversation, viewer=alice, before=ids[-MESSAGES_PAGE], limit=MESSAGES_PAGE)
    assert [v.message.pk for v in page.views] == ids[:-MESSAGES_PAGE] and page.before is None


@pytest.mark.django_db(transaction=True)
async def test_connecting_to_a_long_conversation_replays_only_its_latest_page(
    corpus: dict[str, Document], people: dict[str, Any]
) -> None:
    alice = people["alice"]
    conversation = await database_sync_to_async(long_conversation)(alice, corpus, MESSAGES_PAGE)
    ids = await database_sync_to_async(lambda: list(conversation.messages.order_by("pk").values_list("pk", flat=True)))()
    communicator = await connected(conversation.pk, alice)
    events = await events_until(communicator, lambda e: e["type"] == "done" and e["message"] == ids[-1])
    assert sorted({e["message"] for e in events}) == ids[-MESSAGES_PAGE:]
    assert events[0] == {"type": "question", "message": ids[-MESSAGES_PAGE], "text": f"question {MESSAGES_PAGE // 2}"}
    assert await communicator.receive_nothing(timeout=0.5)  # and nothing older after it
    await communicator.disconnect()


def test_the_api_sends_each_stored_message_as_the_events_the_websocket_replays(
    corpus: dict[str, Document], people: dict[str, Any], client: Client
) -> None:
    alice = people["alice"]
    done = question_ask(user=alice, question=EXPORT_QUESTION, enqueue=False)
    answer_produce(message_id=done.answer.pk)
    conversation_id = done.conversation.pk
    for question in (OOD_QUESTION, VAULT_QUESTION):  # refused; answered from a document she then loses
        asked = question_ask(user=alice, question=question, conversation_id=conversation_id, enqueue=False)
        answer_produce(message_id=asked.answer.pk)
    failed = question_ask(user=alice, question="And the filters?", conversation_id=conversation_id, enqueue=False)
    Message.objects.filter(pk=failed.answer.pk).update(status=Message.Status.FAILED, text="The filter bar",
                                                       error="the model stopped")
    question_ask(user=alice, question="And saved views?", conversation_id=conversation_id, enqueue=False)  # pending
    alice.groups.remove(people["groups"]["engineering"])

    client.force_login(alice)
    body = client.get(f"/api/conversations/{conversation_id}").json()
    from_api = [event for m in body["messages"] for event in m["events"]]
    replay = json.loads(json.dumps(conversation_replay(Conversation.objects.get(pk=conversation_id), viewer=alice)))
    assert from_api == replay
    ends = [e for e in replay if e["type"] in ("done", "refused", "error") or e.get("state") == "queued"]
    assert [e["type"] for e in ends] == ["done", "refused", "done", "error", "status"]
    assert ends[0]["withheld"] is False and ends[0]["unsupported"] == [] and ends[2]["withheld"] is True
    assert ends[2]["text"] == WITHHELD and SECRET not in json.dumps(body)
    exported = Message.objects.get(pk=done.answer.pk)
    assert replay[1:3] == [{"type": "token", "message": exported.pk, "at": 0, "text": exported.text},
                           {"type": "citations", "message": exported.pk,
                            "citations": [citation_from_stored(c) for c in exported.citations.all()]}]
    assert {"type": "token", "message": failed.answer.pk, "at": 0, "text": "The filter bar"} in replay
