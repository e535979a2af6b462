"""The admin for staff holding some Django permissions, outside the restricted groups (issue 28, items 3
and 8, and the staff rule: a change needs the model permission and read access; superusers pass)."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from accounts.models import OidcIdentity
from accounts.tokens import token_create
from chat.models import Citation, Feedback, Message
from chat.services import answer_produce, question_ask
from kb.library.access import visible_documents
from kb.library.models import Folder
from kb.library.services import folder_set_access
from tests.chat.conftest import EXPORT_QUESTION, SHIPMENTS, VAULT, VAULT_QUESTION
from tests.factories import ingested_document, uploaded_document
from tests.security.pages import CHANGELIST, MISSING, admin_page

SECRET = "ZX-4412-QUARTZ"
VAULT_TITLE = "Vault rotation"  # the restricted document's title, the first part of its citations' labels
VAULT_FOLDER = "Vault procedures 7781"


def staff(username: str, *permissions: str) -> tuple[User, Client]:
    """A staff user in no group holding exactly `permissions` ("app_label.codename"), signed in."""
    user = User.objects.create_user(username, password=username, is_staff=True)
    for permission in permissions:
        app_label, codename = permission.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    client = Client()
    client.force_login(user)
    return user, client


def answered(user: Any, question: str) -> Message:
    asked = question_ask(user=user, question=question, enqueue=False)
    answer_produce(message_id=asked.answer.pk)
    return Message.objects.get(pk=asked.answer.pk)


@pytest.fixture
def world(people: dict[str, Any]) -> dict[str, Any]:
    """A public manual; an engineering-only folder holding the vault procedure and one public notice (so its
    name is not secret to everybody); dave's answer citing the vault; mallory, staff in no group, and her own
    answer; carol's answer to the same question."""
    ingested_document(SHIPMENTS, "shipments.md")
    folder = Folder.objects.create(name=VAULT_FOLDER)
    folder_set_access(folder=folder, public=False, groups=[people["groups"]["engineering"]])
    vault = ingested_document(VAULT, "vault-7781.md", folder=folder)
    ingested_document("# Lobby\n\n## Hours\n\nThe lobby opens at seven.\n", "lobby.md", folder=folder, public=True)
    mallory = User.objects.create_user("mallory", password="mallory", is_staff=True)
    secret_answer = answered(people["dave"], VAULT_QUESTION)
    assert SECRET in secret_answer.text
    own = answered(mallory, EXPORT_QUESTION)
    other = answered(people["carol"], EXPORT_QUESTION)
    assert own.citations.exists() and other.citations.exists()
    return {
        "folder": folder, "vault": vault, "mallory": mallory, "own": own, "other": other,
        "secret_answer": secret_answer, "secret_citation": secret_answer.citations.get(),
    }


def as_mallory(world: dict[str, Any], *permissions: str) -> Client:
    mallory = world["mallory"]
    for permission in permissions:
        app_label, codename = permission.split(".")
        mallory.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    client = Client()
    client.force_login(mallory)
    return client


def options(page: str, name: str) -> set[int]:
    """The ids a <select name=...> offers (its empty choice left out)."""
    select = re.search(rf'<select name="{re.escape(name)}"[^>]*>(.*?)</select>', page, re.S)
    assert select, f"no select {name}"
    return {int(value) for value in re.findall(r'<option value="(\d+)"', select.group(1))}


def assert_hidden(page: str) -> None:
    for secret in (SECRET, VAULT_TITLE, "vault-7781.md"):
        assert secret not in page, secret


FEEDBACK_PERMISSIONS = ("chat.view_message", "chat.change_message", "chat.add_feedback", "chat.change_feedback",
                        "chat.view_feedback")


def test_the_feedback_inline_offers_only_the_citations_of_that_answer(world: dict[str, Any]) -> None:
    """Item 3: the inline's citation select held every citation in the database."""
    client = as_mallory(world, *FEEDBACK_PERMISSIONS)
    response = client.get(f"/admin/chat/message/{world['own'].pk}/change/")
    assert response.status_code == 200
    page = response.content.decode()
    assert options(page, "feedback-__prefix__-citation") == set(world["own"].citations.values_list("pk", flat=True))
    assert_hidden(page)


def test_the_feedback_inline_refuses_a_citation_of_another_answer(world: dict[str, Any]) -> None:
    client = as_mallory(world, *FEEDBACK_PERMISSIONS)
    own = world["own"]
    for citation in (world["secret_citation"], world["other"].citations.first()):
        response = client.post(f"/admin/chat/message/{own.pk}/change/", {
            "citations-TOTAL_FORMS": "0", "citations-INITIAL_FORMS": "0",
            "feedback-TOTAL_FORMS": "1", "feedback-INITIAL_FORMS": "0",
            "feedback-0-kind": "wrong_source", "feedback-0-citation": str(citation.pk), "feedback-0-note": "x",
            "feedback-0-message": str(own.pk),
        })
        assert response.status_code == 200  # the form again, with the error
        assert_hidden(response.content.decode())
    assert not Feedback.objects.exists()


