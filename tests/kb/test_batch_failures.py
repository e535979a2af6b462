"""One batch, every kind of bad file: each fails alone with its own reason, the rest is indexed."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pypdf
import pytest

from kb.ingest.batch import ingest_paths
from kb.models import Document

GOOD_MD = "# Returns\n\n## Window\n\nCustomers may return a parcel within thirty days of delivery, unopened.\n"
GOOD_HTML = "<html><head><title>Holidays</title></head><body><h1>Holidays</h1><p>The office closes on 24 December.</p></body></html>"


def _pdf(writer: pypdf.PdfWriter) -> bytes:
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


@pytest.fixture
def batch(tmp_path: Path, settings: Any) -> Path:
    settings.KB_MAX_UPLOAD_MB = 1
    (tmp_path / "returns.md").write_text(GOOD_MD)
    (tmp_path / "holidays.html").write_text(GOOD_HTML)
    (tmp_path / "corrupt.pdf").write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog >> garbage")
    (tmp_path / "empty.md").write_bytes(b"")
    (tmp_path / "binary.md").write_bytes(b"\x00\x01\x02ELF\x00binary" * 20)
    locked = pypdf.PdfWriter()
    locked.add_blank_page(width=200, height=200)
    locked.encrypt(user_password="secret", algorithm="AES-128")
    (tmp_path / "locked.pdf").write_bytes(_pdf(locked))
    scanned = pypdf.PdfWriter()
    scanned.add_blank_page(width=200, height=200)  # a page with no text layer, like a scan
    (tmp_path / "scan.pdf").write_bytes(_pdf(scanned))
    (tmp_path / "huge.md").write_text("# Huge\n\n" + "word " * 300_000)  # 1.5 MB, over the 1 MB limit
    return tmp_path


def test_bad_files_fail_alone_with_specific_reasons(db: None, batch: Path) -> None:
    summary = ingest_paths([batch], sync=True)
    assert sorted(Path(n).name for n in summary.ready) == ["holidays.html", "returns.md"]
    reasons = {Path(line.split(": ", 1)[0]).name: line.split(": ", 1)[1] for line in summary.failed}
    assert set(reasons) == {"corrupt.pdf", "empty.md", "binary.md", "locked.pdf", "scan.pdf", "huge.md"}
    assert "cannot read PDF" in reasons["corrupt.pdf"]
    assert "empty" in reasons["empty.md"]
    assert "binary.md" in reasons["binary.md"] and "not" in reasons["binary.md"]
    assert "password-protected" in reasons["locked.pdf"]
    assert "no text layer" in reasons["scan.pdf"]
    assert "limit is 1 MB" in reasons["huge.md"]
    # Rejected at upload: never stored. Failed in the pipeline: stored, with stage and reason.
    assert not Document.objects.filter(filename__in=["empty.md", "binary.md", "huge.md"]).exists()
    for name in ("corrupt.pdf", "locked.pdf", "scan.pdf"):
        document = Document.objects.get(filename=name)
        assert document.status == Document.Status.FAILED
        assert document.failed_stage == Document.Status.EXTRACTING
        assert document.failure_reason and not document.chunks.exists()
    for name in ("returns.md", "holidays.html"):
        document = Document.objects.get(filename=name)
        assert document.status == Document.Status.READY and document.chunks.exists()
