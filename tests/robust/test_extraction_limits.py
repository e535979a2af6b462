"""Issue 12 item 4: extraction does bounded work whatever the file claims to hold.

Before: DOCX parts were unpacked with no cap (a zip bomb exhausted memory), PDFs had no page
cap, HTML of any size became one tree, and tasks had no time limits.
"""

from __future__ import annotations

import functools
import io
import zipfile

import pytest
from pypdf import PdfWriter

from kb.library.ingest import extract
from kb.library.ingest.extract import DOCX, HTML, PDF, ExtractionError


@functools.cache  # ~2 s to deflate; test_zoo builds its specimens from it at import
def docx_bomb(unpacked: int) -> bytes:
    """A valid-looking package whose document part inflates to `unpacked` bytes of zeros."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as package:
        package.writestr("[Content_Types].xml", "<Types/>")
        with package.open("word/document.xml", "w", force_zip64=True) as part:
            block = b"\0" * 2**20
            for _ in range(unpacked // len(block)):
                part.write(block)
    return buffer.getvalue()


def docx_swarm(entries: int) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as package:
        package.writestr("word/document.xml", "<w:document/>")
        for n in range(entries):
            package.writestr(f"word/media/{n}.bin", b"")
    return buffer.getvalue()


def test_a_docx_zip_bomb_is_refused_before_unpacking() -> None:
    data = docx_bomb(extract.MAX_ZIP_UNPACKED + 2**20)
    assert len(data) < 1_000_000  # a small upload...
    with pytest.raises(ExtractionError, match=r"bomb.docx: cannot read a Word .docx document: it unpacks to 201 MB .*zip bomb"):
        extract.extract(data=data, mime=DOCX, filename="bomb.docx")  # ...refused without inflating it


def test_a_docx_with_too_many_parts_is_refused() -> None:
    with pytest.raises(ExtractionError, match=r"it has 5,001 parts \(at most 5,000\)"):
        extract.extract(data=docx_swarm(extract.MAX_ZIP_ENTRIES), mime=DOCX, filename="swarm.docx")


def test_a_pdf_over_the_page_cap_is_refused() -> None:
    writer = PdfWriter()
    for _ in range(extract.MAX_PDF_PAGES + 1):
        writer.add_blank_page(width=72, height=72)
    buffer = io.BytesIO()
    writer.write(buffer)
    with pytest.raises(ExtractionError, match=r"the PDF has 2,001 pages; at most 2,000 are read"):
        extract.extract(data=buffer.getvalue(), mime=PDF, filename="long.pdf")


def test_html_over_the_size_cap_is_refused() -> None:
    data = b"<p>" + b"a " * (extract.MAX_HTML_CHARS // 2) + b"</p>"
    with pytest.raises(ExtractionError, match=r"big.html: the HTML is 10,000,007 characters long"):
        extract.extract(data=data, mime=HTML, filename="big.html")


def test_tasks_have_time_limits() -> None:
    from chat.tasks import answer_message
    from kb.library.tasks import ingest_document

    for task in (ingest_document, answer_message):
        assert 0 < task.soft_time_limit < task.time_limit
