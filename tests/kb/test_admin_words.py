"""The admin in the users' words (issue 49, item 6): Replace file for a failed document (its folder and readers
kept, only for those who may change documents), badges and schedules in words, a folder source's directory
checked before the source is saved, and a source's failed files on the list."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from kb.library.ingest.pipeline import ingest
from kb.library.models import Document, Folder, Source, SourceChange
from kb.library.services import (
    DocumentStateConflict,
    UploadRejected,
    document_replace_file,
    folder_set_access,
)
from kb.library.sources.services import SourceRejected, every_text, location_reachable_check, parse_every
from tests.factories import ingested_document, uploaded_document
from tests.kb.test_source_site import site  # noqa: F401  # a local site the policy allows

pytestmark = pytest.mark.django_db

CORRUPT_PDF = b"%PDF-1.7\n" + b"\x00garbage" * 2_000
GOOD = b"# Expenses policy\n\n## Receipts\n\nKeep every receipt over 25 euros and attach it to the claim within a month.\n"


@pytest.fixture
def finance(people: dict[str, Any]) -> Folder:
    folder = Folder.objects.create(name="Finance")
    folder_set_access(folder=folder, public=False, groups=[people["groups"]["finance"]])
    return folder


@pytest.fixture
def broken(finance: Folder) -> Document:
    """A corrupt PDF in the finance folder, failed at extraction (a retry fails again)."""
    document = uploaded_document(CORRUPT_PDF, "expenses.pdf", folder=finance)
    assert ingest(document.pk) == Document.Status.FAILED
    document.refresh_from_db()
    return document


def staff(user: Any, *codenames: str) -> Client:
    user.is_staff = True
    user.save()
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="kb", codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def test_replace_file_keeps_the_documents_folder_and_readers_and_indexes_the_new_file(
    people: dict[str, Any], finance: Folder, broken: Document
) -> None:
    acl, old_file = list(broken.acl), broken.file.name
    assert broken.title == "" and str(broken) == "expenses"  # no title of its own: its file's name stands in

    replaced = document_replace_file(document=broken, name="expenses.md", stream=io.BytesIO(GOOD), size=len(GOOD),
                                     by=people["admin"])
    assert (replaced.pk, replaced.folder, replaced.inherit_access, replaced.acl) == (broken.pk, finance, True, acl)
    assert (replaced.status, replaced.filename, replaced.mime_type, replaced.attempts) == ("queued", "expenses.md",
                                                                                           "text/markdown", 0)
    assert replaced.file.name != old_file and replaced.version == broken.version + 1
    assert ingest(replaced.pk) == Document.Status.READY
    replaced.refresh_from_db()
    assert (replaced.title, replaced.acl, replaced.chunk_count > 0) == ("Expenses policy", acl, True)


def test_replace_file_refuses_what_an_upload_refuses_and_a_document_being_indexed(
    people: dict[str, Any], broken: Document
) -> None:
    with pytest.raises(UploadRejected, match=r"\.exe files are not supported"):
        document_replace_file(document=broken, name="tool.exe", stream=io.BytesIO(b"MZ\x90"), size=3, by=people["admin"])
    Document.objects.filter(pk=broken.pk).update(status=Document.Status.EXTRACTING)
    with pytest.raises(DocumentStateConflict, match="being indexed"):
        document_replace_file(document=broken, name="x.md", stream=io.BytesIO(GOOD), size=len(GOOD), by=people["admin"])
    broken.refresh_from_db()
    assert broken.filename == "expenses.pdf"


def test_staff_without_the_change_permission_cannot_replace_a_file(people: dict[str, Any], broken: Document) -> None:
    bob = people["bob"]  # reads the finance folder; may view and add documents, not change them
    client = staff(bob, "view_document", "add_document")
    with pytest.raises(UploadRejected, match="permission to change documents"):
        document_replace_file(document=broken, name="expenses.md", stream=io.BytesIO(GOOD), size=len(GOOD), by=bob)
    url = f"/admin/kb/document/{broken.pk}/replace/"
    assert client.get(url).status_code == 403
    assert client.post(url, {"file": SimpleUploadedFile("expenses.md", GOOD)}).status_code == 403
    assert client.post(f"/admin/kb/document/{broken.pk}/retry/").status_code == 403
    listing = client.get("/admin/kb/document/").content.decode()
    assert "expenses.pdf" in listing and "Replace file" not in listing  # no action offered that would be refused
    broken.refresh_from_db()
    assert (broken.filename, broken.status) == ("expenses.pdf", "failed")

    alice = people["alice"]  # may change documents, but cannot read the finance folder: the document does not exist
    other = staff(alice, "view_document", "change_document")
    assert other.get(url).status_code == 404
    with pytest.raises(UploadRejected):
        document_replace_file(document=broken, name="expenses.md", stream=io.BytesIO(GOOD), size=len(GOOD), by=alice)


def test_an_admin_replaces_a_failed_file_through_the_admin(people: dict[str, Any], finance: Folder,
                                                           broken: Document) -> None:
    client = staff(people["admin"])
    listing = client.get("/admin/kb/document/").content.decode()
    assert "Replace file" in listing and f"/admin/kb/document/{broken.pk}/replace/" in listing
    assert 'title="expenses">expenses</a>' in listing and ">Finance · expenses.pdf</small>" in listing  # by its file
    form = client.get(f"/admin/kb/document/{broken.pk}/replace/").content.decode()
    assert "Finance" in form and "group finance" in form and "cannot read PDF" in form
    refused = client.post(f"/admin/kb/document/{broken.pk}/replace/", {"file": SimpleUploadedFile("tool.exe", b"MZ")})
    assert refused.status_code == 400 and ".exe files are not supported" in refused.content.decode()
    done = client.post(f"/admin/kb/document/{broken.pk}/replace/", {"file": SimpleUploadedFile("expenses.md", GOOD)})
    assert done.status_code == 302
    broken.refresh_from_db()
    assert (broken.filename, broken.status, broken.folder) == ("expenses.md", "queued", finance)


def test_the_document_list_speaks_in_words_with_the_figures_on_hover(people: dict[str, Any]) -> None:
    ingested_document("# VPN setup for contractors\n\nInstall the client and sign in.\n", "vpn-contractors.md")
    ingested_document("# VPN setup for contractors\n\nAsk IT for a token first.\n", "vpn-contractors-2023.md")
    page = staff(people["admin"]).get("/admin/kb/document/").content.decode()
    assert ">Up to date</span>" in page and "current ·" not in page
    assert "pipeline v" in page and "embedding model" in page  # the versions, on hover
    assert "vpn-contractors.md" in page and "vpn-contractors-2023.md" in page  # the same title, told apart
    for code_words in ("Chunk count", "Stage timings", "Re-index stale", "late interaction"):
        assert code_words not in page
    document = Document.objects.get(filename="vpn-contractors.md")
    change = staff(people["admin"]).get(f"/admin/kb/document/{document.pk}/change/").content.decode()
    for code_words in ("Acl", "Pending acl", "LATE_VERSION", "Late version", "Sha256"):
        assert code_words not in change
    assert "Who may read it now" in change and "Everyone" in change


def test_a_schedule_reads_as_it_was_written() -> None:
    for written in ("90s", "15m", "2h", "1d", "120m"):
        assert parse_every(every_text(parse_every(written))) == parse_every(written)
    assert (every_text(900), every_text(7200), every_text(90), every_text(None)) == ("15m", "2h", "90s", "")


def test_a_folder_sources_directory_must_exist_within_the_allowed_roots(tmp_path: Path, settings: Any) -> None:
    settings.KB_SOURCE_FOLDER_ROOTS = [str(tmp_path)]
    (tmp_path / "handbook").mkdir()
    location_reachable_check(kind="folder", location=str(tmp_path / "handbook"))
    with pytest.raises(SourceRejected, match="no such directory on the server"):
        location_reachable_check(kind="folder", location=str(tmp_path / "handbok"))
    with pytest.raises(SourceRejected, match="KB_SOURCE_FOLDER_ROOTS"):
        location_reachable_check(kind="folder", location="/opt")
    with pytest.raises(SourceRejected, match="no such directory"):
        location_reachable_check(kind="git", location=f"file://{tmp_path}/missing.git")
    location_reachable_check(kind="git", location="https://git.example.com/handbook.git")  # not fetched here


def test_the_source_form_refuses_a_missing_directory_and_the_list_shows_schedule_and_failures(
    people: dict[str, Any], tmp_path: Path, settings: Any
) -> None:
    settings.KB_SOURCE_FOLDER_ROOTS = [str(tmp_path)]
    folder = Folder.objects.create(name="Handbook")
    client = staff(people["admin"])
    form = client.get("/admin/kb/source/add/").content.decode()
    assert "KB_SOURCE_{NAME}_TOKEN_FILE" in form
    post = {"name": "handbook", "kind": "folder", "location": str(tmp_path / "nowhere"), "folder": folder.pk,
            "shrink_guard": "0.5", "every_text": "15m"}
    refused = client.post("/admin/kb/source/add/", post)
    page = refused.content.decode()
    assert refused.status_code == 200 and "no such directory on the server" in page
    assert 'value="15m"' in page  # the schedule as typed
    assert not Source.objects.exists()

    (tmp_path / "nowhere").mkdir()
    assert client.post("/admin/kb/source/add/", post).status_code == 302
    source = Source.objects.get(name="handbook")
    assert source.every == 900
    Source.objects.filter(pk=source.pk).update(last_status="ok", last_listed=5, last_failed=1)
    SourceChange.objects.create(source=source, path="scans/contract.pdf", action="new", since=source.created_at,
                                first_seen_at=source.created_at, failure_reason="cannot read PDF: broken xref")
    listing = client.get("/admin/kb/source/").content.decode()
    assert ">15m<" in listing and ">900<" not in listing
    assert "5 files · 1 failed" in listing and "1 failed</summary>" in listing
    assert "scans/contract.pdf" in listing and "cannot read PDF: broken xref" in listing


def test_a_site_sources_start_url_must_answer_and_stay_within_the_policy(site: Any, settings: Any) -> None:  # noqa: F811
    site.write("docs/welcome.html", "<html><head><title>Welcome</title></head><body><p>Hello.</p></body></html>")
    location_reachable_check(kind="site", location=f"{site.url}/docs/welcome.html")
    with pytest.raises(SourceRejected, match="the site answers 404 Not Found"):
        location_reachable_check(kind="site", location=f"{site.url}/docs/welcom.html")
    requests = site.requests()
    assert [r["path"] for r in requests] == ["/docs/welcome.html", "/docs/welcom.html"]
    settings.KB_SOURCE_SITE_HOSTS = []  # the operator's policy: the request is never sent
    with pytest.raises(SourceRejected, match="KB_SOURCE_SITE_HOSTS"):
        location_reachable_check(kind="site", location=f"{site.url}/docs/welcome.html")
    assert site.requests() == []
