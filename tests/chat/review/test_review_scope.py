"""Review scope (issue 29 item 6): a support reviewer granted review of a group's or a folder's answers sees them in
full on the review desk, and only there; every such read is in the access log, with its surface; revoking holds on
the next request; staff give grants only for groups they belong to and folders they may read (real database, real
retrieval, the extractive backend)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from chat.models import Feedback, Judgement, Message, ReviewAccess, ReviewGrant
from kb.library.models import Document, Folder
from kb.library.services import folder_set_access
from tests.chat.conftest import VAULT_QUESTION
from tests.chat.test_api import answered
from tests.factories import ingested_document

pytestmark = pytest.mark.django_db

SECRET = "ZX-4412-QUARTZ"
PAYROLL = """# Payroll calendar

## Cutoff

The payroll cutoff code for the Bergen office is PAYROLL-7731 and it is entered on the twentieth of each month.
Only the HR lead may change it, after the finance review.
"""
PAYROLL_QUESTION = "What is the payroll cutoff code for the Bergen office?"
LEDGER = """# Ledger closing

## Closing code

The ledger closing code for the Tromso office is LEDGER-5520 and it is used at the end of each quarter.
Only the finance controller may use it.
"""
LEDGER_QUESTION = "What is the ledger closing code for the Tromso office?"
PAGE = {"HTTP_X_REVIEW_SURFACE": "page"}  # what the review desk's script sends


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def grant(reviewer: Any, *, group: Any = None, folder: Any = None, by: Any = None) -> ReviewGrant:
    return ReviewGrant.objects.create(reviewer=reviewer, group=group, folder=folder, granted_by=by)


def logged(reviewer: Any) -> list[tuple[int, str, str]]:
    return list(ReviewAccess.objects.filter(reviewer=reviewer).order_by("pk").values_list("answer", "surface", "grants"))


def listed(client: Client, answer: Message, **headers: Any) -> dict[str, Any]:
    response = client.get("/api/review/answers", {"limit": 100}, **headers)
    assert response.status_code == 200, response.content
    [entry] = [a for a in response.json() if a["id"] == answer.pk]
    return dict(entry)


@pytest.fixture
def vault(corpus: dict[str, Document], people: dict[str, Any]) -> Message:
    """alice's answer from the engineering-only vault (the corpus fixture's)."""
    answer = answered(people["alice"], VAULT_QUESTION)
    assert SECRET in answer.text and corpus["vault"].pk in answer.source_documents
    return answer


def test_a_group_grant_shows_the_answer_in_full_on_the_desk_logs_each_read_and_revoking_holds_at_once(
    vault: Message, people: dict[str, Any]
) -> None:
    sam = signed_in(people["sam"])
    engineering = people["groups"]["engineering"]
    # Without a grant: withheld on every review surface, and nothing is logged (sam reads nothing restricted).
    entry = listed(sam, vault)
    assert entry["withheld"] and SECRET not in json.dumps(entry) and entry["review_grants"] == []
    assert logged(people["sam"]) == []

    given = grant(people["sam"], group=engineering, by=people["admin"])
    entry = listed(sam, vault, **PAGE)
    assert not entry["withheld"] and SECRET in entry["text"] and entry["review_grants"] == ["group engineering"]
    assert entry["citations"] and SECRET in json.dumps(entry["citations"])  # the quotes come with it
    detail = sam.get(f"/api/review/answers/{vault.pk}").json()
    assert not detail["withheld"] and SECRET in detail["text"] and SECRET in detail["html"]
    conversation = sam.get(f"/api/review/conversations/{vault.conversation_id}").json()
    [shown] = [m for m in conversation["messages"] if m["id"] == vault.pk]
    assert SECRET in shown["text"] and shown["review_grants"] == ["group engineering"]
    assert logged(people["sam"]) == [(vault.pk, "review_page", "group engineering"),
                                     (vault.pk, "review_api", "group engineering"),
                                     (vault.pk, "review_conversation", "group engineering")]
    row = ReviewAccess.objects.filter(reviewer=people["sam"]).first()
    assert row is not None and row.reviewer_name == "sam" and row.at is not None

    # alice reads her own answer on her own access: the review desk logs only reads through a grant.
    people["alice"].groups.add(people["groups"]["support"])
    assert not listed(signed_in(people["alice"]), vault)["withheld"]
    assert ReviewAccess.objects.exclude(reviewer=people["sam"]).count() == 0

    given.delete()  # revoked: the next request is withheld again, and logs nothing
    entry = listed(sam, vault)
    assert entry["withheld"] and SECRET not in json.dumps(entry)
    assert SECRET not in sam.get(f"/api/review/answers/{vault.pk}").content.decode()
    assert SECRET not in sam.get(f"/api/review/conversations/{vault.conversation_id}").content.decode()
    assert len(logged(people["sam"])) == 3


def test_a_grant_lets_the_reviewer_judge_the_answer_on_the_desk_only(vault: Message, people: dict[str, Any]) -> None:
    sam = signed_in(people["sam"])
    flag = {"kind": "outdated", "note": "checked"}
    verdict = {"kind": "wrong"}
    assert sam.post(f"/api/review/answers/{vault.pk}/feedback", flag, content_type="application/json").status_code == 404
    assert sam.post(f"/api/review/answers/{vault.pk}/judgement", verdict,
                    content_type="application/json").status_code == 404
    grant(people["sam"], group=people["groups"]["engineering"])
    assert sam.post(f"/api/review/answers/{vault.pk}/feedback", flag, content_type="application/json").status_code == 201
    assert sam.post(f"/api/review/answers/{vault.pk}/judgement", verdict,
                    content_type="application/json").status_code == 200
    assert Feedback.objects.filter(message=vault, reviewer=people["sam"]).exists()
    assert Judgement.objects.filter(message=vault, judge=people["sam"], role="reviewer").exists()
    # The grant opens nothing beyond the desk: the asker's own judgement API and the document stay closed.
    assert sam.post(f"/api/messages/{vault.pk}/judgement", verdict, content_type="application/json").status_code == 404
    vault_document = Document.objects.get(pk=vault.source_documents[0])
    assert sam.get(f"/documents/{vault_document.pk}/").status_code == 404


def test_a_folder_grant_covers_the_documents_taking_the_folders_access_and_nothing_else(
    people: dict[str, Any],
) -> None:
    hr, finance = people["groups"]["hr"], people["groups"]["finance"]
    people_files = Folder.objects.create(name="People files")
    folder_set_access(folder=people_files, public=False, groups=[hr])
    payroll = ingested_document(PAYROLL, "payroll.md", folder=people_files)
    ledger = ingested_document(LEDGER, "ledger.md", folder=people_files, public=False, groups=[finance])  # its own access
    assert payroll.inherit_access and not ledger.inherit_access
    hana = User.objects.create_user("hana", password="hana")
    hana.groups.set([hr])
    payroll_answer = answered(hana, PAYROLL_QUESTION)
    ledger_answer = answered(people["bob"], LEDGER_QUESTION)
    assert "PAYROLL-7731" in payroll_answer.text and payroll_answer.source_documents == [payroll.pk]
    assert "LEDGER-5520" in ledger_answer.text and ledger_answer.source_documents == [ledger.pk]

    sam = signed_in(people["sam"])
    grant(people["sam"], folder=people_files)
    entry = listed(sam, payroll_answer)
    assert not entry["withheld"] and "PAYROLL-7731" in entry["text"] and entry["review_grants"] == ["folder People files"]
    entry = listed(sam, ledger_answer)  # in the folder, but read by finance only: not the folder's answer
    assert entry["withheld"] and "LEDGER-5520" not in json.dumps(entry)
    assert logged(people["sam"]) == [(payroll_answer.pk, "review_api", "folder People files")] * 2  # a row a read

    # A document moved out of the folder leaves the grant's cover with it.
    Document.objects.filter(pk=payroll.pk).update(folder=None)
    assert listed(sam, payroll_answer)["withheld"]


def test_an_answer_drawing_on_a_document_outside_every_grant_stays_withheld(
    vault: Message, people: dict[str, Any]
) -> None:
    mixed = Message.objects.get(pk=vault.pk)
    finance_only = ingested_document(LEDGER, "ledger.md", public=False, groups=[people["groups"]["finance"]])
    Message.objects.filter(pk=mixed.pk).update(source_documents=[*mixed.source_documents, finance_only.pk])
    grant(people["sam"], group=people["groups"]["engineering"])
    entry = listed(signed_in(people["sam"]), mixed)
    assert entry["withheld"] and SECRET not in json.dumps(entry)
    assert logged(people["sam"]) == []


def test_a_grant_counts_only_while_its_holder_is_a_reviewer(vault: Message, people: dict[str, Any]) -> None:
    grant(people["sam"], group=people["groups"]["engineering"])
    people["sam"].groups.remove(people["groups"]["support"])
    sam = signed_in(people["sam"])
    assert sam.get("/api/review/answers").status_code == 404
    assert sam.get(f"/api/review/answers/{vault.pk}").status_code == 404
    assert logged(people["sam"]) == []


# ----------------------------------------------------------------------- the admin


def staff(name: str, *codenames: str, groups: tuple[Any, ...] = ()) -> User:
    user = User.objects.create_user(name, password=name, is_staff=True)
    user.groups.set(groups)
    user.user_permissions.set([Permission.objects.get(content_type__app_label="chat", codename=c) for c in codenames])
    return user


def test_staff_grant_only_groups_they_belong_to_and_folders_they_may_read(people: dict[str, Any]) -> None:
    engineering, finance = people["groups"]["engineering"], people["groups"]["finance"]
    lead = staff("lead", "add_reviewgrant", "change_reviewgrant", "view_reviewgrant", "delete_reviewgrant",
                 groups=(engineering,))
    ops = Folder.objects.create(name="Ops")
    folder_set_access(folder=ops, public=False, groups=[engineering])
    books = Folder.objects.create(name="Books")
    folder_set_access(folder=books, public=False, groups=[finance])
    client = signed_in(lead)
    form = client.get("/admin/chat/reviewgrant/add/").content.decode()
    assert "engineering" in form and "finance" not in form and "Books" not in form and "Ops" in form

    assert client.post("/admin/chat/reviewgrant/add/", {"reviewer": people["sam"].pk, "group": finance.pk}).status_code == 200
    assert client.post("/admin/chat/reviewgrant/add/", {"reviewer": people["sam"].pk, "folder": books.pk}).status_code == 200
    assert client.post("/admin/chat/reviewgrant/add/", {"reviewer": people["carol"].pk,
                                                        "group": engineering.pk}).status_code == 200  # not a reviewer
    assert client.post("/admin/chat/reviewgrant/add/", {"reviewer": people["sam"].pk, "group": engineering.pk,
                                                        "folder": ops.pk}).status_code == 200  # one or the other
    assert not ReviewGrant.objects.exists()

    created = client.post("/admin/chat/reviewgrant/add/", {"reviewer": people["sam"].pk, "group": engineering.pk,
                                                           "note": "ticket 12"})
    assert created.status_code == 302, created.content
    given = ReviewGrant.objects.get()
    assert (given.reviewer, given.group, given.granted_by) == (people["sam"], engineering, lead)
    # Changing a grant to a group the granter is not in is refused as adding it is.
    changed = client.post(f"/admin/chat/reviewgrant/{given.pk}/change/", {"reviewer": people["sam"].pk,
                                                                          "group": finance.pk})
    assert changed.status_code == 200 and ReviewGrant.objects.get().group == engineering

    # A finance grant given by a superuser is not the lead's to see or revoke.
    other = grant(people["sam"], group=finance, by=people["admin"])
    listing = client.get("/admin/chat/reviewgrant/").content.decode()
    assert "ticket 12" in listing and "group finance" not in listing
    assert client.get(f"/admin/chat/reviewgrant/{other.pk}/change/").status_code == 302  # "doesn't exist": to the index
    client.post(f"/admin/chat/reviewgrant/{other.pk}/delete/", {"post": "yes"})
    assert ReviewGrant.objects.filter(pk=other.pk).exists()
    assert client.post(f"/admin/chat/reviewgrant/{given.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not ReviewGrant.objects.filter(pk=given.pk).exists()

    # The reviewer's user page lists their grants, to superusers only.
    assert "group finance" in signed_in(people["admin"]).get(
        f"/admin/auth/user/{people['sam'].pk}/change/").content.decode()
    viewer = staff("viewer", groups=(engineering,))
    viewer.user_permissions.add(Permission.objects.get(content_type__app_label="auth", codename="view_user"))
    user_page = signed_in(viewer).get(f"/admin/auth/user/{people['sam'].pk}/change/")
    assert user_page.status_code == 200 and "review grant" not in user_page.content.decode().lower()

    # Without the model permission, no grant at all, whatever groups they are in.
    plain = signed_in(staff("plain", groups=(engineering, people["groups"]["support"])))
    assert plain.get("/admin/chat/reviewgrant/add/").status_code == 403
    assert plain.post("/admin/chat/reviewgrant/add/", {"reviewer": people["sam"].pk,
                                                       "group": engineering.pk}).status_code == 403
    assert ReviewGrant.objects.filter(pk=other.pk).count() == ReviewGrant.objects.count() == 1


def test_the_access_log_is_for_superusers_only_read_only_and_exports_as_csv(
    vault: Message, people: dict[str, Any]
) -> None:
    grant(people["sam"], group=people["groups"]["engineering"])
    sam = signed_in(people["sam"])
    listed(sam, vault, **PAGE)
    sam.get(f"/api/review/answers/{vault.pk}")
    [first, second] = ReviewAccess.objects.order_by("pk")

    admin = signed_in(people["admin"])
    page = admin.get("/admin/chat/reviewaccess/")
    assert page.status_code == 200 and "Review page" in page.content.decode() and "Review API" in page.content.decode()
    assert admin.get(f"/admin/chat/reviewaccess/{first.pk}/change/").status_code == 200
    for term, found in (("sam", 2), (str(vault.pk), 2), ("alice", 0), ("9999", 0)):
        searched = admin.get("/admin/chat/reviewaccess/", {"q": term})
        assert searched.status_code == 200 and searched.context["cl"].result_count == found, term
    assert admin.get("/admin/chat/reviewaccess/add/").status_code == 403
    admin.post(f"/admin/chat/reviewaccess/{first.pk}/delete/", {"post": "yes"})
    admin.post("/admin/chat/reviewaccess/", {"action": "delete_selected", "_selected_action": [first.pk], "post": "yes"})
    assert ReviewAccess.objects.count() == 2

    exported = admin.post("/admin/chat/reviewaccess/", {"action": "export_csv",
                                                        "_selected_action": [first.pk, second.pk]})
    assert exported.status_code == 200 and exported["Content-Type"] == "text/csv"
    rows = list(csv.reader(io.StringIO(b"".join(exported.streaming_content).decode())))  # type: ignore[attr-defined]
    assert rows[0] == ["at", "reviewer", "answer", "surface", "grants"]
    assert [r[1:] for r in rows[1:]] == [["sam", str(vault.pk), "review_page", "group engineering"],
                                         ["sam", str(vault.pk), "review_api", "group engineering"]]
    # A name from a sign-in provider may start like a formula: the spreadsheet shows it as text.
    ReviewAccess.objects.filter(pk=first.pk).update(reviewer_name='=HYPERLINK("http://evil")')
    exported = admin.post("/admin/chat/reviewaccess/", {"action": "export_csv", "_selected_action": [first.pk]})
    rows = list(csv.reader(io.StringIO(b"".join(exported.streaming_content).decode())))  # type: ignore[attr-defined]
    assert rows[1][1] == '\'=HYPERLINK("http://evil")'

    # Nobody else: not the reviewer, not staff holding every permission of the model.
    nosy = staff("nosy", "view_reviewaccess", "change_reviewaccess", "delete_reviewaccess", "add_reviewaccess",
                 groups=(people["groups"]["support"],))
    for client in (sam, signed_in(nosy)):
        assert client.get("/admin/chat/reviewaccess/").status_code in (302, 403)
        assert client.get(f"/admin/chat/reviewaccess/{first.pk}/change/").status_code in (302, 403)
        assert client.post("/admin/chat/reviewaccess/", {"action": "export_csv",
                                                         "_selected_action": [first.pk]}).status_code in (302, 403)
        assert "reviewaccess" not in client.get("/admin/").content.decode()
    assert ReviewAccess.objects.count() == 2
