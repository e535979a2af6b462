"""The browser UI's views over HTTP: roles, 404 for what a user may not see, CSP, upload and retry."""

from __future__ import annotations

import io
import json
from typing import Any, cast

import pytest
from django.db import connection
from django.http import StreamingHttpResponse
from django.test import Client
from django.test.utils import CaptureQueriesContext

from kb.library.models import Document

pytestmark = pytest.mark.django_db


def as_user(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def nav_links(html: str) -> set[str]:
    nav = html.split('<nav class="mainnav"', 1)[1].split("</nav>", 1)[0] if '<nav class="mainnav"' in html else ""
    return {label for label in ("Ask", "Library", "Review", "Gaps", "Admin") if f">{label}</a>" in nav}


# --------------------------------------------------------------------------- security headers


def test_every_page_carries_a_strict_csp(people: dict[str, Any]) -> None:
    anonymous, alice = Client(), as_user(people["alice"])
    responses = [
        anonymous.get("/accounts/login/"),
        anonymous.get("/admin/login/"),
        anonymous.get("/no-such-page/"),
        alice.get("/"),
        alice.get("/library/"),
        alice.get("/review/"),  # a 404 for alice
        alice.get("/api/me"),
    ]
    for response in responses:
        policy = response["Content-Security-Policy"]
        directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))
        assert directives["default-src"] == "'self'"
        assert directives["script-src"] == "'self'"
        assert directives["img-src"] == "'self' data:"  # remote images only in the viewer
        assert directives["frame-ancestors"] == "'none'"
        assert "unsafe" not in policy


def test_the_login_form_labels_every_field() -> None:
    html = Client().get("/accounts/login/").content.decode()
    assert '<label for="id_username">' in html and 'id="id_username"' in html
    assert '<label for="id_password">' in html and 'id="id_password"' in html


# --------------------------------------------------------------------------- roles


def test_navigation_shows_what_each_role_may_use(people: dict[str, Any]) -> None:
    assert nav_links(as_user(people["carol"]).get("/").content.decode()) == {"Ask", "Library"}
    assert nav_links(as_user(people["sam"]).get("/").content.decode()) == {"Ask", "Library", "Review"}
    assert nav_links(as_user(people["admin"]).get("/").content.decode()) == {"Ask", "Library", "Review", "Gaps", "Admin"}
    assert nav_links(Client().get("/accounts/login/").content.decode()) == set()


def test_review_is_for_support_only(people: dict[str, Any]) -> None:
    assert as_user(people["sam"]).get("/review/").status_code == 200
    assert as_user(people["sam"]).get("/review/?filter=flagged").status_code == 200
    assert as_user(people["alice"]).get("/review/").status_code == 404
    assert Client().get("/review/").status_code == 302  # to the login page


def test_pages_need_a_login(people: dict[str, Any]) -> None:
    for url in ("/", "/library/", "/documents/1/", "/documents/1/download"):
        response = Client().get(url)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


# --------------------------------------------------------------------------- who sees what


def test_carol_cannot_see_a_restricted_document(people: dict[str, Any], library_docs: dict[str, Any]) -> None:
    carol, bob = as_user(people["carol"]), as_user(people["bob"])
    secret, public = library_docs["secret"], library_docs["public"]

    listing = carol.get("/library/").content.decode()
    assert public.title in listing and secret.title not in listing
    assert "finance" not in listing  # not even the folder's name
    assert secret.title not in carol.get("/library/?q=payroll").content.decode()
    assert carol.get(f"/documents/{secret.pk}/").status_code == 404
    assert carol.get(f"/documents/{secret.pk}/download").status_code == 404
    assert carol.get(f"/documents/{secret.pk + 1000}/").status_code == 404  # the same answer as a missing one

    assert secret.title in bob.get("/library/").content.decode()
    assert bob.get(f"/documents/{secret.pk}/").status_code == 200


def test_a_download_is_an_attachment_that_cannot_run(people: dict[str, Any], library_docs: dict[str, Any]) -> None:
    response = as_user(people["bob"]).get(f"/documents/{library_docs['secret'].pk}/download")
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith('attachment; filename="payroll-secrets.md"')
    assert response["Content-Type"] == "application/octet-stream"
    assert response["Content-Security-Policy"].startswith("sandbox")
    assert b"".join(cast(StreamingHttpResponse, response).streaming_content).startswith(b"# Payroll secrets")


def test_the_viewer_marks_the_requested_range(people: dict[str, Any], library_docs: dict[str, Any]) -> None:
    secret = library_docs["secret"]
    chunk = secret.chunks.order_by("-end").first()
    html = as_user(people["bob"]).get(f"/documents/{secret.pk}/?hl={chunk.start},{chunk.end}").content.decode()
    assert '<mark class="hl">' in html
    response = as_user(people["bob"]).get(f"/documents/{secret.pk}/")
    assert "https:" in response["Content-Security-Policy"].split("img-src", 1)[1].split(";")[0]


