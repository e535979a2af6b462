"""An admin drops three files on the library (one corrupt): per-file progress bars, live
pipeline status from a real Celery worker, the failure's reason, and Retry."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.web.conftest import assert_labelled, screenshot

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ONBOARDING = """# Onboarding checklist

## Before the first day

Your manager orders a laptop and a badge two weeks before you start, and sends the
welcome pack with the address of your office and the name of your buddy.

## First week

Meet your buddy on the first morning. Book the security training in the learning
portal before Friday; it takes about an hour and is required before you get production access.
"""

PARKING = """Parking at the Leeds office

Staff parking is on level -1. Register your number plate at reception on your first day;
visitors park on level 0 and sign in at the front desk. Charging points are first come, first served.
"""

# A PDF header (so the upload is accepted as a PDF) followed by garbage: extraction fails.
CORRUPT_PDF = b"%PDF-1.7\n" + b"\x00garbage" * 60_000  # ~540 KB, so the throttled upload takes a while

# Records every value each progress bar and every status each upload row goes through.
RECORDER = """
window.__progress = {}; window.__statuses = {};
new MutationObserver(function (mutations) {
  for (const m of mutations) {
    const el = m.target;
    if (el.tagName === "PROGRESS") (window.__progress[el.getAttribute("aria-label")] ||= []).push(Number(el.value));
    if (m.attributeName === "data-status" && el.classList.contains("upload-item"))
      (window.__statuses[el.querySelector(".upload-name").firstChild.data] ||= []).push(el.getAttribute("data-status"));
  }
}).observe(document, { subtree: true, attributes: true, attributeFilter: ["value", "data-status"] });
"""

DROP = """
(files) => {
  const transfer = new DataTransfer();
  for (const f of files) {
    const bytes = Uint8Array.from(atob(f.data), c => c.charCodeAt(0));
    transfer.items.add(new File([bytes], f.name, { type: f.type }));
  }
  const zone = document.getElementById("dropzone");
  for (const type of ["dragenter", "dragover", "drop"]) {
    zone.dispatchEvent(new DragEvent(type, { bubbles: true, cancelable: true, dataTransfer: transfer }));
  }
}
"""


def _file(name: str, data: bytes, mime: str) -> dict[str, str]:
    return {"name": name, "type": mime, "data": base64.b64encode(data).decode()}


def test_an_admin_uploads_three_files_and_retries_the_broken_one(
    open_page: Any, people: dict[str, Any], celery_worker: Any
) -> None:
    from kb.library.models import Document, Folder
    from kb.library.services import folder_set_access

    handbook = Folder.objects.create(name="handbook")
    folder_set_access(folder=handbook, public=True)

    page = open_page(people["admin"])
    page.add_init_script(RECORDER)
    page.goto("/library/")
    page.select_option("#upload-folder", str(handbook.pk))
    assert page.is_checked("#access-folder")  # the folder's readers, unless the admin chooses otherwise
    assert "(everyone)" in page.locator("#folder-audience").inner_text()

    # A slow uplink, so that each progress bar visibly moves.
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send("Network.emulateNetworkConditions",
             {"offline": False, "latency": 20, "downloadThroughput": -1, "uploadThroughput": 200 * 1024})

    page.evaluate(DROP, [
        _file("onboarding-checklist.md", ONBOARDING.encode(), "text/markdown"),
        _file("leeds-parking.txt", PARKING.encode(), "text/plain"),
        _file("scanned-contract.pdf", CORRUPT_PDF, "application/pdf"),
    ])
    assert page.locator(".upload-item[data-state=staged]").count() == 3
    assert page.locator("#upload-start").inner_text() == "Upload 3 files"
    assert_labelled(page)
    page.click("#upload-start")

    page.wait_for_function("() => (window.__progress['Upload of scanned-contract.pdf'] || []).some(v => v > 0 && v < 100)")
    screenshot(page, "upload-progress")
    page.wait_for_function(
        "() => document.querySelectorAll('.upload-item[data-status=ready]').length === 2"
        " && document.querySelectorAll('.upload-item[data-status=failed]').length === 1",
        timeout=150_000,
    )
    cdp.send("Network.emulateNetworkConditions",
             {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})

    progress = page.evaluate("window.__progress")
    for name in ("onboarding-checklist.md", "leeds-parking.txt", "scanned-contract.pdf"):
        assert progress[f"Upload of {name}"][-1] == 100, progress
    assert any(0 < v < 100 for v in progress["Upload of scanned-contract.pdf"]), progress

    failed = page.locator(".upload-item[data-status=failed]")
    assert "scanned-contract.pdf" in failed.locator(".upload-name").inner_text()
    reason = failed.locator("[data-role=reason]").inner_text()
    document = Document.objects.get(filename="scanned-contract.pdf")
    assert document.status == "failed" and document.failure_reason
    assert reason == f"Failed while {document.failed_stage}: {document.failure_reason}"
    assert "cannot read PDF" in reason
    ready = Document.objects.filter(status="ready", folder=handbook)
    assert sorted(ready.values_list("filename", flat=True)) == ["leeds-parking.txt", "onboarding-checklist.md"]
    assert all(d.acl == ["everyone"] and d.chunk_count > 0 for d in ready)
    statuses = page.evaluate("window.__statuses")
    order = ["queued", "extracting", "chunking", "embedding", "ready"]
    # Live, in pipeline order, ending ready. Stages may be too quick to see: a fast worker can
    # claim a document before the page first hears of it, so even "queued" may be skipped.
    for name in ("onboarding-checklist.md", "leeds-parking.txt"):
        seen = [order.index(status) for status in statuses[name]]
        assert seen == sorted(seen) and seen[-1] == 4 and len(set(seen)) >= 2, statuses
    screenshot(page, "upload-done")

    # Retry: re-queued, fails again for the same reason. The page shows the worker's live statuses; when
    # the worker claims (or fails) the document before the retry's reply arrives, the reply's "queued" is
    # rightly not shown over them (library.js), so the retry is seen as any other status, then "failed".
    before = page.evaluate("(window.__statuses['scanned-contract.pdf'] || []).length")
    failed.locator("[data-action=retry]").click()
    page.wait_for_function(
        """(before) => {
          const s = (window.__statuses['scanned-contract.pdf'] || []).slice(before);
          const i = s.findIndex(status => status !== 'failed');
          return i >= 0 && s.slice(i).includes('failed');
        }""",
        arg=before,
        timeout=60_000,
    )
    page.wait_for_selector(".upload-item[data-status=failed] [data-role=reason]:not([hidden])")
    assert page.locator(".upload-item[data-status=failed] [data-role=reason]").inner_text() == reason
    document.refresh_from_db()
    assert (document.status, document.attempts) == ("failed", 2)

    # The library itself lists all three, the failed one with its reason and a Retry button.
    page.reload()
    rows = page.locator(".doc-row")
    assert rows.count() == 3
    broken = page.locator(f".doc-row[data-doc-id='{document.pk}']")
    assert broken.locator("[data-role=status]").inner_text() == "Failed"
    assert "cannot read PDF" in broken.locator("[data-role=reason]").inner_text()
    assert broken.locator("[data-action=retry]").is_visible()
    screenshot(page, "library-after-upload", full_page=True)