def test_the_feedback_admin_refuses_and_never_names_a_citation_it_cannot_read(world: dict[str, Any]) -> None:
    """Item 3: the raw-id citation field accepted any id and showed its label."""
    client = as_mallory(world, *FEEDBACK_PERMISSIONS)
    secret = world["secret_citation"]
    page = client.get(f"/admin/chat/feedback/add/?citation={secret.pk}").content.decode()
    assert_hidden(page)
    response = client.post("/admin/chat/feedback/add/", {
        "kind": "wrong_source", "message": str(world["own"].pk), "citation": str(secret.pk), "note": "",
    })
    assert response.status_code == 200
    assert_hidden(response.content.decode())
    assert not Feedback.objects.exists()
    # A citation she may read, but of another answer: refused too.
    response = client.post("/admin/chat/feedback/add/", {
        "kind": "wrong_source", "message": str(world["own"].pk), "citation": str(world["other"].citations.first().pk),
    })
    assert response.status_code == 200 and not Feedback.objects.exists()
    # Her own answer's citation is accepted.
    own_citation = world["own"].citations.first()
    response = client.post("/admin/chat/feedback/add/", {
        "kind": "wrong_source", "message": str(world["own"].pk), "citation": str(own_citation.pk),
    })
    assert response.status_code == 302
    assert Feedback.objects.get().citation == own_citation


def test_feedback_that_points_at_a_restricted_citation_is_not_listed(world: dict[str, Any]) -> None:
    """A row made before (or by a superuser) that pairs a readable answer with a restricted citation."""
    feedback = Feedback.objects.create(message=world["own"], citation=world["secret_citation"], kind="wrong_source")
    client = as_mallory(world, *FEEDBACK_PERMISSIONS, "chat.delete_feedback")
    for page, marker in (("/admin/chat/feedback/", CHANGELIST), (f"/admin/chat/feedback/{feedback.pk}/change/", MISSING),
                         (f"/admin/chat/feedback/{feedback.pk}/delete/", MISSING),
                         (f"/admin/chat/message/{world['own'].pk}/change/", 'id="message_form"')):
        assert_hidden(admin_page(client, page, marker))
    assert Feedback.objects.filter(pk=feedback.pk).exists()


def test_an_answer_is_read_only_in_the_admin(world: dict[str, Any]) -> None:
    """What decides who may read an answer (its sources) and its flags are not the admin's to edit."""
    client = as_mallory(world, *FEEDBACK_PERMISSIONS)
    page = admin_page(client, f"/admin/chat/message/{world['own'].pk}/change/", 'id="message_form"')
    for field in ("source_documents", "unsupported", "rating", "worker"):
        assert f'name="{field}"' not in page, field


def test_deleting_a_conversation_or_question_never_lists_or_removes_what_she_cannot_read(world: dict[str, Any]) -> None:
    """A delete page lists everything the delete would take with it, restricted answers' citations included."""
    client = as_mallory(world, "chat.view_conversation", "chat.delete_conversation", "chat.view_message",
                        "chat.delete_message", "chat.delete_citation", "chat.delete_feedback")
    secret = world["secret_answer"]
    pages = [
        (f"/admin/chat/conversation/{secret.conversation_id}/delete/", MISSING),
        (f"/admin/chat/message/{secret.question_id}/delete/", MISSING),
        ("/admin/chat/conversation/", CHANGELIST),
    ]
    for page, marker in pages:
        assert_hidden(admin_page(client, page, marker))
    client.post(f"/admin/chat/conversation/{secret.conversation_id}/delete/", {"post": "yes"})
    client.post(f"/admin/chat/message/{secret.question_id}/delete/", {"post": "yes"})
    assert Message.objects.filter(pk=secret.pk).exists() and Citation.objects.filter(message=secret).exists()
    # Her own conversation she may delete.
    response = client.post(f"/admin/chat/conversation/{world['own'].conversation_id}/delete/", {"post": "yes"})
    assert response.status_code == 302 and not Message.objects.filter(pk=world["own"].pk).exists()


