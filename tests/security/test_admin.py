"""The admin for a staff user who is not in a document's groups (issue 11, item 5)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from accounts.tokens import token_authenticate, token_create
from chat.models import Message
from chat.services import answer_produce, question_ask
from kb.library.access import visible_documents
from kb.library.models import Chunk, Document, Folder
from kb.library.services import folder_set_access
from tests.chat.conftest import VAULT, VAULT_QUESTION
from tests.factories import ingested_document
from tests.security.pages import CHANGELIST, MISSING, admin_page

SECRET = "ZX-4412-QUARTZ"
MODELS = ("document", "chunk", "folder", "conversation", "message", "citation", "feedback", "apitoken")


@pytest.fixture
def staff(people: dict[str, Any]) -> Client:
    """Ellen: staff with every view/change permission of our models, in no group."""
    ellen = User.objects.create_user("ellen", password="ellen", is_staff=True)
    ellen.user_permissions.set(Permission.objects.filter(content_type__model__in=MODELS))
    client = Client()
    client.force_login(ellen)
    return client


@pytest.fixture
def hidden(people: dict[str, Any]) -> dict[str, Any]:
    """An engineering-only folder and document, and dave's answer drawn from it."""
    engineering = people["groups"]["engineering"]
    folder = Folder.objects.create(name="Vault procedures 7781")
    folder_set_access(folder=folder, public=False, groups=[engineering])
    document = ingested_document(VAULT, "vault-7781.md", folder=folder)
    asked = question_ask(user=people["dave"], question=VAULT_QUESTION, enqueue=False)
    answer_produce(message_id=asked.answer.pk)
    answer = Message.objects.get(pk=asked.answer.pk)
    assert SECRET in answer.text
    return {"folder": folder, "document": document, "answer": answer, "citation": answer.citations.get()}


def test_a_staff_user_outside_the_group_sees_nothing_of_it_in_the_admin(staff: Client, hidden: dict[str, Any]) -> None:
    office = ingested_document("# Office\n\n## Hours\n\nThe office opens at eight.\n", "office.md")
    lists = [f"/admin/kb/{m}/" for m in ("document", "chunk", "folder")] + [
        f"/admin/chat/{m}/" for m in ("conversation", "message", "feedback")
    ]  # citations have no page of their own: they are the message page's inline
    pages = [(page, CHANGELIST) for page in lists]
    pages += [
        ("/admin/kb/document/", office.title),  # the lists show what she may read
        ("/admin/kb/chunk/", office.title),
        (f"/admin/kb/document/?folder__id__exact={hidden['folder'].pk}", CHANGELIST),
        (f"/admin/chat/conversation/{hidden['answer'].conversation_id}/change/", MISSING),
        (f"/admin/chat/message/{hidden['answer'].pk}/change/", MISSING),
    ]
    for page, marker in pages:
        body = admin_page(staff, page, marker)
        for secret in (SECRET, "Vault procedures 7781", "vault-7781.md", hidden["document"].title):
            assert secret not in body, (page, secret)


def test_a_token_cannot_be_moved_to_another_user(staff: Client, people: dict[str, Any]) -> None:
    ellen = User.objects.get(username="ellen")  # staff see only their own tokens (test_staff_admin.py)
    token, raw = token_create(user=ellen, name="laptop")
    response = staff.post(f"/admin/accounts/apitoken/{token.pk}/change/", {"user": people["admin"].pk, "name": "moved"})
    assert response.status_code == 302
    token.refresh_from_db()
    assert token.name == "moved" and token.user == ellen
    found = token_authenticate(raw, scope=None)
    assert found is not None and found.user == ellen


def test_the_document_file_cannot_be_swapped_in_the_admin(staff: Client, people: dict[str, Any]) -> None:
    document = ingested_document("# Office\n\n## Hours\n\nThe office opens at eight.\n", "office.md")
    page = admin_page(staff, f"/admin/kb/document/{document.pk}/change/", 'name="title"')
    assert 'name="file"' not in page
    assert Document.objects.get(pk=document.pk).filename == "office.md"


def test_a_folder_shared_in_the_admin_shares_its_documents_and_their_chunks(people: dict[str, Any]) -> None:
    folder = Folder.objects.create(name="Office 12")
    folder_set_access(folder=folder, public=False, groups=[people["groups"]["engineering"]])
    document = ingested_document("# Office\n\n## Hours\n\nThe office opens at eight.\n", "office.md", folder=folder)
    assert not visible_documents(people["carol"]).filter(pk=document.pk).exists()
    admin = Client()
    admin.force_login(people["admin"])
    response = admin.post(f"/admin/kb/folder/{folder.pk}/change/", {"name": folder.name, "public": "on"})
    assert response.status_code == 302
    document.refresh_from_db()
    assert visible_documents(people["carol"]).filter(pk=document.pk).exists()
    chunk_acls = list(Chunk.objects.filter(document=document).values_list("acl", flat=True))
    assert chunk_acls and all(acl == document.acl for acl in chunk_acls)
