"""Issue 50 item 3 and the leak suite: boosts, hides and remembered questions of a restricted document.

A staff member outside the document's group can neither see nor make nor revoke a boost or hide on it (admin,
API), nor see the questions remembered for its passages; and a boost or hide on it changes nothing for anyone
outside its group: their results are identical with and without it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from kb.library.models import Chunk, Document
from search.adjustments import adjustment_add, adjustment_revoke
from search.memory import remember
from search.models import RememberedQuestion, RetrievalAdjustment
from search.retrieval import hybrid_search
from tests.factories import ingested_document
from tests.search.test_adjustments import signed_in, staff

VAULT = ("# Vault rotation 5521\n\n## Procedure\n\n"
         "The vault rotation code for the Oslo depot is ZX-4412-QUARTZ and it changes every ninety days.\n\n"
         "## Keys\n\nThe spare vault keys hang in the locked cabinet behind the depot office door.\n")
HOURS = ("# Depot opening hours\n\n## Hours\n\n"
         "The Oslo depot opens at seven in the morning on weekdays and at nine on Saturdays; the vault "
         "room follows the same hours.\n")
SECRETS = ("Vault rotation 5521", "ZX-4412-QUARTZ", "vault-reason-3391", "vault code question 8812")
QUERIES = ("When does the Oslo depot open?", "vault rotation code Oslo depot", "Where are the spare vault keys?")
EVERY = ("search.view_retrievaladjustment", "search.add_retrievaladjustment", "search.change_retrievaladjustment",
         "search.delete_retrievaladjustment", "search.view_rememberedquestion", "search.delete_rememberedquestion")


@pytest.fixture
def world(people: dict[str, Any]) -> dict[str, Any]:
    """The engineering-only vault procedure with a hide, and a question remembered for its code passage; the
    public hours. mallory: staff in no group holding every permission of boosts, hides and remembered questions."""
    vault = ingested_document(VAULT, "vault-5521.md", public=False, groups=[people["groups"]["engineering"]])
    hours = ingested_document(HOURS, "hours.md")
    code = Chunk.objects.get(document=vault, content__contains="ZX-4412")
    hide = adjustment_add(user=people["admin"], document_id=vault.pk, action="hide", reason="vault-reason-3391",
                          stable_id=code.stable_id)
    question = remember(document_id=vault.pk, stable_id=code.stable_id, question="vault code question 8812",
                        kind=RememberedQuestion.Kind.LINKED, message_id=7, judge=people["dave"])
    assert question is not None
    return {"vault": vault, "hours": hours, "code": code, "hide": hide, "question": question,
            "mallory": staff("mallory", *EVERY)}


def assert_hidden(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, secret


def post(client: Client, url: str, body: dict[str, Any] | None = None) -> Any:
    return client.post(url, json.dumps(body or {}), content_type="application/json")


def test_the_admin_shows_and_changes_nothing_of_a_restricted_document(world: dict[str, Any],
                                                                      people: dict[str, Any]) -> None:
    mallory = signed_in(world["mallory"])
    public = adjustment_add(user=people["admin"], document_id=world["hours"].pk, action="boost", reason="hours-reason")
    listing = mallory.get("/admin/search/retrievaladjustment/")
    assert listing.status_code == 200 and "hours-reason" in listing.content.decode()  # the row she may read
    assert_hidden(listing.content.decode())
    for url in (f"/admin/search/retrievaladjustment/{world['hide'].pk}/change/",
                "/admin/search/retrievaladjustment/?q=vault", "/admin/search/retrievaladjustment/add/",
                f"/admin/search/retrievaladjustment/add/?document={world['vault'].pk}"):
        response = mallory.get(url, follow=True)
        assert response.status_code == 200
        assert_hidden(response.content.decode())
    mallory.post("/admin/search/retrievaladjustment/", {"action": "revoke", "_selected_action": [world["hide"].pk]})
    assert RetrievalAdjustment.objects.get(pk=world["hide"].pk).active
    for form in ({"document": str(world["vault"].pk), "passage": "", "link": ""},
                 {"document": "", "passage": "", "link": f"/documents/{world['vault'].pk}/#char=40,80"}):
        refused = mallory.post("/admin/search/retrievaladjustment/add/", {**form, "action": "boost", "reason": "x"})
        assert refused.status_code == 200
        assert_hidden(refused.content.decode())
    assert RetrievalAdjustment.objects.filter(document=world["vault"]).count() == 1
    assert mallory.post(f"/admin/search/retrievaladjustment/{world['hide'].pk}/delete/", {"post": "yes"}).status_code == 403
    assert RetrievalAdjustment.objects.filter(pk__in=[world["hide"].pk, public.pk]).count() == 2


def test_the_api_shows_and_changes_nothing_of_a_restricted_document(world: dict[str, Any]) -> None:
    mallory = signed_in(world["mallory"])
    listed = mallory.get("/api/search/adjustments")
    assert listed.status_code == 200 and listed.json() == []
    assert mallory.get("/api/search/adjustments", {"document": world["vault"].pk}).json() == []
    missing = post(mallory, "/api/search/adjustments", {"document_id": world["vault"].pk + 1000, "action": "boost",
                                                        "reason": "x"})
    for body in ({"document_id": world["vault"].pk, "action": "boost", "reason": "x"},
                 {"document_id": world["vault"].pk, "action": "hide", "reason": "x", "start": 40, "end": 80},
                 {"document_id": world["vault"].pk, "action": "hide", "reason": "x",
                  "stable_id": world["code"].stable_id}):
        refused = post(mallory, "/api/search/adjustments", body)
        assert refused.status_code == 404 and refused.json() == missing.json()  # like a missing one
    revoke = post(mallory, f"/api/search/adjustments/{world['hide'].pk}/revoke")
    assert revoke.status_code == 404
    assert revoke.json() == post(mallory, f"/api/search/adjustments/{world['hide'].pk + 1000}/revoke").json()
    assert RetrievalAdjustment.objects.filter(document=world["vault"]).get().active


def test_remembered_questions_of_a_restricted_passage_are_never_shown(world: dict[str, Any],
                                                                      people: dict[str, Any]) -> None:
    hours = Chunk.objects.get(document=world["hours"])
    remember(document_id=world["hours"].pk, stable_id=hours.stable_id, question="depot open on saturday 6610",
             kind=RememberedQuestion.Kind.HELPFUL, message_id=8, judge=people["carol"])
    mallory = signed_in(world["mallory"])
    listing = mallory.get("/admin/search/rememberedquestion/")
    assert listing.status_code == 200
    text = listing.content.decode()
    assert "depot open on saturday 6610" in text  # the one she may read
    assert_hidden(text)
    for url in (f"/admin/search/rememberedquestion/{world['question'].pk}/change/",
                "/admin/search/rememberedquestion/?q=vault", "/admin/search/rememberedquestion/?kind=linked"):
        response = mallory.get(url, follow=True)
        assert response.status_code == 200
        assert_hidden(response.content.decode())
    mallory.post("/admin/search/rememberedquestion/", {"action": "forget", "_selected_action": [world["question"].pk]})
    assert RememberedQuestion.objects.filter(pk=world["question"].pk).exists()
    # An engineer on the staff reads it: the positive control.
    engineer = signed_in(staff("eng", "search.view_rememberedquestion", groups=(people["groups"]["engineering"],)))
    assert "vault code question 8812" in engineer.get("/admin/search/rememberedquestion/").content.decode()


def test_remembered_questions_follow_the_passage_when_its_access_narrows(world: dict[str, Any],
                                                                         people: dict[str, Any]) -> None:
    from kb.library.services import document_set_access

    hours = Chunk.objects.get(document=world["hours"])
    remember(document_id=world["hours"].pk, stable_id=hours.stable_id, question="depot open on saturday 6610",
             kind=RememberedQuestion.Kind.HELPFUL, message_id=8, judge=people["carol"])
    adjustment_add(user=people["admin"], document_id=world["hours"].pk, action="boost", reason="hours-reason")
    mallory = signed_in(world["mallory"])
    document_set_access(document=Document.objects.get(pk=world["hours"].pk), inherit=False, public=False,
                        groups=[people["groups"]["finance"]])
    assert "6610" not in mallory.get("/admin/search/rememberedquestion/").content.decode()
    assert "hours-reason" not in mallory.get("/admin/search/retrievaladjustment/").content.decode()
    assert mallory.get("/api/search/adjustments").json() == []


def ranking(user: Any, query: str) -> list[tuple[int, float, float]]:
    return [(h.chunk_id, round(h.score, 9), round(h.distance, 9)) for h in hybrid_search(user=user, query=query).hits]


def test_a_boost_or_hide_on_a_restricted_document_changes_nothing_for_outsiders(world: dict[str, Any],
                                                                                people: dict[str, Any]) -> None:
    outsiders = [people[name] for name in ("bob", "carol", "sam")] + [world["mallory"]]
    adjustment_revoke(user=people["admin"], adjustment_id=world["hide"].pk)
    before = {(u.pk, q): ranking(u, q) for u in outsiders for q in QUERIES}
    assert any(before.values())  # they do find the public hours
    inside_before = ranking(people["alice"], QUERIES[1])
    for action, stable_id in (("hide", world["code"].stable_id), ("boost", ""), ("hide", ""), ("boost", world["code"].stable_id)):
        made = adjustment_add(user=people["admin"], document_id=world["vault"].pk, action=action, reason="test",
                              stable_id=stable_id)
        assert {(u.pk, q): ranking(u, q) for u in outsiders for q in QUERIES} == before, (action, stable_id)
        if action == "hide" and not stable_id:
            assert ranking(people["alice"], QUERIES[1]) != inside_before  # it does act for the group: a control
        adjustment_revoke(user=people["admin"], adjustment_id=made.pk)