def test_staff_cannot_take_over_a_folder_they_cannot_read(world: dict[str, Any]) -> None:
    """The staff rule: change_folder is not enough, she must be able to read the folder. Its public notice
    makes its name visible to her, which used to list it and open its access form to her."""
    mallory, folder = world["mallory"], world["folder"]
    client = as_mallory(world, "kb.view_folder", "kb.change_folder", "kb.delete_folder")
    assert VAULT_FOLDER not in admin_page(client, "/admin/kb/folder/", CHANGELIST)
    client.post(f"/admin/kb/folder/{folder.pk}/change/", {"name": folder.name, "users": [str(mallory.pk)]})
    client.post(f"/admin/kb/folder/{folder.pk}/delete/", {"post": "yes"})
    assert Folder.objects.filter(pk=folder.pk).exists() and not folder.users.exists()
    assert not visible_documents(mallory).filter(pk=world["vault"].pk).exists()
    # A folder shared with her she may change.
    mine = Folder.objects.create(name="Mallory's notes")
    folder_set_access(folder=mine, public=False, users=[mallory])
    response = client.post(f"/admin/kb/folder/{mine.pk}/change/", {"name": "Renamed", "users": [str(mallory.pk)]})
    assert response.status_code == 302 and Folder.objects.get(pk=mine.pk).name == "Renamed"


def test_staff_cannot_open_or_change_a_document_or_chunk_they_cannot_read(world: dict[str, Any]) -> None:
    vault = world["vault"]
    client = as_mallory(world, "kb.view_document", "kb.change_document", "kb.delete_document",
                        "kb.view_chunk", "kb.delete_chunk")
    chunk = vault.chunks.first()
    for page, marker in ((f"/admin/kb/document/{vault.pk}/change/", MISSING), (f"/admin/kb/document/{vault.pk}/delete/", MISSING),
                         (f"/admin/kb/chunk/{chunk.pk}/change/", MISSING), (f"/admin/kb/chunk/{chunk.pk}/delete/", MISSING),
                         (f"/admin/kb/document/{vault.pk}/history/", MISSING), ("/admin/kb/document/?q=rotation", CHANGELIST),
                         ("/admin/kb/chunk/", CHANGELIST)):
        assert_hidden(admin_page(client, page, marker))
    client.post(f"/admin/kb/document/{vault.pk}/change/", {"title": "Taken", "public": "on"})
    client.post(f"/admin/kb/document/{vault.pk}/delete/", {"post": "yes"})
    client.post("/admin/kb/document/", {"action": "delete_selected", "_selected_action": [str(vault.pk)], "post": "yes"})
    vault.refresh_from_db()
    assert vault.title == VAULT_TITLE and not vault.public
    assert not visible_documents(world["mallory"]).filter(pk=vault.pk).exists()


def test_a_pending_versions_hash_is_not_shown_to_staff_of_the_old_audience(people: dict[str, Any]) -> None:
    """Item 10's admin half: the document page shows the stored file's sha256, which while a new version waits is
    that version's: to staff who read only the old version it would confirm a guess of the new file."""
    ingested_document("# Pay\n\nThe pay scale is published in March.\n", "pay.md")
    guess = b"# Pay\n\nThe new pay scale starts at 7,300.\n"
    document = uploaded_document(guess, "pay.md", public=False, groups=[people["groups"]["hr"]])
    assert document.pending_acl and document.acl == ["everyone"]
    _, client = staff("mallory", "kb.view_document", "kb.change_document")
    digest = hashlib.sha256(guess).hexdigest()
    # The version waiting is not hers to read, so neither is the document's page (kb.library.access.may_read).
    for page in (f"/admin/kb/document/{document.pk}/change/", f"/admin/kb/document/{document.pk}/history/"):
        response = client.get(page)
        assert response.status_code == 403, page
        assert digest not in response.content.decode(), page
    assert digest not in admin_page(client, "/admin/kb/document/", CHANGELIST)
    superuser = Client()
    superuser.force_login(people["admin"])
    assert digest in superuser.get(f"/admin/kb/document/{document.pk}/change/").content.decode()


def test_searching_the_admin_finds_nothing_she_cannot_read(world: dict[str, Any], people: dict[str, Any]) -> None:
    """A search that finds a row confirms what the row holds, even when the row is not shown."""
    client = as_mallory(world, "kb.view_document", "kb.view_chunk", "chat.view_message", "chat.view_conversation",
                        "chat.view_feedback", "chat.change_feedback")
    superuser = Client()
    superuser.force_login(people["admin"])
    for url, term in (("/admin/kb/document/", "rotation"), ("/admin/kb/chunk/", "QUARTZ"),
                      ("/admin/chat/message/", "QUARTZ"), ("/admin/chat/conversation/", "vault")):
        assert client.get(url, {"q": term}).context["cl"].result_count == 0, url
        assert superuser.get(url, {"q": term}).context["cl"].result_count > 0, url
    lookup = {"app_label": "chat", "model_name": "feedback", "field_name": "message", "term": "QUARTZ"}
    assert client.get("/admin/autocomplete/", lookup).json()["results"] == []
    assert superuser.get("/admin/autocomplete/", lookup).json()["results"]


