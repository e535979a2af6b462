"""Conversations one can find again (issue 49 item 7): search, rename and delete, by their owner only.

The service functions are called directly; the API tests check only what the endpoints add (statuses, bodies).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.test import Client
from django.utils import timezone

from chat.consumers import CLOSE_FORBIDDEN
from chat.models import Citation, Conversation, Feedback, Judgement, Message, ReviewAccess
from chat.review.desk import review_answers
from chat.review.feedback import feedback_add
from chat.review.judgements import message_judge
from chat.services import (
    TITLE_MAX,
    ChatError,
    NotFound,
    answer_produce,
    conversation_delete,
    conversation_rename,
    conversation_search,
    question_ask,
)
from kb.library.models import Document
from tests.chat.conftest import EXPORT_QUESTION, open_chat

pytestmark = pytest.mark.django_db

PLANNING = "How do I fail over the planning database?"


def ask(user: Any, question: str, conversation: Conversation | None = None) -> Conversation:
    return question_ask(user=user, question=question, enqueue=False,
                        conversation_id=conversation.pk if conversation else None).conversation


def ids(found: list[Conversation]) -> list[int]:
    return [c.pk for c in found]


# --------------------------------------------------------------------------- search


def test_search_finds_the_owners_conversations_by_title_or_any_question(people: dict[str, Any]) -> None:
    alice = people["alice"]
    planning = ask(alice, PLANNING)
    ask(alice, "And who approves the VPN exception?", planning)  # a later question, not in the title
    vpn = ask(alice, "How do I set up the VPN on a phone?")
    other = ask(alice, "Where is the export button?")

    assert ids(conversation_search(user=alice)) == [other.pk, vpn.pk, planning.pk]  # newest first
    assert ids(conversation_search(user=alice, query="vpn")) == [vpn.pk, planning.pk]  # ignoring case
    assert ids(conversation_search(user=alice, query="VPN approves")) == [planning.pk]  # every word
    assert ids(conversation_search(user=alice, query="planning   DATABASE")) == [planning.pk]
    assert conversation_search(user=alice, query="payroll") == []
    counted = {c.pk: c.questions for c in conversation_search(user=alice)}  # type: ignore[attr-defined]
    assert counted == {planning.pk: 2, vpn.pk: 1, other.pk: 1}
    assert ids(conversation_search(user=alice, limit=1, offset=1)) == [vpn.pk]


@pytest.mark.parametrize("searcher", ["bob", "sam", "admin"])
def test_nobody_searches_another_persons_conversations(people: dict[str, Any], searcher: str) -> None:
    ask(people["alice"], PLANNING)
    mine = ask(people[searcher], "Something else entirely")
    assert conversation_search(user=people[searcher], query="planning") == []
    assert ids(conversation_search(user=people[searcher])) == [mine.pk]


# --------------------------------------------------------------------------- rename


def test_the_owner_renames_a_conversation_which_keeps_its_place(people: dict[str, Any]) -> None:
    alice = people["alice"]
    first = ask(alice, PLANNING)
    second = ask(alice, PLANNING)
    Conversation.objects.filter(pk=first.pk).update(updated_at=timezone.now() - timedelta(days=3))
    before = Conversation.objects.get(pk=first.pk).updated_at

    renamed = conversation_rename(user=alice, conversation_id=first.pk, title="  Planning DB\nfailover (March)  ")
    assert renamed.title == "Planning DB failover (March)"  # one line
    assert renamed.questions == 1  # type: ignore[attr-defined]
    assert Conversation.objects.get(pk=first.pk).updated_at == before  # renaming is not activity
    assert ids(conversation_search(user=alice)) == [second.pk, first.pk]
    assert ids(conversation_search(user=alice, query="march")) == [first.pk]


def test_a_title_must_be_one_to_two_hundred_characters(people: dict[str, Any]) -> None:
    alice = people["alice"]
    conversation = ask(alice, PLANNING)
    with pytest.raises(ChatError, match="the title is empty"):
        conversation_rename(user=alice, conversation_id=conversation.pk, title=" \n ")
    with pytest.raises(ChatError, match="longer than 200 characters"):
        conversation_rename(user=alice, conversation_id=conversation.pk, title="x" * (TITLE_MAX + 1))
    assert Conversation.objects.get(pk=conversation.pk).title == PLANNING


@pytest.mark.parametrize("intruder", ["bob", "sam", "admin"])
def test_nobody_renames_or_deletes_another_persons_conversation(people: dict[str, Any], intruder: str) -> None:
    conversation = ask(people["alice"], PLANNING)
    for pk in (conversation.pk, conversation.pk + 1000):  # foreign and missing look the same
        with pytest.raises(NotFound, match="no such conversation"):
            conversation_rename(user=people[intruder], conversation_id=pk, title="Mine now")
        with pytest.raises(NotFound, match="no such conversation"):
            conversation_delete(user=people[intruder], conversation_id=pk)
    kept = Conversation.objects.get(pk=conversation.pk)
    assert kept.title == PLANNING and kept.messages.count() == 2


# --------------------------------------------------------------------------- delete


def test_deleting_takes_the_answers_verdicts_and_flags_off_the_review_desk(
    corpus: dict[str, Document], people: dict[str, Any]
) -> None:
    alice, sam = people["alice"], people["sam"]
    asked = question_ask(user=alice, question=EXPORT_QUESTION, enqueue=False)
    kept = question_ask(user=alice, question="Where do visitors park?", enqueue=False)
    assert answer_produce(message_id=asked.answer.pk) == "done"
    answer = Message.objects.get(pk=asked.answer.pk)
    assert Citation.objects.filter(message=answer).exists()
    message_judge(judge=alice, message_id=answer.pk, role=Judgement.Role.ASKER, kind="helpful")
    message_judge(judge=sam, message_id=answer.pk, role=Judgement.Role.REVIEWER, kind="wrong")
    feedback_add(reviewer=sam, message=answer, kind="outdated")
    logged = ReviewAccess.objects.create(reviewer=sam, reviewer_name="sam", answer=answer.pk,
                                         surface=ReviewAccess.Surface.REVIEW_API, grants="group engineering")
    assert answer.pk in {m.pk for m in review_answers(limit=100)}

    conversation_delete(user=alice, conversation_id=asked.conversation.pk)

    assert not Conversation.objects.filter(pk=asked.conversation.pk).exists()
    gone = [asked.question.pk, answer.pk]
    assert not Message.objects.filter(pk__in=gone).exists()
    assert not Citation.objects.filter(message_id__in=gone).exists()
    assert not Judgement.objects.filter(message_id__in=gone).exists()
    assert not Feedback.objects.filter(message_id__in=gone).exists()
    assert {m.pk for m in review_answers(limit=100)} == {kept.answer.pk}
    assert ReviewAccess.objects.get(pk=logged.pk).answer == answer.pk  # the log keeps the number, by design
    with pytest.raises(NotFound):  # asking in it, as the page or the socket would
        question_ask(user=alice, question="And PDF?", conversation_id=asked.conversation.pk, enqueue=False)
    with pytest.raises(NotFound):  # a second delete
        conversation_delete(user=alice, conversation_id=asked.conversation.pk)
    assert ids(conversation_search(user=alice)) == [kept.conversation.pk]


def test_a_queued_answer_of_a_deleted_conversation_is_nobodys_to_produce(people: dict[str, Any]) -> None:
    asked = question_ask(user=people["alice"], question=EXPORT_QUESTION, enqueue=False)
    conversation_delete(user=people["alice"], conversation_id=asked.conversation.pk)
    assert answer_produce(message_id=asked.answer.pk, job_id=str(asked.answer.job_id)) is None


@pytest.mark.django_db(transaction=True)
async def test_a_deleted_conversations_stream_refuses(people: dict[str, Any]) -> None:
    alice = people["alice"]
    asked = await database_sync_to_async(question_ask)(user=alice, question=EXPORT_QUESTION, enqueue=False)
    communicator = await open_chat(asked.conversation.pk, alice)
    assert (await communicator.connect())[0]  # its owner's, while it exists
    await communicator.disconnect()
    await database_sync_to_async(conversation_delete)(user=alice, conversation_id=asked.conversation.pk)
    communicator = await open_chat(asked.conversation.pk, alice)
    await communicator.connect()
    assert await communicator.receive_output() == {"type": "websocket.close", "code": CLOSE_FORBIDDEN}
    await communicator.disconnect()


# --------------------------------------------------------------------------- the API


def test_the_api_searches_renames_and_deletes_the_callers_own(people: dict[str, Any], client: Client) -> None:
    alice = people["alice"]
    planning = ask(alice, PLANNING)
    vpn = ask(alice, "How do I set up the VPN on a phone?")
    client.force_login(alice)

    assert [c["id"] for c in client.get("/api/conversations", {"q": "planning"}).json()] == [planning.pk]
    listed = client.get("/api/conversations").json()
    assert [(c["id"], c["questions"]) for c in listed] == [(vpn.pk, 1), (planning.pk, 1)]
    assert client.get("/api/conversations", {"q": "x" * 201}).status_code == 422

    url = f"/api/conversations/{planning.pk}"
    renamed = client.patch(url, json.dumps({"title": "Failover, March"}), content_type="application/json")
    assert renamed.status_code == 200, renamed.content
    assert renamed.json()["title"] == "Failover, March" and renamed.json()["id"] == planning.pk
    for body in ({"title": ""}, {"titel": "typo"}, {"title": 7}):
        refused = client.patch(url, json.dumps(body), content_type="application/json")
        assert refused.status_code == 422, (body, refused.content)
    assert client.patch(url, json.dumps({"title": " \n "}), content_type="application/json").json() == {
        "detail": "the title is empty"}
    assert client.get(url).json()["title"] == "Failover, March"

    schema = client.get("/api/openapi.json").json()["paths"]
    assert set(schema["/api/conversations/{conversation_id}"]) == {"get", "patch", "delete"}
    assert "q" in [p["name"] for p in schema["/api/conversations"]["get"]["parameters"]]

    assert client.delete(url).status_code == 204
    assert client.get(url).status_code == 404
    assert client.delete(url).status_code == 404
    assert [c["id"] for c in client.get("/api/conversations").json()] == [vpn.pk]


def test_the_api_answers_404_for_another_persons_conversation(people: dict[str, Any], client: Client) -> None:
    planning = ask(people["alice"], PLANNING)
    client.force_login(people["bob"])
    url = f"/api/conversations/{planning.pk}"
    assert client.patch(url, json.dumps({"title": "Mine"}), content_type="application/json").status_code == 404
    assert client.delete(url).status_code == 404
    assert client.get("/api/conversations", {"q": "planning"}).json() == []
    assert Conversation.objects.get(pk=planning.pk).title == PLANNING
    huge = f"/api/conversations/{2**70}"  # past bigint: not found, never a database error
    assert client.patch(huge, json.dumps({"title": "Mine"}), content_type="application/json").status_code == 404
    assert client.delete(huge).status_code == 404
