"""Curated answers citing a restricted group's passage (chat.review.curated): nothing of them reaches, shows or hints to
anyone outside the group, through ask, replay, the desk, its API, the admin or content gaps, before or after the
passage's access is narrowed; a curator who cannot read the passage can neither see nor serve it."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from chat.answering import answer_stream
from chat.models import CuratedAnswer, Message
from chat.review import curated
from chat.selectors import conversation_replay
from chat.services import NotFound, answer_produce, question_ask
from kb.library.models import Document
from kb.library.services import document_set_access
from tests.chat.conftest import VAULT, received
from tests.factories import ingested_document

SECRET_SENTENCE = "The vault rotation code for the Oslo depot is ZX-4412-QUARTZ"
EXAMPLE = "What is the rotation code of the Oslo depot vault?"
PARAPHRASE = "What's the Oslo depot vault rotation code?"
TEXT = "The Oslo code is read out by the on-call engineer [1]."
STATEMENT = "Support never sends vault codes by email."
SECRETS = ("ZX-4412", "on-call engineer", STATEMENT, "Vault rotation")  # (the asker's own question names Oslo)


def granted(user: Any, *codenames: str, staff: bool = True) -> Any:
    user.is_staff = staff
    user.save(update_fields=["is_staff"])
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames, content_type__app_label="chat"))
    return type(user).objects.get(pk=user.pk)


def clean(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, secret


@pytest.fixture
def vault(people: dict[str, Any]) -> Document:
    return ingested_document(VAULT, "vault.md", public=False, groups=[people["groups"]["engineering"]])


@pytest.fixture
def dave(people: dict[str, Any]) -> Any:
    """engineering and hr: the curator who may read the vault."""
    return granted(people["dave"], "curate_answer")


@pytest.fixture
def answer(vault: Document, dave: Any) -> CuratedAnswer:
    start = vault.canonical_text.index(SECRET_SENTENCE)
    return curated.curated_create(author=dave, text=TEXT, questions=[EXAMPLE], statement=STATEMENT,
                                  citations=[(vault.pk, start, start + len(SECRET_SENTENCE))], approve=True)


@pytest.fixture
def sam(people: dict[str, Any]) -> Any:
    """support, not engineering: holds every curated-answer and content-gap permission, reads no vault."""
    return granted(people["sam"], "curate_answer", "view_contentgaps", "view_curatedanswer", "change_curatedanswer",
                   "delete_curatedanswer", "view_message")


def ask(user: Any, question: str = PARAPHRASE) -> Message:
    asked = question_ask(user=user, question=question, enqueue=False)
    answer_produce(message_id=asked.answer.pk)
    return Message.objects.get(pk=asked.answer.pk)


def test_it_serves_the_group_and_nothing_of_it_reaches_anyone_else(answer: CuratedAnswer, people: dict[str, Any]) -> None:
    served = ask(people["alice"])
    assert served.curated_id == answer.pk  # the positive control: engineering gets it
    for name in ("bob", "carol", "sam"):
        events = received(answer_stream(user=people[name], question=PARAPHRASE))
        assert events[-1].get("match") != "curated"
        clean(str(events))
        message = ask(people[name])
        assert message.curated_id is None
        clean(message.text + str(conversation_replay(message.conversation, viewer=people[name])))


def test_narrowing_the_passage_after_approval_stops_serving_and_withholds_the_replay(
    answer: CuratedAnswer, vault: Document, people: dict[str, Any]
) -> None:
    served = ask(people["alice"])
    assert served.curated_id == answer.pk
    document_set_access(document=vault, inherit=False, groups=[people["groups"]["hr"]])
    alice = people["alice"]
    replay = conversation_replay(served.conversation, viewer=alice)
    assert replay[-1]["type"] == "done" and replay[-1]["withheld"] and "curated" not in replay[-1]
    clean(str(replay))
    client = Client()
    client.force_login(alice)
    body = client.get(f"/api/conversations/{served.conversation_id}").content.decode()
    clean(body)
    again = ask(alice)
    assert again.curated_id is None
    clean(again.text)
    assert ask(people["dave"]).curated_id == answer.pk  # hr still reads it


def test_a_curator_who_cannot_read_the_passage_sees_a_count_at_most(
    answer: CuratedAnswer, sam: Any, people: dict[str, Any]
) -> None:
    served = ask(people["alice"])
    desk = curated.curated_desk(viewer=sam)
    assert desk.answers == [] and desk.hidden == 1 and sum(desk.counts.values()) == 0
    for call in (lambda: curated.curated_approve(approver=sam, answer_id=answer.pk),
                 lambda: curated.curated_retire(user=sam, answer_id=answer.pk),
                 lambda: curated.curated_delete(user=sam, answer_id=answer.pk),
                 lambda: curated.curated_update(editor=sam, answer_id=answer.pk, text="x [1]", questions=["q"],
                                                citations=[(answer.citations.get().document_id or 0, 0, 10)])):
        with pytest.raises(NotFound):
            call()
    assert CuratedAnswer.objects.get(pk=answer.pk).state == CuratedAnswer.State.APPROVED

    client = Client()
    client.force_login(sam)
    listed = client.get("/api/curated")
    assert listed.status_code == 200 and listed.json()["hidden"] == 1 and listed.json()["answers"] == []
    for method, url in (("post", f"/api/curated/{answer.pk}/approve"), ("post", f"/api/curated/{answer.pk}/retire"),
                        ("delete", f"/api/curated/{answer.pk}"),
                        ("get", f"/api/curated/prefill?message={served.pk}")):
        response = getattr(client, method)(url)
        assert response.status_code == 404, url
        clean(response.content.decode())
    for url in ("/review/curated/", "/gaps/", "/admin/chat/curatedanswer/", f"/admin/chat/curatedanswer/{answer.pk}/change/",
                "/admin/chat/message/", "/api/gaps"):
        response = client.get(url, follow=True)
        assert response.status_code in (200, 404), url
        clean(response.content.decode())
    assert client.get(f"/admin/chat/curatedanswer/{answer.pk}/change/").status_code in (302, 404)


def test_people_without_the_permission_have_no_curated_desk_or_api(answer: CuratedAnswer, people: dict[str, Any]) -> None:
    client = Client()
    client.force_login(people["alice"])  # reads the vault, may not curate
    assert client.get("/review/curated/").status_code == 404
    assert client.get("/api/curated").status_code == 404
    response = client.post(f"/api/curated/{answer.pk}/retire")
    assert response.status_code == 404
    assert CuratedAnswer.objects.get(pk=answer.pk).state == CuratedAnswer.State.APPROVED
    with pytest.raises(curated.CurationDenied):
        curated.curated_retire(user=people["alice"], answer_id=answer.pk)


def test_the_curator_who_reads_it_gets_it_on_the_desk_and_in_the_api(answer: CuratedAnswer, dave: Any) -> None:
    client = Client()
    client.force_login(dave)
    listed = client.get("/api/curated").json()
    assert listed["hidden"] == 0 and [a["id"] for a in listed["answers"]] == [answer.pk]
    assert listed["answers"][0]["citations"][0]["quote"] == SECRET_SENTENCE
    assert client.get("/review/curated/").status_code == 200
    cited = answer.citations.get()
    bad = client.post("/api/curated", {"text": "No marker.", "questions": ["q"], "citations": [
        {"document": cited.document_id, "start": cited.start, "end": cited.end}]}, content_type="application/json")
    assert bad.status_code == 400 and "not cited in the text" in bad.json()["detail"]
