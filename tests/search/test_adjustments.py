"""Issue 50 item 3: staff's boosts and hides, through retrieval on real indexed documents, the services' rules, the
API and the admin."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from chat.models import Message
from chat.services import answer_produce, question_ask
from kb.library.models import Chunk, Document
from search.adjustments import (
    AdjustmentDenied,
    AdjustmentError,
    AdjustmentNotFound,
    adjustment_add,
    adjustment_revoke,
)
from search.memory import remember
from search.models import RememberedQuestion, RetrievalAdjustment
from search.retrieval import hybrid_search
from tests.factories import ingested_document

OLD = ("# Router manual 2019\n\n## Resetting the router\n\n"
       "To reset the office router, hold the reset button on its back for ten seconds until the lights blink.\n\n"
       "## Cabling\n\nThe uplink cable goes into the yellow port labelled WAN on the office router.\n")
NEW = ("# Router manual 2024\n\n## Resetting the router\n\n"
       "To reset the office router, press and hold the small reset button on its back for thirty seconds "
       "until the lights turn amber.\n")
QUESTION = "How do I reset the office router?"


@pytest.fixture(autouse=True)
def _extractive(settings: Any) -> None:
    settings.KB_ANSWER_BACKEND = "extractive"


@pytest.fixture
def manuals(people: dict[str, Any]) -> dict[str, Document]:
    return {"old": ingested_document(OLD, "router-2019.md"), "new": ingested_document(NEW, "router-2024.md")}


def staff(name: str, *permissions: str, groups: tuple[Any, ...] = ()) -> User:
    """A staff member holding exactly `permissions` ("app.codename")."""
    user = User.objects.create_user(name, password=name, is_staff=True)
    for permission in permissions:
        app_label, codename = permission.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    user.groups.set(groups)
    return User.objects.get(pk=user.pk)  # no permission cache from before the grants


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def passage(document: Document, words: str) -> Chunk:
    return Chunk.objects.get(document=document, content__contains=words)


def chunk_ids(user: Any, query: str = QUESTION) -> list[int]:
    return [hit.chunk_id for hit in hybrid_search(user=user, query=query).hits]


def cited_chunks(user: Any, question: str = QUESTION) -> set[int]:
    asked = question_ask(user=user, question=question, enqueue=False)
    answer_produce(message_id=asked.answer.pk)
    return set(Message.objects.get(pk=asked.answer.pk).citations.values_list("chunk_id", flat=True))


# --------------------------------------------------------------------------- retrieval


def test_a_hidden_passage_never_appears_and_revoking_restores_it(manuals: dict[str, Document],
                                                                  people: dict[str, Any]) -> None:
    carol, admin = people["carol"], people["admin"]
    old = passage(manuals["old"], "ten seconds")
    assert old.pk in chunk_ids(carol) and old.pk in cited_chunks(carol)
    hide = adjustment_add(user=admin, document_id=manuals["old"].pk, action="hide", reason="2019 manual, outdated",
                          stable_id=old.stable_id)
    assert old.pk not in chunk_ids(carol) and old.pk not in chunk_ids(carol, "reset button ten seconds lights blink")
    assert old.pk not in cited_chunks(carol)
    cabling = passage(manuals["old"], "yellow port")
    assert cabling.pk in chunk_ids(carol, "Which port does the uplink cable go into?")  # only that passage
    adjustment_revoke(user=admin, adjustment_id=hide.pk)
    assert old.pk in chunk_ids(carol)


def test_a_hidden_document_never_appears_and_revoking_restores_it(manuals: dict[str, Document],
                                                                   people: dict[str, Any]) -> None:
    carol, admin = people["carol"], people["admin"]
    old = manuals["old"]
    hide = adjustment_add(user=admin, document_id=old.pk, action="hide", reason="Replaced by the 2024 manual")
    for query in (QUESTION, "Which port does the uplink cable go into?"):
        assert not set(chunk_ids(carol, query)) & set(Chunk.objects.filter(document=old).values_list("pk", flat=True))
    assert not cited_chunks(carol) & set(Chunk.objects.filter(document=old).values_list("pk", flat=True))
    adjustment_revoke(user=admin, adjustment_id=hide.pk)
    assert passage(old, "ten seconds").pk in chunk_ids(carol)


def test_a_boosted_passage_moves_ahead_of_the_one_it_trailed(manuals: dict[str, Document], people: dict[str, Any]) -> None:
    carol = people["carol"]
    ranked = chunk_ids(carol)
    old, new = passage(manuals["old"], "ten seconds").pk, passage(manuals["new"], "thirty seconds").pk
    leader, trailer = (old, new) if ranked.index(old) < ranked.index(new) else (new, old)
    trailing = Chunk.objects.get(pk=trailer)
    boost = adjustment_add(user=people["admin"], document_id=trailing.document_id, action="boost",
                           reason="The current manual", start=trailing.start, end=trailing.end)
    assert boost.stable_id == trailing.stable_id  # the range named the passage
    ranked = chunk_ids(carol)
    assert ranked.index(trailer) < ranked.index(leader)
    adjustment_revoke(user=people["admin"], adjustment_id=boost.pk)
    ranked = chunk_ids(carol)
    assert ranked.index(leader) < ranked.index(trailer)


# --------------------------------------------------------------------------- the services' rules


def test_a_new_adjustment_replaces_the_one_in_force_and_the_log_stays(manuals: dict[str, Document],
                                                                       people: dict[str, Any]) -> None:
    sam = staff("sam2", "search.add_retrievaladjustment", "search.change_retrievaladjustment")
    first = adjustment_add(user=sam, document_id=manuals["old"].pk, action="boost", reason="first try")
    second = adjustment_add(user=sam, document_id=manuals["old"].pk, action="hide", reason="  second   thought ")
    first.refresh_from_db()
    assert first.revoked_at is not None and first.revoked_by == sam
    assert second.active and second.reason == "second thought" and second.created_by == sam
    assert RetrievalAdjustment.objects.filter(document=manuals["old"], revoked_at__isnull=True).get() == second
    again = adjustment_revoke(user=sam, adjustment_id=second.pk)
    assert again.revoked_at is not None
    assert adjustment_revoke(user=sam, adjustment_id=second.pk).revoked_at == again.revoked_at  # no change
    assert RetrievalAdjustment.objects.count() == 2


def test_the_services_refuse_without_permission_reason_or_read_access(manuals: dict[str, Document],
                                                                       people: dict[str, Any]) -> None:
    finance = ingested_document("# Ledger\n\n## Close\n\nThe ledger closes on the fifth.\n", "ledger.md",
                                public=False, groups=[people["groups"]["finance"]])
    nobody = staff("viewer", "search.view_retrievaladjustment")
    with pytest.raises(AdjustmentDenied, match="search.add_retrievaladjustment"):
        adjustment_add(user=nobody, document_id=manuals["old"].pk, action="hide", reason="x")
    adder = staff("adder", "search.add_retrievaladjustment")
    with pytest.raises(AdjustmentError, match="Say why"):
        adjustment_add(user=adder, document_id=manuals["old"].pk, action="hide", reason="   ")
    with pytest.raises(AdjustmentError, match="boost"):
        adjustment_add(user=adder, document_id=manuals["old"].pk, action="bury", reason="x")
    missing = Document.objects.order_by("-pk").values_list("pk", flat=True).first() + 100
    for document_id in (finance.pk, missing):  # unreadable and missing: the same answer
        with pytest.raises(AdjustmentNotFound) as refused:
            adjustment_add(user=adder, document_id=document_id, action="hide", reason="x")
        assert str(refused.value) == "No such document."
    with pytest.raises(AdjustmentNotFound):
        adjustment_add(user=adder, document_id=manuals["old"].pk, action="hide", reason="x", stable_id="nope")
    with pytest.raises(AdjustmentNotFound, match="pick the passage again"):
        adjustment_add(user=adder, document_id=manuals["old"].pk, action="hide", reason="x", start=90000, end=90010)
    # A non-staff user holding the permission is not staff: refused.
    plain = User.objects.create_user("plain")
    plain.user_permissions.add(Permission.objects.get(codename="add_retrievaladjustment"))
    with pytest.raises(AdjustmentDenied):
        adjustment_add(user=User.objects.get(pk=plain.pk), document_id=manuals["old"].pk, action="hide", reason="x")
    # Revoking: the change permission, and an adjustment on a document they may read.
    on_finance = adjustment_add(user=people["admin"], document_id=finance.pk, action="hide", reason="x")
    with pytest.raises(AdjustmentDenied, match="search.change_retrievaladjustment"):
        adjustment_revoke(user=adder, adjustment_id=on_finance.pk)
    reviser = staff("reviser", "search.change_retrievaladjustment")
    with pytest.raises(AdjustmentNotFound):
        adjustment_revoke(user=reviser, adjustment_id=on_finance.pk)
    assert RetrievalAdjustment.objects.get(pk=on_finance.pk).active
    bob_staff = staff("bobstaff", "search.change_retrievaladjustment", groups=(people["groups"]["finance"],))
    assert not adjustment_revoke(user=bob_staff, adjustment_id=on_finance.pk).active


# --------------------------------------------------------------------------- API


def post(client: Client, url: str, body: dict[str, Any] | None = None) -> Any:
    return client.post(url, json.dumps(body or {}), content_type="application/json")


def test_the_api_lists_adds_and_revokes_by_the_rules(manuals: dict[str, Document], people: dict[str, Any]) -> None:
    old = manuals["old"]
    body = {"document_id": old.pk, "action": "hide", "reason": "outdated",
            "stable_id": passage(old, "ten seconds").stable_id}
    assert post(signed_in(people["carol"]), "/api/search/adjustments", body).status_code == 404  # not staff
    viewer = signed_in(staff("viewer", "search.view_retrievaladjustment"))
    refused = post(viewer, "/api/search/adjustments", body)
    assert refused.status_code == 403 and "search.add_retrievaladjustment" in refused.json()["detail"]
    editor = signed_in(staff("editor", "search.add_retrievaladjustment", "search.change_retrievaladjustment"))
    made = post(editor, "/api/search/adjustments", body)
    assert made.status_code == 201, made.content
    row = made.json()
    assert row["active"] and row["created_by"] == "editor" and "ten seconds" in row["passage"]
    assert row["link"].startswith(f"/documents/{old.pk}/#char=")
    blank = post(editor, "/api/search/adjustments", {**body, "reason": "   "})
    assert blank.status_code == 422 and "Say why" in blank.json()["detail"]
    assert post(editor, "/api/search/adjustments", {**body, "reason": ""}).status_code == 422
    listed = viewer.get("/api/search/adjustments")
    assert listed.status_code == 200 and [r["id"] for r in listed.json()] == [row["id"]]
    assert viewer.get("/api/search/adjustments", {"active": "false"}).json() == []
    assert signed_in(staff("adder", "search.add_retrievaladjustment")).get("/api/search/adjustments").status_code == 403
    assert post(viewer, f"/api/search/adjustments/{row['id']}/revoke").status_code == 403
    assert post(editor, f"/api/search/adjustments/{row['id'] + 1000}/revoke").status_code == 404
    revoked = post(editor, f"/api/search/adjustments/{row['id']}/revoke")
    assert revoked.status_code == 200 and not revoked.json()["active"] and revoked.json()["revoked_by"] == "editor"


# --------------------------------------------------------------------------- admin


def test_the_adjustment_admin_for_staff_with_only_its_permissions(manuals: dict[str, Document],
                                                                  people: dict[str, Any]) -> None:
    finance = ingested_document("# Ledger\n\n## Close\n\nThe ledger closes on the fifth.\n", "ledger.md",
                                public=False, groups=[people["groups"]["finance"]])
    adjustment_add(user=people["admin"], document_id=finance.pk, action="boost", reason="ledger-reason-7731")
    visible = adjustment_add(user=people["admin"], document_id=manuals["old"].pk, action="hide",
                             reason="router-reason-4410", stable_id=passage(manuals["old"], "ten seconds").stable_id)
    client = signed_in(staff("clerk", "search.view_retrievaladjustment", "search.add_retrievaladjustment",
                             "search.change_retrievaladjustment"))
    page = client.get("/admin/search/retrievaladjustment/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "router-reason-4410" in text and "Router manual 2019" in text and "ten seconds" in text
    assert "ledger-reason-7731" not in text and "Ledger" not in text
    assert "Revoke the selected" in text and "Delete selected" not in text
    add = client.get(f"/admin/search/retrievaladjustment/add/?document={manuals['new'].pk}")
    assert add.status_code == 200
    form = add.content.decode()
    assert "thirty seconds" in form and "Ledger" not in form  # the document's passages; not the unreadable one
    created = client.post("/admin/search/retrievaladjustment/add/", {
        "document": "", "passage": "", "link": f"/documents/{manuals['new'].pk}/#char=30,60", "action": "boost",
        "reason": "the current manual"})
    assert created.status_code == 302, created.content.decode()[:3000]
    boost = RetrievalAdjustment.objects.get(reason="the current manual")
    assert boost.document_id == manuals["new"].pk and boost.stable_id and boost.created_by.username == "clerk"
    refused = client.post("/admin/search/retrievaladjustment/add/", {
        "document": str(finance.pk), "passage": "", "link": "", "action": "hide", "reason": "x"})
    assert refused.status_code == 200 and "Ledger" not in refused.content.decode()
    assert not RetrievalAdjustment.objects.filter(document=finance, action="hide").exists()
    revoked = client.post("/admin/search/retrievaladjustment/", {"action": "revoke", "_selected_action": [visible.pk]})
    assert revoked.status_code == 302
    visible.refresh_from_db()
    assert visible.revoked_by.username == "clerk"
    assert client.get(f"/admin/search/retrievaladjustment/{visible.pk}/delete/").status_code == 403


def test_the_remembered_question_admin_lists_readable_passages_and_forgets(manuals: dict[str, Document],
                                                                           people: dict[str, Any]) -> None:
    reset = passage(manuals["old"], "ten seconds")
    remember(document_id=manuals["old"].pk, stable_id=reset.stable_id, question="router wont come back after reboot",
             kind=RememberedQuestion.Kind.HELPFUL, message_id=1, judge=people["alice"], span=(reset.start + 5, reset.end))
    viewer = signed_in(staff("reader", "search.view_rememberedquestion"))
    page = viewer.get("/admin/search/rememberedquestion/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "router wont come back after reboot" in text and f"/documents/{manuals['old'].pk}/#char={reset.start + 5}," in text
    assert "Forget the selected" not in text
    assert viewer.get("/admin/search/rememberedquestion/add/").status_code == 403
    forgetter = signed_in(staff("forgetter", "search.view_rememberedquestion", "search.delete_rememberedquestion"))
    row = RememberedQuestion.objects.get()
    forgotten = forgetter.post("/admin/search/rememberedquestion/", {"action": "forget", "_selected_action": [row.pk]})
    assert forgotten.status_code == 302 and not RememberedQuestion.objects.exists()
    assert signed_in(staff("nobody")).get("/admin/search/rememberedquestion/").status_code == 403
