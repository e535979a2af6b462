"""What the API fuzzer (test_api_fuzz.py) found, pinned as plain tests: bad input is refused with
a 422 that names it, and changes nothing.

Before: a JSON array, a misspelt field or `"public": 0` sent to a folder's access passed as
"all defaults" and took every reader away; an upload's misspelt `access` was ignored, so the
files went to everyone; `updated_since=0.5` was read as seconds since 1970.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from kb.library.models import Document, Folder
from kb.library.services import folder_set_access
from tests.kb.test_documents_api import bearer, files

pytestmark = pytest.mark.django_db


@pytest.fixture
def finance_folder(people: dict[str, Any]) -> Folder:
    folder = Folder.objects.create(name="Finance")
    folder_set_access(folder=folder, public=False, groups=[people["groups"]["finance"]])
    return folder


@pytest.mark.parametrize("body", [[None, None], {"goups": [1]}, {"public": 0}, "public"], ids=str)
def test_a_folder_access_body_that_is_not_the_schema_changes_nothing(
    people: dict[str, Any], finance_folder: Folder, body: Any
) -> None:
    response = Client().put(f"/api/folders/{finance_folder.pk}/access", json.dumps(body), content_type="application/json",
                            headers=bearer(people["admin"], ["documents:write"]))
    assert response.status_code == 422, response.content
    assert response.json()["detail"]  # names what is wrong
    finance_folder.refresh_from_db()
    assert list(finance_folder.groups.all()) == [people["groups"]["finance"]] and not finance_folder.public


def test_an_upload_with_an_unknown_field_stores_nothing(people: dict[str, Any]) -> None:
    sent = {"files": files(("pay.md", b"# Pay\n\nSalaries.\n")), "acess": "restricted", "groups": [1]}
    response = Client().post("/api/documents", sent, headers=bearer(people["admin"], ["documents:write"]))
    assert response.status_code == 422
    assert "unknown form field(s) 'acess'" in response.json()["detail"]
    assert not Document.objects.exists()


def test_a_number_is_not_a_date(people: dict[str, Any]) -> None:
    headers = bearer(people["alice"], ["documents:read"])
    refused = Client().get("/api/documents", {"updated_since": "0.5"}, headers=headers)
    assert refused.status_code == 422 and "not a number" in json.dumps(refused.json())
    assert Client().get("/api/documents", {"updated_since": "2026-01-31T12:00:00Z"}, headers=headers).status_code == 200


def test_a_search_longer_than_the_server_can_take_is_refused_by_name(people: dict[str, Any]) -> None:
    headers = bearer(people["alice"], ["search"])
    response = Client().get("/api/search", {"q": "x" * 1001}, headers=headers)
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["query", "q"]


def test_a_page_offset_past_what_postgresql_counts_is_refused(people: dict[str, Any]) -> None:
    response = Client().get("/api/conversations", {"offset": 2**64}, headers=bearer(people["alice"], ["ask"]))
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["query", "offset"]  # was a 500


def test_any_offset_iso_8601_allows_is_a_date(people: dict[str, Any]) -> None:
    headers = bearer(people["alice"], ["documents:read"])
    response = Client().get("/api/documents", {"updated_since": "2026-07-29T10:51:37-16:18"}, headers=headers)
    assert response.status_code == 200, response.content  # PostgreSQL refuses that offset: it was a 500


@pytest.mark.parametrize("conversation", ["1", 1.0, True])
def test_a_question_names_its_conversation_by_number(people: dict[str, Any], conversation: Any) -> None:
    response = Client().post("/api/ask", json.dumps({"question": "Where is the export?", "conversation": conversation}),
                             content_type="application/json", headers=bearer(people["alice"], ["ask"]))
    assert response.status_code == 422 and response.json()["detail"][0]["loc"][-1] == "conversation"


@pytest.mark.parametrize(
    ("method", "path", "data"),
    [("get", "/api/documents", {"q": "a\x00b"}), ("post", "/api/ask", {"question": "a\x00b"}),
     ("post", "/api/folders", {"name": "a\x00b"})],
)
def test_text_with_a_nul_is_refused_by_name(people: dict[str, Any], method: str, path: str, data: dict[str, str]) -> None:
    headers = bearer(people["admin"], ["ask", "documents:read", "documents:write"])
    client = Client()
    if method == "get":
        response = client.get(path, data, headers=headers)
    else:
        response = client.post(path, json.dumps(data), content_type="application/json", headers=headers)
    assert response.status_code == 422, response.content  # PostgreSQL holds no NUL: it was a 500
    assert response.json()["detail"][0]["loc"][-1] in data