def test_the_superuser_still_manages_everything(world: dict[str, Any], people: dict[str, Any]) -> None:
    client = Client()
    client.force_login(people["admin"])
    page = client.get(f"/admin/chat/message/{world['secret_answer'].pk}/change/").content.decode()
    assert options(page, "feedback-__prefix__-citation") == {world["secret_citation"].pk}
    for url in (f"/admin/kb/folder/{world['folder'].pk}/change/", f"/admin/kb/document/{world['vault'].pk}/change/",
                "/admin/accounts/oidcidentity/add/", f"/admin/auth/user/{world['mallory'].pk}/change/"):
        assert client.get(url).status_code == 200, url


ACCOUNTS = ("accounts.add_oidcidentity", "accounts.change_oidcidentity", "accounts.delete_oidcidentity",
            "accounts.view_oidcidentity", "accounts.add_apitoken", "accounts.change_apitoken",
            "accounts.delete_apitoken", "accounts.view_apitoken", "accounts.add_profile", "accounts.change_profile",
            "accounts.delete_profile", "accounts.view_profile")


def test_only_a_superuser_may_link_a_sign_in_identity(people: dict[str, Any]) -> None:
    """Item 8: staff holding every accounts permission linked their own provider `sub` to the superuser."""
    mallory, client = staff("mallory", *ACCOUNTS)
    assert set(Permission.objects.filter(content_type__app_label="accounts")) <= set(mallory.user_permissions.all())
    existing = OidcIdentity.objects.create(user=people["alice"], issuer="https://idp.example", subject="alice-sub")
    for url in ("/admin/accounts/oidcidentity/", "/admin/accounts/oidcidentity/add/",
                f"/admin/accounts/oidcidentity/{existing.pk}/change/", f"/admin/accounts/oidcidentity/{existing.pk}/delete/"):
        assert client.get(url).status_code == 403, url
    link = {"user": str(people["admin"].pk), "issuer": "https://idp.example", "subject": "mallory-sub"}
    assert client.post("/admin/accounts/oidcidentity/add/", link).status_code == 403
    assert client.post(f"/admin/accounts/oidcidentity/{existing.pk}/change/", link).status_code == 403
    assert list(OidcIdentity.objects.values_list("user", "subject")) == [(people["alice"].pk, "alice-sub")]
    assert "oidcidentity" not in client.get("/admin/").content.decode()


def test_staff_manage_only_their_own_api_tokens(people: dict[str, Any]) -> None:
    """A token is its owner's credential: revoking or deleting the superuser's is not a staff user's to do."""
    mallory, client = staff("mallory", *ACCOUNTS)
    theirs, _ = token_create(user=people["admin"], name="deploy 5521")
    mine, _ = token_create(user=mallory, name="my laptop")
    page = client.get("/admin/accounts/apitoken/").content.decode()
    assert "my laptop" in page and "deploy 5521" not in page
    client.post(f"/admin/accounts/apitoken/{theirs.pk}/delete/", {"post": "yes"})
    for action in ("revoke", "delete_selected"):
        client.post("/admin/accounts/apitoken/", {"action": action, "_selected_action": [str(theirs.pk)], "post": "yes"})
    theirs.refresh_from_db()
    assert theirs.active
    client.post("/admin/accounts/apitoken/", {"action": "revoke", "_selected_action": [str(mine.pk)]})
    mine.refresh_from_db()
    assert not mine.active


def test_only_a_superuser_may_change_accounts_and_group_membership(people: dict[str, Any]) -> None:
    """Django's user admin lets change_user grant groups, superuser status and passwords: a staff user holding it
    would put herself in any document's group, or take over the superuser."""
    mallory, client = staff("mallory", "auth.view_user", "auth.change_user", "auth.add_user", "auth.delete_user",
                            "auth.view_group", "auth.change_group")
    engineering = people["groups"]["engineering"]
    for url in (f"/admin/auth/user/{mallory.pk}/change/", f"/admin/auth/user/{people['admin'].pk}/password/",
                f"/admin/auth/user/{people['dave'].pk}/delete/", "/admin/auth/user/add/"):
        response = client.get(url)
        assert response.status_code in (200, 403), url
        assert 'name="groups"' not in response.content.decode() and 'name="password1"' not in response.content.decode()
        assert 'name="post"' not in response.content.decode(), url
    client.post(f"/admin/auth/user/{mallory.pk}/change/", {
        "username": "mallory", "is_active": "on", "is_staff": "on", "is_superuser": "on",
        "groups": [str(engineering.pk)], "date_joined_0": "2024-01-01", "date_joined_1": "00:00:00",
    })
    client.post(f"/admin/auth/user/{people['admin'].pk}/password/", {"password1": "Xx-12345678", "password2": "Xx-12345678"})
    mallory.refresh_from_db()
    assert not mallory.is_superuser and not mallory.groups.exists()
    assert not people["admin"].check_password("Xx-12345678")
