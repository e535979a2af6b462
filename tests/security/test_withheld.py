"""Answers are withheld by every source handed to the generator, not only the cited ones (issue 11, item 4)."""

from __future__ import annotations

import json
from typing import Any

from django.test import Client

from chat.models import Message
from chat.selectors import conversation_replay
from chat.services import answer_produce, question_ask
from tests.chat.conftest import VAULT, VAULT_QUESTION
from tests.chat.openai_stub import StubOpenAI
from tests.factories import ingested_document

SECRET = "ZX-4412-QUARTZ"


def test_a_failed_answer_without_citations_is_withheld_from_readers_who_cannot_read_its_sources(
    people: dict[str, Any], settings: Any
) -> None:
    vault = ingested_document(VAULT, "vault.md", public=False, groups=[people["groups"]["engineering"]])
    alice = people["alice"]
    # The model copies the code from its source without writing [1], then the server dies.
    with StubOpenAI(["The code is " + SECRET + " today", " and", " never", " more"], mode="die") as stub:
        settings.KB_ANSWER_BACKEND = "openai"
        settings.KB_OPENAI_BASE_URL = stub.url
        settings.KB_OPENAI_READ_TIMEOUT = 5.0
        asked = question_ask(user=alice, question=VAULT_QUESTION, enqueue=False)
        answer_produce(message_id=asked.answer.pk)
    answer = Message.objects.get(pk=asked.answer.pk)
    assert answer.status == Message.Status.FAILED and SECRET in answer.text and not answer.citations.exists()
    assert answer.source_documents == [vault.pk]
    assert SECRET in json.dumps(conversation_replay(asked.conversation, viewer=alice))

    alice.groups.remove(people["groups"]["engineering"])
    assert SECRET not in json.dumps(conversation_replay(asked.conversation, viewer=alice))
    owner = Client()
    owner.force_login(alice)
    assert SECRET not in owner.get(f"/api/conversations/{asked.conversation.pk}").content.decode()

    reviewer = Client()
    reviewer.force_login(people["sam"])  # support staff, not in engineering
    for path in (f"/api/review/answers/{answer.pk}", "/api/review/answers", f"/api/review/conversations/{asked.conversation.pk}"):
        response = reviewer.get(path)
        assert response.status_code == 200 and SECRET not in response.content.decode(), path