def test_the_library_costs_the_same_queries_for_more_documents(people: dict[str, Any], library_docs: dict[str, Any]) -> None:
    client = as_user(people["admin"])

    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert client.get("/library/").status_code == 200
        return len(queries)

    before = count()
    for n in range(5):
        Document.objects.create(title=f"extra {n}", filename=f"extra-{n}.md", mime_type="text/markdown",
                                acl=["everyone"], status=Document.Status.FAILED, failure_reason="x")
    assert count() == before


# --------------------------------------------------------------------------- upload and retry


def upload(client: Client, name: str, data: bytes, **fields: Any) -> Any:
    stream = io.BytesIO(data)
    stream.name = name
    return client.post("/library/upload", {"file": stream, **fields})


def test_only_admins_may_upload_or_retry(people: dict[str, Any]) -> None:
    alice = as_user(people["alice"])
    assert upload(alice, "a.md", b"# A\n\ntext\n", access="everyone").status_code == 404
    assert alice.post("/library/documents/1/retry").status_code == 404
    assert 'id="upload"' not in alice.get("/library/").content.decode()
    assert 'id="upload"' in as_user(people["admin"]).get("/library/").content.decode()


def test_an_admin_upload_is_queued_with_its_access(people: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:
    admin = as_user(people["admin"])
    finance = people["groups"]["finance"]
    with django_capture_on_commit_callbacks() as callbacks:
        response = upload(admin, "ledger.md", b"# Ledger\n\nNumbers.\n", access="restricted", groups=[finance.pk])
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["document"]["status"] == "queued" and body["queued"] is True
    document = Document.objects.get(pk=body["document"]["id"])
    assert document.acl == [f"g:{finance.pk}"] and document.uploaded_by == people["admin"]
    assert len(callbacks) == 1  # the ingestion task, sent after commit


def test_upload_problems_are_reported_per_file(people: dict[str, Any]) -> None:
    admin = as_user(people["admin"])
    rejected = upload(admin, "tool.exe", b"MZ\x90\x00binary", access="everyone")
    assert rejected.status_code == 400 and "tool.exe" in rejected.json()["error"]
    nobody = upload(admin, "x.md", b"# X\n", access="restricted")
    assert nobody.status_code == 400 and "at least one group" in nobody.json()["error"]
    no_folder = upload(admin, "x.md", b"# X\n", access="folder")
    assert no_folder.status_code == 400 and "folder" in no_folder.json()["error"]
    assert not Document.objects.exists()


def test_retry_requeues_a_failed_document_only(people: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:
    admin = as_user(people["admin"])
    failed = Document.objects.create(title="bad", filename="bad.pdf", acl=["everyone"], status="failed",
                                     failed_stage="extracting", failure_reason="bad.pdf: cannot read PDF")
    ready = Document.objects.create(title="good", filename="good.md", acl=["everyone"], status="ready")
    with django_capture_on_commit_callbacks() as callbacks:
        response = admin.post(f"/library/documents/{failed.pk}/retry")
    assert response.status_code == 200 and response.json()["document"]["status"] == "queued"
    assert len(callbacks) == 1
    assert admin.post(f"/library/documents/{ready.pk}/retry").status_code == 409
    hidden = Document.objects.create(title="hidden", filename="h.md", acl=["g:999"], status="failed")
    assert admin.post(f"/library/documents/{hidden.pk}/retry").status_code == 404


def test_status_rows_follow_the_acl(people: dict[str, Any], library_docs: dict[str, Any]) -> None:
    from kb.library.selectors import document_status_rows

    ids = [library_docs["public"].pk, library_docs["secret"].pk]
    assert [r["id"] for r in document_status_rows(user=people["carol"], ids=ids)] == [library_docs["public"].pk]
    assert sorted(r["id"] for r in document_status_rows(user=people["bob"], ids=ids)) == sorted(ids)
    json.dumps(document_status_rows(user=people["bob"], ids=ids))  # what the websocket sends


def test_the_library_comes_a_page_at_a_time(
    people: dict[str, Any], library_docs: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from kb.library import views

    monkeypatch.setattr(views, "LIBRARY_PAGE", 1)
    bob = as_user(people["bob"])  # reads both documents: "Office guide", "Payroll secrets"
    first, second = bob.get("/library/").content.decode(), bob.get("/library/?page=2").content.decode()
    assert "Office guide" in first and "Payroll secrets" not in first and "Page 1 of 2" in first
    assert "Payroll secrets" in second and "Office guide" not in second and 'rel="prev"' in second
    carol = as_user(people["carol"]).get("/library/").content.decode()  # reads one: no pager
    assert "Office guide" in carol and "Page 1 of" not in carol
