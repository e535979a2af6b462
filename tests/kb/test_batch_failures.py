"""One batch, every kind of bad file: each fails alone with its own reason, the rest is indexed."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pypdf
import pytest

from kb.library.ingest.batch import ingest_paths
from kb.library.models import Document

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


@pytest.mark.slow
def test_real_files_of_every_new_format_are_indexed_and_broken_ones_fail_alone(db: None, tmp_path: Path) -> None:
    import shutil

    from tests.kb.test_formats import FIXTURES, MEMO_RTF, epub_book, truncated

    # The real EPUB (a whole book: 293k characters, ~45 s of embedding) is read in test_formats; here the
    # EPUB reader goes through the pipeline with a small book of our own (manual.epub).
    left_out = {"docutils-utf-16.csv", "epubcheck-childrens-literature.epub"}
    good = sorted(p.name for p in FIXTURES.iterdir() if p.suffix != ".md" and p.name not in left_out)
    for name in good:
        shutil.copy(FIXTURES / name, tmp_path / name)
    (tmp_path / "manual.epub").write_bytes(epub_book())
    (tmp_path / "memo.rtf").write_bytes(MEMO_RTF)
    broken = {
        "half.pptx": (truncated("python-pptx-test-slides.pptx"), "cannot read PowerPoint presentation"),
        "half.xlsx": (truncated("tablib-founders.xlsx"), "cannot read Excel workbook"),
        "half.odt": (truncated("docutils-odt-tables.odt"), "cannot read OpenDocument text"),
        "half.epub": (epub_book()[:2000], "cannot read EPUB"),
        "half.rtf": (MEMO_RTF[:90], "truncated or damaged"),
        "words.eml": (b"no headers here\n", "no From, To, Subject or Date header"),
        "wide.csv": ((FIXTURES / "docutils-utf-16.csv").read_bytes(), "UTF-16 text; save it as UTF-8"),
    }
    for name, (data, _) in broken.items():
        (tmp_path / name).write_bytes(data)
    summary = ingest_paths([tmp_path], sync=True)
    assert sorted(Path(n).name for n in summary.ready) == sorted([*good, "manual.epub", "memo.rtf"])
    reasons = {Path(line.split(": ", 1)[0]).name: line.split(": ", 1)[1] for line in summary.failed}
    assert set(reasons) == set(broken)
    for name, (_, reason) in broken.items():
        assert reason in reasons[name], (name, reasons[name])
    slides = Document.objects.get(filename="python-pptx-test-slides.pptx")
    assert [c.breadcrumb for c in slides.chunks.all()][0].endswith("Slide 1")
