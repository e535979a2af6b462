"""/api/documents and /api/folders for an admin, a non-admin, a token without the scope, and nobody."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from accounts.tokens import token_create
from kb.library.models import Chunk, Document, Folder
from kb.library.services import folder_set_access
from tests.factories import ingested_document

ALL = ["search", "ask", "documents:read", "documents:write"]


def bearer(user: Any, scopes: list[str]) -> dict[str, str]:
    _, raw = token_create(user=user, scopes=scopes)
    return {"Authorization": f"Bearer {raw}"}


def as_user(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def doc(title: str, *, status: str = "ready", acl: list[str] | None = None, **fields: Any) -> Document:
    return Document.objects.create(title=title, filename=f"{title}.md", acl=acl or ["everyone"], status=status, **fields)


def files(*named: tuple[str, bytes]) -> list[io.BytesIO]:
    streams = []
    for name, data in named:
        stream = io.BytesIO(data)
        stream.name = name
        streams.append(stream)
    return streams


@pytest.fixture
def shelves(people: dict[str, Any]) -> dict[str, Any]:
    """A public folder, a finance-only folder, and documents in several states."""
    everyone = Folder.objects.create(name="everyone")
    finance = Folder.objects.create(name="finance")
    folder_set_access(folder=everyone, public=True)
    folder_set_access(folder=finance, public=False, groups=[people["groups"]["finance"]])
    finance_acl = [f"g:{people['groups']['finance'].pk}"]
    return {
        "everyone": everyone,
        "finance": finance,
        "guide": doc("guide", folder=everyone),
        "ledger": doc("ledger", folder=finance, acl=finance_acl),
        "queued": doc("pending", status="queued", folder=everyone),
        "failed": doc("broken", status="failed", failed_stage="extracting", failure_reason="broken.pdf: no text layer"),
    }


# --------------------------------------------------------------------------- auth and scopes


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/documents"),
        ("post", "/api/documents"),
        ("get", "/api/documents/1"),
        ("post", "/api/documents/1/retry"),
        ("post", "/api/documents/1/reindex"),
        ("put", "/api/documents/1/access"),
        ("delete", "/api/documents/1"),
        ("get", "/api/folders"),
        ("post", "/api/folders"),
        ("get", "/api/folders/1"),
        ("put", "/api/folders/1/access"),
        ("delete", "/api/folders/1"),
    ],
)
def test_every_endpoint_wants_a_caller_and_the_right_scope(people: dict[str, Any], method: str, path: str) -> None:
    client = Client()
    assert getattr(client, method)(path).status_code == 401
    needed = "documents:read" if method == "get" else "documents:write"
    others = [s for s in ALL if s != needed]
    refused = getattr(client, method)(path, headers=bearer(people["admin"], others))
    assert refused.status_code == 403
    assert needed in refused.json()["detail"]


def test_an_expired_or_revoked_token_is_refused_even_with_the_scope(people: dict[str, Any], client: Client) -> None:
    from datetime import timedelta

    from django.utils import timezone

    _, raw = token_create(user=people["admin"], scopes=ALL, expires_at=timezone.now() - timedelta(seconds=1))
    assert client.get("/api/documents", headers={"Authorization": f"Bearer {raw}"}).status_code == 401


# --------------------------------------------------------------------------- list and detail


def test_the_list_shows_what_the_library_shows(people: dict[str, Any], shelves: dict[str, Any]) -> None:
    admin = as_user(people["admin"]).get("/api/documents").json()
    assert {d["title"] for d in admin["items"]} == {"guide", "pending", "broken"}  # the superuser is not in finance
    assert admin["count"] == 3 and all(d["access"] is not None for d in admin["items"])
    bob = as_user(people["bob"]).get("/api/documents").json()  # finance; not a manager: ready ones only
    assert {d["title"] for d in bob["items"]} == {"guide", "ledger"}
    assert all(d["access"] is None for d in bob["items"])
    carol = Client().get("/api/documents", headers=bearer(people["carol"], ["documents:read"])).json()
    assert {d["title"] for d in carol["items"]} == {"guide"}


def test_list_filters_and_pages(people: dict[str, Any], shelves: dict[str, Any]) -> None:
    admin = as_user(people["admin"])

    def titles(query: str) -> list[str]:
        response = admin.get("/api/documents" + query)
        assert response.status_code == 200, response.content
        return [d["title"] for d in response.json()["items"]]

    assert titles("?status=failed") == ["broken"]
    assert titles(f"?folder={shelves['everyone'].pk}") == ["guide", "pending"]
    assert titles("?folder=none") == ["broken"]
    assert titles("?stale=true") == ["guide"]  # ready, but never stamped with the current index version
    assert titles("?stale=false") == ["broken", "pending"]
    assert titles("?limit=1&offset=1") == ["guide"]
    assert titles("?q=guid") == ["guide"]
    Document.objects.filter(pk=shelves["guide"].pk).update(updated_at="2020-01-01T00:00:00Z")
    assert "guide" not in titles("?updated_since=2024-01-01T00:00:00Z")
    assert admin.get("/api/documents?status=lost").status_code == 422
    assert admin.get("/api/documents?folder=finance").status_code == 422
    assert admin.get("/api/documents?limit=0").status_code == 422
    assert admin.get("/api/documents?offset=99999999999999999999").status_code == 422
    assert admin.get("/api/documents?updated_since=yesterday").status_code == 422
    assert admin.get("/api/documents/99999999999999999999").status_code == 404


def test_the_list_costs_the_same_few_queries_for_many_documents(people: dict[str, Any], shelves: dict[str, Any]) -> None:
    admin = as_user(people["admin"])
    admin.get("/api/documents")  # warm the session and content types
    with CaptureQueriesContext(connection) as few:
        admin.get("/api/documents")
    for n in range(10):
        doc(f"more-{n}", folder=shelves["everyone"])
    with CaptureQueriesContext(connection) as many:
        assert len(admin.get("/api/documents").json()["items"]) == 13
    assert len(many) == len(few)


def test_the_folder_list_costs_the_same_few_queries_for_many_folders(people: dict[str, Any]) -> None:
    admin = as_user(people["admin"])
    folder_set_access(folder=Folder.objects.create(name="first"), public=False, groups=[people["groups"]["hr"]])
    admin.get("/api/folders")
    with CaptureQueriesContext(connection) as few:
        admin.get("/api/folders")
    for n in range(10):
        folder_set_access(folder=Folder.objects.create(name=f"shelf {n}"), public=False, groups=[people["groups"]["hr"]])
    with CaptureQueriesContext(connection) as many:
        assert len(admin.get("/api/folders").json()) == 11
    assert len(many) == len(few)


def test_detail_shows_state_and_hides_what_the_caller_may_not_read(
    people: dict[str, Any], shelves: dict[str, Any]
) -> None:
    failed = as_user(people["admin"]).get(f"/api/documents/{shelves['failed'].pk}").json()
    assert failed["status"] == "failed" and failed["failed_stage"] == "extracting"
    assert failed["failure_reason"] == "broken.pdf: no text layer"
    assert set(failed["index_version"]) == {"embedding_model", "embedding_dimensions", "pipeline_version",
                                            "extractor_version"}
    assert failed["access"] == {"inherit": True, "public": True, "groups": [], "users": []}
    alice = as_user(people["alice"])
    assert alice.get(f"/api/documents/{shelves['ledger'].pk}").status_code == 404
    assert alice.get("/api/documents/999999").status_code == 404
    guide = alice.get(f"/api/documents/{shelves['guide'].pk}").json()
    assert guide["folder_name"] == "everyone" and guide["access"] is None


# --------------------------------------------------------------------------- upload


def test_an_admin_uploads_several_files_each_judged_alone(
    people: dict[str, Any], shelves: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    finance = people["groups"]["finance"]
    sent = files(("a.md", b"# A\n\nAlpha.\n"), ("empty.md", b""), ("b.txt", b"Beta notes.\n"))
    with django_capture_on_commit_callbacks() as callbacks:
        response = Client().post(
            "/api/documents",
            {"files": sent, "access": "restricted", "groups": [finance.pk]},
            headers=bearer(people["admin"], ["documents:write"]),
        )
    assert response.status_code == 201, response.content
    a, empty, b = response.json()["items"]
    assert a["created"] and a["queued"] and a["document"]["status"] == "queued"
    assert a["document"]["access"] == {"inherit": False, "public": False, "groups": [finance.pk], "users": []}
    assert empty["error"] == "empty.md: the file is empty" and empty["document"] is None
    assert b["created"] and Document.objects.get(pk=b["document"]["id"]).acl == [f"g:{finance.pk}"]
    assert Document.objects.get(pk=a["document"]["id"]).uploaded_by == people["admin"]
    assert len(callbacks) == 2  # one ingestion task per stored file, after commit

    admin = as_user(people["admin"])
    public = {"access": "everyone"}
    assert admin.post("/api/documents", {"files": files(("c.md", b"# C\n\nGamma.\n")), **public}).status_code == 201
    again = admin.post("/api/documents", {"files": files(("c.md", b"# C\n\nGamma.\n")), **public})
    assert again.status_code == 200 and again.json()["items"][0]["queued"] is False  # same content: no-op
    # The page's replacement rule (issue 11) holds here too: the superuser is not in finance, so
    # their a.md neither matches nor replaces the finance-only a.md; it becomes a document of its own.
    other = admin.post("/api/documents", {"files": files(("a.md", b"# A\n\nAlpha.\n")), **public})
    assert other.status_code == 201 and other.json()["items"][0]["document"]["id"] != a["document"]["id"]


def test_upload_form_errors_store_nothing(people: dict[str, Any], shelves: dict[str, Any]) -> None:
    admin = as_user(people["admin"])
    before = Document.objects.count()
    unknown = admin.post("/api/documents", {"files": files(("x.md", b"# X\n")), "access": "restricted", "groups": [999]})
    assert unknown.status_code == 400 and unknown.json()["detail"] == "No group with id 999."
    nobody = admin.post("/api/documents", {"files": files(("x.md", b"# X\n")), "access": "restricted"})
    assert nobody.status_code == 400 and "at least one group" in nobody.json()["detail"]
    gone = admin.post("/api/documents", {"files": files(("x.md", b"# X\n")), "folder": "999"})
    assert gone.status_code == 400 and "Folder 999 does not exist" in gone.json()["detail"]
    assert admin.post("/api/documents", {"access": "everyone"}).status_code == 422  # no files at all
    # Readers named without access=restricted would be ignored: refused instead (a fuzzer's find).
    for access in ({}, {"access": "everyone"}, {"folder": str(shelves["finance"].pk)}):
        named = admin.post("/api/documents", {"files": files(("x.md", b"# X\n")), **access, "users": [people["bob"].pk]})
        assert named.status_code == 400 and "access=restricted" in named.json()["detail"]
    assert Document.objects.count() == before


def test_into_a_folder_the_upload_inherits_its_readers(people: dict[str, Any], shelves: dict[str, Any]) -> None:
    response = as_user(people["admin"]).post(
        "/api/documents", {"files": files(("q3.md", b"# Q3\n\nNumbers.\n")), "folder": str(shelves["finance"].pk)}
    )
    document = response.json()["items"][0]["document"]
    assert document["folder"] == shelves["finance"].pk and document["access"]["inherit"] is True
    assert Document.objects.get(pk=document["id"]).acl == [f"g:{people['groups']['finance'].pk}"]


def test_a_non_admin_cannot_upload_even_with_the_write_scope(people: dict[str, Any], shelves: dict[str, Any]) -> None:
    response = Client().post(
        "/api/documents", {"files": files(("x.md", b"# X\n"))}, headers=bearer(people["alice"], ALL)
    )
    assert response.status_code == 404
    assert not Document.objects.filter(filename="x.md").exists()


# --------------------------------------------------------------------------- retry, re-index, access, delete


def test_retry_and_reindex(
    people: dict[str, Any], shelves: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    admin = as_user(people["admin"])
    with django_capture_on_commit_callbacks() as callbacks:
        retried = admin.post(f"/api/documents/{shelves['failed'].pk}/retry")
        reindexed = admin.post(f"/api/documents/{shelves['guide'].pk}/reindex")
    assert retried.status_code == 202 and retried.json()["status"] == "queued" and retried.json()["failure_reason"] == ""
    assert reindexed.status_code == 202 and reindexed.json()["status"] == "queued"
    assert len(callbacks) == 2
    not_failed = admin.post(f"/api/documents/{shelves['ledger'].pk}/retry")  # not readable by the superuser
    assert not_failed.status_code == 404
    assert admin.post(f"/api/documents/{shelves['guide'].pk}/retry").json() == {
        "detail": "The document is queued, not failed."
    }
    busy = admin.post(f"/api/documents/{shelves['queued'].pk}/reindex")
    assert busy.status_code == 409 and "wait until it is ready or failed" in busy.json()["detail"]
    alice = as_user(people["alice"])
    assert alice.post(f"/api/documents/{shelves['failed'].pk}/retry").status_code == 404
    assert alice.post(f"/api/documents/{shelves['guide'].pk}/reindex").status_code == 404


def test_changing_access_moves_the_passages_at_once(people: dict[str, Any]) -> None:
    from search.retrieval import SearchOptions, hybrid_search

    document = ingested_document("# Bonus pool\n\n## Size\n\nThe bonus pool this year is 4.2 million.\n", "bonus.md",
                             uploaded_by=people["admin"])  # so the admin may still act on it once it is hr's only
    hr = people["groups"]["hr"]
    admin = as_user(people["admin"])
    response = admin.put(
        f"/api/documents/{document.pk}/access", {"public": False, "groups": [hr.pk]}, content_type="application/json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["access"] == {"inherit": False, "public": False, "groups": [hr.pk], "users": []}
    assert {tuple(acl) for acl in Chunk.objects.filter(document=document).values_list("acl", flat=True)} == {
        (f"g:{hr.pk}",)
    }

    def finds(user: Any) -> bool:
        hits = hybrid_search(user=user, query="bonus pool size", options=SearchOptions(k=5)).hits
        return document.pk in {h.document_id for h in hits}

    assert finds(people["dave"]) and not finds(people["alice"])
    bad = admin.put(f"/api/documents/{document.pk}/access", {"groups": [999]}, content_type="application/json")
    assert bad.status_code == 400 and bad.json()["detail"] == "No group with id 999."
    nobody = admin.put(f"/api/documents/{document.pk}/access", {}, content_type="application/json")
    assert nobody.status_code == 400 and "at least one group" in nobody.json()["detail"]
    orphan = admin.put(f"/api/documents/{document.pk}/access", {"inherit": True}, content_type="application/json")
    assert orphan.status_code == 400 and "no folder" in orphan.json()["detail"]
    assert finds(people["dave"]) and not finds(people["alice"])  # refused changes changed nothing
    denied = as_user(people["dave"]).put(
        f"/api/documents/{document.pk}/access", {"public": True}, content_type="application/json"
    )
    assert denied.status_code == 404


def test_delete(people: dict[str, Any], shelves: dict[str, Any]) -> None:
    guide = shelves["guide"].pk
    assert as_user(people["alice"]).delete(f"/api/documents/{guide}").status_code == 404
    assert Client().delete(f"/api/documents/{guide}", headers=bearer(people["admin"], ["documents:read"])).status_code == 403
    assert Document.objects.filter(pk=guide).exists()
    response = Client().delete(f"/api/documents/{guide}", headers=bearer(people["admin"], ["documents:write"]))
    assert response.status_code == 204
    assert not Document.objects.filter(pk=guide).exists()
    assert as_user(people["admin"]).delete(f"/api/documents/{guide}").status_code == 404


# --------------------------------------------------------------------------- folders


def test_folders_for_admins_and_others(people: dict[str, Any], shelves: dict[str, Any]) -> None:
    admin = as_user(people["admin"]).get("/api/folders").json()
    assert [f["name"] for f in admin] == ["everyone", "finance", "Not in a folder"]
    finance = people["groups"]["finance"].pk
    assert admin[1]["access"] == {"inherit": False, "public": False, "groups": [finance], "users": []}
    carol = as_user(people["carol"]).get("/api/folders").json()
    assert [(f["name"], f["count"], f["access"]) for f in carol] == [("everyone", 1, None)]
    assert as_user(people["carol"]).get(f"/api/folders/{shelves['finance'].pk}").status_code == 404
    assert as_user(people["bob"]).get(f"/api/folders/{shelves['finance'].pk}").json()["count"] == 1


def test_folder_create_change_and_delete(people: dict[str, Any], shelves: dict[str, Any]) -> None:
    admin = as_user(people["admin"])
    hr = people["groups"]["hr"].pk
    created = admin.post("/api/folders", {"name": "People", "groups": [hr]}, content_type="application/json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["name"] == "People" and body["access"] == {"inherit": False, "public": False, "groups": [hr], "users": []}
    taken = admin.post("/api/folders", {"name": "people"}, content_type="application/json")
    assert taken.status_code == 409 and "already exists" in taken.json()["detail"]
    assert admin.post("/api/folders", {"name": ""}, content_type="application/json").status_code == 422
    assert admin.post("/api/folders", {"name": "   "}, content_type="application/json").status_code == 422
    unknown = admin.post("/api/folders", {"name": "X", "users": [999]}, content_type="application/json")
    assert unknown.status_code == 400 and unknown.json()["detail"] == "No active person with id 999."
    assert as_user(people["alice"]).post("/api/folders", {"name": "Mine"}, content_type="application/json").status_code == 404

    everyone = shelves["everyone"]
    changed = admin.put(
        f"/api/folders/{everyone.pk}/access", {"public": False, "groups": [hr]}, content_type="application/json"
    )
    assert changed.status_code == 200 and changed.json()["access"]["groups"] == [hr]
    shelves["guide"].refresh_from_db()
    assert shelves["guide"].acl == [f"g:{hr}"]  # the inheriting document followed

    busy = admin.delete(f"/api/folders/{everyone.pk}")
    assert busy.status_code == 409 and "still holds documents" in busy.json()["detail"]
    assert admin.delete(f"/api/folders/{body['id']}").status_code == 204
    assert not Folder.objects.filter(pk=body["id"]).exists()
    assert as_user(people["alice"]).delete(f"/api/folders/{everyone.pk}").status_code == 404
    assert as_user(people["alice"]).put(
        f"/api/folders/{everyone.pk}/access", {"public": True}, content_type="application/json"
    ).status_code == 404
    assert Folder.objects.get(pk=everyone.pk).public is False  # the refused change changed nothing


# --------------------------------------------------------------------------- OpenAPI


def test_the_openapi_schema_validates_and_documents_every_endpoint(people: dict[str, Any], client: Client) -> None:
    from openapi_spec_validator import validate

    schema = client.get("/api/openapi.json").json()
    validate(json.loads(json.dumps(schema)))
    ours = {p: ops for p, ops in schema["paths"].items() if p.startswith(("/api/documents", "/api/folders"))}
    assert len([op for ops in ours.values() for op in ops]) == 12
    for path, ops in ours.items():
        for method, op in ops.items():
            assert op.get("summary") and op.get("description"), (path, method)
            assert {"401", "403"} <= set(op["responses"]), (path, method)
            if "{pk}" in path or method != "get":  # a document or folder, or managing: 404 for strangers
                assert "404" in op["responses"], (path, method)
    assert schema["components"]["schemas"]["DocumentOut"]["properties"]["status"]["examples"] == ["ready"]

