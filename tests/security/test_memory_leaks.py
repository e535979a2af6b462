"""Remembered questions in the leak suite (issue 50): a question remembered for a restricted group's passage never
helps, shows or hints anything to someone outside the group (search, ask, replay, the review desk, the admin, the
API, content gaps), also once the passage's access is narrowed after it was remembered; and the remembered question's
text reaches no reader, not even one it helps. The world with the memory must look, to an outsider, exactly like the
world without it (real database, real retrieval and answers, the extractive backend)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from chat.models import Judgement, Message
from chat.review.judgements import message_judge
from kb.library.models import Document, Folder
from kb.library.services import folder_set_access
from search.models import RememberedQuestion
from search.retrieval import SearchOptions, hybrid_search
from tests.chat.conftest import SHIPMENTS, VAULT, VAULT_QUESTION
from tests.chat.test_api import answered
from tests.factories import ingested_document
from tests.security.conftest import signed_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

# An outsider's words for the remembered question (MiniLM cosine distance 0.10: well within KB_MEMORY_DISTANCE).
PARAPHRASE = "Tell me the current Oslo depot vault code"
KEYS = """# Depot keys

## Key cabinet

The key cabinet in the Bergen depot opens with the badge of a shift lead; spare keys hang on the left hook.
"""
KEYS_QUESTION = "Where do I find the spare keys in the Bergen depot?"
KEYS_PARAPHRASE = "Bergen depot: where are the extra keys kept?"
OUTSIDERS = ("bob", "carol", "sam")  # finance, nobody, support (a reviewer outside engineering)


def answer_shape(answer: Message) -> tuple[Any, ...]:
    """Everything about an answer that retrieval decides, as its asker could learn it."""
    return (answer.status, answer.text, answer.match, answer.nearest_distance, answer.signals,
            [(c.number, c.document_id, c.start, c.end, c.quote) for c in answer.citations.all()])


def search_shape(user: Any, query: str, options: SearchOptions | None = None) -> tuple[Any, ...]:
    result = hybrid_search(user=user, query=query, options=options)
    return (result.answerable, result.nearest_distance, result.probability, result.remembered,
            [(h.chunk_id, h.distance, h.score, h.passed, h.remembered, h.remembered_distance) for h in result.hits])


def api_search(client: Client, query: str) -> Any:
    body = client.get("/api/search", {"q": query, "k": 10}).json()
    body.pop("timings_ms", None)
    return body


@pytest.fixture
def world(people: dict[str, Any]) -> dict[str, Any]:
    everyone = Folder.objects.create(name="everyone")
    engineering = Folder.objects.create(name="engineering")
    shared = Folder.objects.create(name="depots")
    folder_set_access(folder=everyone, public=True)
    folder_set_access(folder=engineering, public=False, groups=[people["groups"]["engineering"]])
    folder_set_access(folder=shared, public=False, groups=[people["groups"]["engineering"], people["groups"]["finance"]])
    support = people["groups"]["support"]
    sam = people["sam"]
    sam.is_staff = True
    sam.save()
    sam.user_permissions.add(*Permission.objects.filter(codename__in=["view_rememberedquestion", "view_contentgaps"]))
    people["dave"].groups.add(support)  # an engineering reader who reviews: the positive control on the desk
    people["dave"].is_staff = True
    people["dave"].save()
    people["dave"].user_permissions.add(*Permission.objects.filter(codename="view_rememberedquestion"))
    return {"shipments": ingested_document(SHIPMENTS, "shipments.md", folder=everyone),
            "vault": ingested_document(VAULT, "vault.md", folder=engineering),
            "keys": ingested_document(KEYS, "keys.md", folder=shared),
            "folders": {"engineering": engineering, "shared": shared}}


def remember_helpful(user: Any, question: str, document: Document) -> tuple[Message, RememberedQuestion]:
    answer = answered(user, question)
    assert answer.status == Message.Status.DONE and answer.citations.filter(document=document).exists(), answer.text
    message_judge(judge=user, message_id=answer.pk, role=Judgement.Role.ASKER, kind=Judgement.Kind.HELPFUL)
    return answer, RememberedQuestion.objects.get(message_id=answer.pk)


def desk(client: Client, answer: Message) -> list[Any]:
    """The review desk as a reviewer reads it, less the asker's thumbs (the verdict's own, shown before this issue)."""
    def unrated(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: unrated(v) for k, v in value.items() if k != "rating"}
        return [unrated(v) for v in value] if isinstance(value, list) else value

    return [unrated(client.get(path, query).json()) for path, query in (
        ("/api/review/answers", {"limit": 100}), ("/api/review/answers", {"q": "vault", "queue": "all"}),
        (f"/api/review/answers/{answer.pk}", {}), ("/api/review/counts", {}))]


def test_a_question_remembered_for_a_restricted_passage_changes_nothing_for_outsiders(
    world: dict[str, Any], people: dict[str, Any]
) -> None:
    clients = {name: signed_in(people[name]) for name in (*OUTSIDERS, "alice", "dave")}
    secret_answer = answered(people["alice"], VAULT_QUESTION)
    assert secret_answer.status == Message.Status.DONE
    searches = {name: search_shape(people[name], PARAPHRASE) for name in OUTSIDERS}
    api = {name: api_search(clients[name], PARAPHRASE) for name in OUTSIDERS}
    asked = {name: answer_shape(answered(people[name], PARAPHRASE)) for name in OUTSIDERS}
    assert all(shape[0] == Message.Status.REFUSED for shape in asked.values())
    desk_before = desk(clients["sam"], secret_answer)

    message_judge(judge=people["alice"], message_id=secret_answer.pk, role=Judgement.Role.ASKER,
                  kind=Judgement.Kind.HELPFUL)
    row = RememberedQuestion.objects.get()
    assert (row.question, row.document_id) == (VAULT_QUESTION, world["vault"].pk)

    # The desk shows sam the question of an answer withheld from him, as it did before this issue; the memory adds
    # nothing to it.
    leaks = [] if desk(clients["sam"], secret_answer) == desk_before else ["sam: the review desk moved"]
    for name in OUTSIDERS:
        user, client = people[name], clients[name]
        if search_shape(user, PARAPHRASE) != searches[name]:
            leaks.append(f"{name}: retrieval moved")
        if api_search(client, PARAPHRASE) != api[name]:
            leaks.append(f"{name}: /api/search moved")
        again = answered(user, PARAPHRASE)
        if answer_shape(again) != asked[name]:
            leaks.append(f"{name}: the answer moved")
        pages = {
            "replay": client.get(f"/api/conversations/{again.conversation_id}").content,
            "conversations": client.get("/api/conversations").content,
            "pick": client.get(f"/api/messages/{secret_answer.pk}/judgement/pick").content,
            "review pick": client.get(f"/api/review/answers/{secret_answer.pk}/judgement/pick").content,
            "gaps": client.get("/api/gaps").content,
            "admin list": client.get("/admin/search/rememberedquestion/").content,
            "admin search": client.get("/admin/search/rememberedquestion/", {"q": "vault"}).content,
            "admin row": client.get(f"/admin/search/rememberedquestion/{row.pk}/change/").content,
            "viewer": client.get(f"/documents/{world['vault'].pk}/?pick={secret_answer.pk}&role=reviewer").content,
        }
        for surface, content in pages.items():
            text = content.decode()
            if VAULT_QUESTION in text or "ZX-4412" in text or "rotation code" in text:
                leaks.append(f"{name}: {surface}")
        for path in (f"/api/messages/{secret_answer.pk}/judgement/pick",
                     f"/api/review/answers/{secret_answer.pk}/judgement/pick"):
            if client.get(path).status_code != 404:
                leaks.append(f"{name}: {path} answered")
    assert not leaks, leaks

    # Positive controls: an engineering reader asking in other words is led to the passage by the memory, and the
    # admin shows him the question (he may read its passage); the asker may pick for her own answer.
    helped = answered(people["dave"], PARAPHRASE)
    assert helped.status == Message.Status.DONE and helped.signals["remembered"] == [row.pk]
    assert hybrid_search(user=people["dave"], query=PARAPHRASE).hits[0].remembered == (row.pk,)
    assert VAULT_QUESTION in clients["dave"].get("/admin/search/rememberedquestion/").content.decode()
    assert clients["alice"].get(f"/api/messages/{secret_answer.pk}/judgement/pick").json()["question"] == VAULT_QUESTION


def test_the_remembered_question_reaches_no_reader_it_helps(world: dict[str, Any], people: dict[str, Any]) -> None:
    """bob (finance) may read the depot keys: alice's remembered question helps him, and he never sees its words."""
    _, row = remember_helpful(people["alice"], KEYS_QUESTION, world["keys"])
    client = signed_in(people["bob"])
    helped = answered(people["bob"], KEYS_PARAPHRASE)
    assert helped.status == Message.Status.DONE and helped.signals["remembered"] == [row.pk]
    keys = world["keys"].title
    for url, query, marker in ((f"/api/conversations/{helped.conversation_id}", {}, KEYS_PARAPHRASE),
                               ("/api/search", {"q": KEYS_PARAPHRASE}, keys), (f"/documents/{world['keys'].pk}/", {}, keys)):
        response = client.get(url, query)
        assert response.status_code == 200, url
        content = response.content.decode()
        assert marker in content and KEYS_QUESTION not in content, url
    admin = client.get("/admin/search/rememberedquestion/")  # he is not staff: no list of questions to read
    assert admin.status_code == 302 and admin["Location"].startswith("/admin/login/")


