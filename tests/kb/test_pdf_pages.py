"""PDF page breaks and scanned pages: real PDFs built with reportlab, read by pypdf and OCR."""

from __future__ import annotations

import io
import textwrap
from typing import Any

import pytest

from kb.library.ingest.chunking import split
from kb.library.ingest.extract import PDF, extract
from kb.library.ingest.formats.pages import continues, join_pages

ANSWER = (
    "The vault rotation code for the staging cluster is ZX-4412-QUARTZ, and the platform team "
    "changes it on the first Monday of every quarter."
)
FILLER = (
    "Depot {n} keeps its delivery notes in the shared archive, sorted by carrier and then by the "
    "date of arrival, so that a clerk can find a missing pallet within minutes."
)


def _lines(text: str, width: int = 88) -> list[str]:
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)


def build_pdf(pages: list[list[str]], *, header: str | None = "Northwind operations handbook") -> bytes:
    """A text PDF with one line per string, a running header and a page number footer on each page."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    buffer = io.BytesIO()
    pdf = canvas.Canvas(buffer, pagesize=A4, invariant=True)
    _, height = A4
    for number, lines in enumerate(pages, start=1):
        pdf.setFont("Helvetica", 10)
        if header:
            pdf.drawString(56, height - 40, header)
        y = height - 80
        for line in lines:
            pdf.drawString(56, y, line)
            y -= 14
        pdf.drawString(290, 30, str(number))
        pdf.showPage()
    pdf.save()
    return buffer.getvalue()


def answer_across_a_page_break() -> bytes:
    """Page 1 fills up with paragraphs and ends in the middle of the answer sentence; page 2 finishes it."""
    body = [line for n in range(1, 10) for line in _lines(FILLER.format(n=n))]
    answer = _lines(ANSWER, width=60)
    return build_pdf(
        [
            body + answer[:1],
            answer[1:] + [line for n in range(10, 14) for line in _lines(FILLER.format(n=n))],
            _lines("The last page says nothing more about the vault, only about depots and their pallets."),
        ]
    )


def _normal(text: str) -> str:
    return " ".join(text.split())


def test_a_sentence_across_a_page_break_stays_whole_in_one_chunk() -> None:
    extracted = extract(data=answer_across_a_page_break(), mime=PDF, filename="handbook.pdf")
    # The page break falls inside the sentence...
    first, second = extracted.pages[0], extracted.pages[1]
    assert ANSWER.split()[0] in extracted.text[first.start : first.end]
    assert "QUARTZ" not in extracted.text[first.start : first.end]
    assert "QUARTZ" in extracted.text[second.start : second.end]
    # ...and neither the running header nor the page number sits inside it.
    assert ANSWER in _normal(extracted.text)
    assert "Northwind operations handbook" not in extracted.text
    drafts = split(extracted, title="Handbook")
    assert len(drafts) > 2  # the budget forces cuts: whole-document chunks would prove nothing
    holding = [d for d in drafts if ANSWER in _normal(d.content)]
    assert len(holding) >= 1
    chunk = holding[0]
    assert chunk.content == extracted.text[chunk.start : chunk.end]
    assert chunk.start < first.end < second.start < chunk.end  # it crosses the break
    assert chunk.page == 1  # a chunk's page is the page where it starts


def test_pages_that_end_a_paragraph_are_still_cut_apart() -> None:
    pages = [_lines(FILLER.format(n=1)), _lines(FILLER.format(n=2))]
    extracted = extract(data=build_pdf(pages, header=None), mime=PDF, filename="two.pdf")
    assert extracted.text[extracted.pages[0].end : extracted.pages[1].start] == "\n\n"
    for draft in split(extracted, title="Two"):
        assert draft.end <= extracted.pages[0].end or draft.start >= extracted.pages[1].start


@pytest.mark.parametrize(
    ("before", "after", "joined"),
    [
        ("the rotation code is", "stored in the vault.", True),
        ("the rotation code for the", "Vault Service is kept here.", True),  # an open clause runs on
        ("ends with a comma,", "Then more.", True),
        ("The paragraph is complete.", "another one starts in lower case", False),
        ("Is it over?", "yes", False),
        ("Rotation procedure", "The first step is to log in.", False),  # a heading at the foot of a page
        ("", "text", False),
    ],
)
def test_continues(before: str, after: str, joined: bool) -> None:
    assert continues(before, after) is joined


def test_page_numbers_and_running_headers_are_dropped_but_page_spans_stay_exact() -> None:
    texts = [f"ACME handbook\nbody of page {n} goes on and\n{n}" for n in range(1, 5)]
    text, pages = join_pages(texts)
    assert "ACME" not in text and "\n1\n" not in text
    assert [text[p.start : p.end] for p in pages] == [f"body of page {n} goes on and" for n in range(1, 5)]
    assert text.count("\n") == 3  # every page runs on into the next: single line breaks


def test_a_header_repeated_on_both_pages_of_a_short_pdf_is_dropped_other_lines_kept() -> None:
    text, _ = join_pages(["ACME handbook\nThe first page ends in the", "ACME handbook\nmiddle of a sentence."])
    assert text == "The first page ends in the\nmiddle of a sentence."
    text, _ = join_pages(["Introduction\nThe first page.", "Scope\nThe second page."])
    assert text == "Introduction\nThe first page.\n\nScope\nThe second page."


# --------------------------------------------------------------------------- OCR


def scanned_pdf(lines: list[str]) -> bytes:
    """An image-only PDF: a text page rendered to pixels (as a scanner would) and wrapped in a PDF."""
    import pypdfium2

    text_pdf = build_pdf([lines], header=None)
    image = pypdfium2.PdfDocument(text_pdf)[0].render(scale=2).to_pil().convert("L")
    out = io.BytesIO()
    image.save(out, format="PDF", resolution=144)
    return out.getvalue()


SCANNED = ["Returns desk opening hours", "The returns desk in Building C opens at 7:30 on weekdays.",
           "Bring the parcel label and a photo ID."]


@pytest.mark.slow
def test_a_scanned_page_is_read_by_ocr_with_its_confidence() -> None:
    data = scanned_pdf(SCANNED)
    off = extract(data=data, mime=PDF, filename="scan.pdf", ocr=False)
    assert off.text.strip() == "" and off.warnings == ("page 1 has no text layer",)
    calls: list[tuple[int, int]] = []
    result = extract(data=data, mime=PDF, filename="scan.pdf", ocr=True, on_ocr_page=lambda *args: calls.append(args))
    assert calls == [(1, 1)]  # the pipeline renews the document's lease on each call
    assert "The returns desk in Building C opens at 7:30 on weekdays." in _normal(result.text)
    assert len(result.warnings) == 1 and result.warnings[0].startswith("page 1 read by OCR (confidence 0.")
    assert result.pages[0].number == 1 and result.text[result.pages[0].start : result.pages[0].end] == result.text


@pytest.mark.slow
def test_a_scanned_pdf_becomes_searchable(db: None, people: dict[str, Any], settings: Any) -> None:
    from kb.library.ingest.pipeline import ingest
    from kb.library.models import Document
    from kb.library.services import document_upload
    from search.retrieval import hybrid_search

    settings.KB_OCR_ENABLED = True
    data = scanned_pdf(SCANNED)
    document = document_upload(name="returns-scan.pdf", stream=io.BytesIO(data), size=len(data), enqueue=False).document
    assert ingest(document.pk) == Document.Status.READY
    document.refresh_from_db()
    assert document.warnings[0].startswith("page 1 read by OCR")
    hits = hybrid_search(user=people["carol"], query="When does the returns desk open?").hits
    assert hits and hits[0].document_id == document.pk and "7:30" in hits[0].content and hits[0].page == 1


def manual_with_bookmarks() -> bytes:
    """Three pages with a two-level outline; one bookmark's title is on no page, and page 3 says
    "plot with boxes" in a sentence before its real "2.1 Boxes" heading line."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    buffer = io.BytesIO()
    pdf = canvas.Canvas(buffer, pagesize=A4, invariant=True)
    _, height = A4
    pages = [
        ("intro", [("1 Getting started", 0), ("Install the tool from the package archive.", None),
                   ("Lost bookmark", None)]),
        ("styles", [("2 Plot styles", 0), ("Styles decide how data points are drawn on the canvas.", None)]),
        ("boxes", [("You can plot with boxes", None), ("2.1 Boxes", 1),
                   ("The boxes style draws a box centred on each x value.", None)]),
    ]
    outline = [("Getting started", "intro", 0), ("Missing chapter", "missing", 1), ("Plot styles", "styles", 0),
               ("Boxes", "boxes", 1)]
    for key, lines in pages:
        pdf.bookmarkPage(key)
        if key == "intro":
            pdf.bookmarkPage("missing")
        y = height - 80
        for text, _ in lines:
            pdf.setFont("Helvetica", 10)
            pdf.drawString(56, y, text)
            y -= 28
        pdf.showPage()
    for title, key, level in outline:
        pdf.addOutlineEntry(title, key, level=level)
    pdf.save()
    return buffer.getvalue()


def test_a_pdfs_bookmarks_found_on_their_pages_are_its_headings() -> None:
    extracted = extract(data=manual_with_bookmarks(), mime=PDF, filename="manual.pdf")
    found = [(h.level, h.title, extracted.text[h.start : h.end]) for h in extracted.headings]
    assert found == [(1, "Getting started", "1 Getting started"), (1, "Plot styles", "2 Plot styles"),
                     (2, "Boxes", "2.1 Boxes")]  # not "You can plot with boxes"; "Missing chapter" is on no page
    drafts = split(extracted, title="Manual")
    crumbs = {d.breadcrumb for d in drafts}
    assert ("Manual", "Plot styles", "Boxes") in crumbs
    [boxes] = [d for d in drafts if d.breadcrumb == ("Manual", "Plot styles", "Boxes")]
    assert "draws a box centred" in boxes.text
