"""The admin in the users' words (issue 49, item 6), in Chromium against the session's Daphne: an admin replaces a
failed (corrupt) PDF with a good one and sees it become ready; a folder source at a missing path is refused before
anything is saved; an .exe chosen on the library page is marked refused before Upload; the documents list fits
1,280 px."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.factories import ingested_document, uploaded_document
from tests.kb.test_pdf_pages import build_pdf
from tests.web.conftest import assert_clean, screenshot

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CORRUPT_PDF = b"%PDF-1.7\n" + b"\x00garbage" * 2_000


@pytest.fixture
def handbook(people: dict[str, Any]) -> Any:
    from kb.library.models import Folder
    from kb.library.services import folder_set_access

    folder = Folder.objects.create(name="Handbook")
    folder_set_access(folder=folder, public=False, groups=[people["groups"]["engineering"]])
    return folder


def test_an_admin_replaces_a_failed_pdf_and_sees_it_become_ready(
    open_page: Any, people: dict[str, Any], handbook: Any, celery_worker: Any, tmp_path: Path
) -> None:
    from kb.library.ingest.pipeline import ingest
    from kb.library.models import Document

    broken = uploaded_document(CORRUPT_PDF, "travel-policy.pdf", folder=handbook)
    assert ingest(broken.pk) == Document.Status.FAILED
    acl = Document.objects.get(pk=broken.pk).acl

    page = open_page(people["admin"])
    page.goto("/admin/kb/document/")
    row = page.locator("#result_list tbody tr", has_text="travel-policy.pdf")
    assert "travel policy" in row.locator(".kb-title").inner_text()  # titled by its file, not "-"
    assert "While extracting: " in row.inner_text() and "cannot read PDF" in row.inner_text()
    assert row.get_by_role("button", name="Retry").is_visible()
    row.get_by_role("link", name="Replace file").click()

    assert "cannot read PDF" in page.locator(".kb-reason").inner_text()
    good = tmp_path / "travel-policy.pdf"
    good.write_bytes(build_pdf([["Travel policy", "Book trains for journeys under four hours; flights need approval."]]))
    page.get_by_label("New file").set_input_files(str(good))
    page.get_by_role("button", name="Replace file").click()
    page.wait_for_selector(".messagelist .success")
    assert "keeps the document's folder and readers" in page.locator(".messagelist").inner_text()

    deadline = time.monotonic() + 120
    while "Up to date" not in (text := page.locator("#result_list tbody tr", has_text="travel-policy.pdf").inner_text()):
        assert time.monotonic() < deadline, f"never became ready; the row shows {text!r}"
        time.sleep(1)
        page.reload()
    document = Document.objects.get(pk=broken.pk)
    assert (document.status, document.folder, document.acl, document.chunk_count > 0) == ("ready", handbook, acl, True)
    assert "Book trains for journeys under four hours" in document.canonical_text  # the new file's text
    screenshot(page, "admin-replaced-file")
    assert_clean(page)


def test_a_folder_source_at_a_missing_path_is_refused_before_saving(
    open_page: Any, people: dict[str, Any], handbook: Any, tmp_path: Path
) -> None:
    from kb.library.models import Source

    page = open_page(people["admin"])
    page.goto("/admin/kb/source/add/")
    assert "KB_SOURCE_{NAME}_TOKEN_FILE" in page.locator("#id_credential_helptext").inner_text()
    page.get_by_label("Name").fill("shared-drive")
    page.get_by_label("Kind").select_option("folder")
    page.get_by_label("Location").fill(str(tmp_path / "handbok"))  # a typo: the directory is "handbook"
    page.get_by_label("Folder").select_option(label="Handbook")
    page.get_by_label("Every").fill("15m")
    page.get_by_role("button", name="Save", exact=True).click()

    error = page.locator(".field-location .errorlist")
    assert "no such directory on the server" in error.inner_text()
    assert page.get_by_label("Every").input_value() == "15m"  # as typed
    assert not Source.objects.exists()
    screenshot(page, "admin-source-missing-path")

    (tmp_path / "handbook").mkdir()
    page.get_by_label("Location").fill(str(tmp_path / "handbook"))
    page.get_by_role("button", name="Save", exact=True).click()
    page.wait_for_selector(".messagelist .success")
    source = Source.objects.get(name="shared-drive")
    assert source.every == 900
    row = page.locator("#result_list tbody tr", has_text="shared-drive")
    assert "15m" in row.inner_text() and "900" not in row.inner_text()

    # After a run with a failed file: "ok", "5 files · 1 failed", and the file with its reason one click away.
    from kb.library.models import SourceChange

    Source.objects.filter(pk=source.pk).update(last_status="ok", last_listed=5, last_new=5, last_failed=1)
    SourceChange.objects.create(source=source, path="scans/contract.pdf", action="new", since=source.created_at,
                                first_seen_at=source.created_at, failure_reason="cannot read PDF: broken xref table")
    page.reload()
    row = page.locator("#result_list tbody tr", has_text="shared-drive")
    assert "5 files · 1 failed" in row.inner_text()
    assert not row.get_by_text("broken xref table").is_visible()
    row.get_by_text("1 failed", exact=True).click()
    assert row.get_by_text("cannot read PDF: broken xref table").is_visible()
    assert "scans/contract.pdf" in row.locator(".kb-failures").inner_text()
    screenshot(page, "admin-sources-failed-files")
    sizes = page.evaluate(OVERFLOW)
    assert sizes["scroll"] <= sizes["client"], f"the sources table is {sizes['scroll']} px in {sizes['client']} px"
    assert_clean(page)


def test_an_exe_chosen_on_the_library_page_is_refused_before_upload(open_page: Any, people: dict[str, Any]) -> None:
    page = open_page(people["admin"])
    page.goto("/library/")
    page.set_input_files("#upload-files", [
        {"name": "setup.exe", "mimeType": "application/octet-stream", "buffer": b"MZ\x90\x00binary"},
        {"name": "notes.md", "mimeType": "text/markdown", "buffer": b"# Notes\n\nThe kitchen closes at five.\n"},
    ])
    refused = page.locator(".upload-item[data-state=rejected]")
    assert refused.count() == 1
    assert "setup.exe" in refused.locator(".upload-name").inner_text()
    assert refused.locator("[data-role=status]").inner_text() == "Not uploaded"
    reason = refused.locator("[data-role=reason]").inner_text()
    assert ".exe files are not supported" in reason and ".pdf" in reason
    assert page.locator(".upload-item[data-state=staged]").count() == 1
    assert page.locator("#upload-start").inner_text() == "Upload"  # only the Markdown file is left to send
    screenshot(page, "library-exe-refused")
    assert_clean(page)


OVERFLOW = """() => {
  const box = document.querySelector("#changelist .results");
  return {scroll: box.scrollWidth, client: box.clientWidth, page: document.documentElement.scrollWidth};
}"""


def test_the_documents_list_fits_1280_pixels(open_page: Any, people: dict[str, Any], handbook: Any) -> None:
    from kb.library.ingest.pipeline import ingest

    long = "Procedure for requesting, approving and reconciling travel and subsistence expenses for contractors"
    for n in range(3):
        ingested_document(f"# {long} {n}\n\n## Receipts\n\nKeep every receipt for the claim.\n",
                          f"travel-and-subsistence-expenses-for-contractors-{n}.md", folder=handbook)
    broken = uploaded_document(CORRUPT_PDF, "a-scanned-contract-with-a-rather-long-file-name.pdf", folder=handbook)
    ingest(broken.pk)

    page = open_page(people["admin"], width=1280, height=900)
    page.goto("/admin/kb/document/")
    sizes = page.evaluate(OVERFLOW)
    screenshot(page, "admin-documents-1280", full_page=True)
    assert sizes["scroll"] <= sizes["client"], f"the documents table is {sizes['scroll']} px in {sizes['client']} px"
    assert sizes["page"] <= 1280, sizes
    title = page.locator(".kb-title").first
    assert title.get_attribute("title", timeout=1000) and title.evaluate("e => e.getClientRects().length") == 1
    heights = page.evaluate("() => [...document.querySelectorAll('.kb-title')].map(e => e.getBoundingClientRect().height)")
    assert max(heights) < 30, heights  # one line each, the whole on hover
    assert_clean(page)