def test_narrowing_the_passage_access_takes_the_memory_away_from_those_outside(
    world: dict[str, Any], people: dict[str, Any]
) -> None:
    _, row = remember_helpful(people["alice"], KEYS_QUESTION, world["keys"])
    assert hybrid_search(user=people["bob"], query=KEYS_PARAPHRASE).hits[0].remembered == (row.pk,)

    folder_set_access(folder=world["folders"]["shared"], public=False, groups=[people["groups"]["engineering"]])
    without = SearchOptions(memory=False)
    assert search_shape(people["bob"], KEYS_PARAPHRASE) == search_shape(people["bob"], KEYS_PARAPHRASE, without)
    assert not any(h.document_id == world["keys"].pk for h in hybrid_search(user=people["bob"], query=KEYS_PARAPHRASE).hits)
    answer = answered(people["bob"], KEYS_PARAPHRASE)
    assert answer.status in (Message.Status.DONE, Message.Status.REFUSED)  # answered or refused, never failed
    assert "remembered" not in answer.signals and not answer.citations.filter(document=world["keys"]).exists()
    assert RememberedQuestion.objects.filter(pk=row.pk).exists()  # still there for engineering
    assert hybrid_search(user=people["alice"], query=KEYS_PARAPHRASE).hits[0].remembered == (row.pk,)
