"""The extractors of kb/library/ingest/formats/ on real files (tests/kb/fixtures/formats/README.md) and broken ones."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from kb.library.ingest.chunking import split
from kb.library.ingest.extract import (
    CSV,
    EML,
    EPUB,
    ODT,
    PPTX,
    RST,
    RTF,
    XLSX,
    Extracted,
    ExtractionError,
    UnsupportedFile,
    detect_mime,
    extract,
)

FIXTURES = Path(__file__).parent / "fixtures" / "formats"


def load(name: str, data: bytes | None = None) -> Extracted:
    if data is None:
        data = (FIXTURES / name).read_bytes()
    return extract(data=data, mime=detect_mime(filename=name, head=data[:8192]), filename=name)


def headings(extracted: Extracted) -> list[tuple[int, str]]:
    for h in extracted.headings:  # every heading points at its own "#" line of the canonical text
        assert extracted.text[h.start : h.end] == "#" * h.level + " " + h.title
    return [(h.level, h.title) for h in extracted.headings]


def truncated(name: str) -> bytes:
    data = (FIXTURES / name).read_bytes()
    return data[: len(data) // 2]


def rezipped_without(name: str, member: str) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(FIXTURES / name) as source, zipfile.ZipFile(out, "w") as target:
        for item in source.infolist():
            if item.filename != member:
                target.writestr(item, source.read(item))
    return out.getvalue()


def chunks_quote_the_text(extracted: Extracted) -> None:
    for draft in split(extracted, title="T"):
        assert draft.content == extracted.text[draft.start : draft.end]


# --------------------------------------------------------------------------- detection


@pytest.mark.parametrize(
    ("filename", "head", "mime"),
    [
        ("guide.rst", b"Title\n=====\n", RST),
        ("report.odt", b"PK\x03\x04", ODT),
        ("deck.pptx", b"PK\x03\x04", PPTX),
        ("book.xlsx", b"PK\x03\x04", XLSX),
        ("rows.csv", b"a,b\n1,2\n", CSV),
        ("novel.epub", b"PK\x03\x04", EPUB),
        ("mail.eml", "Subject: caf\xe9\n\nbody".encode("latin-1"), EML),  # 8-bit mail is still mail
        ("memo.rtf", b"{\\rtf1\\ansi hello}", RTF),
    ],
)
def test_new_types_are_detected(filename: str, head: bytes, mime: str) -> None:
    assert detect_mime(filename=filename, head=head) == mime


@pytest.mark.parametrize(
    ("filename", "head", "expected"),
    [
        ("old.xlsx", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1rest", "an Office 97-2003 binary file, not an Excel .xlsx workbook"),
        ("deck.pptx", b"%PDF-1.4", "not a PowerPoint .pptx presentation (it is not a ZIP package)"),
        ("memo.rtf", b"plain words", "not RTF (it does not start with {\\rtf)"),
        ("mail.eml", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1\x00\x00", "an Outlook .msg file"),
        ("old.xls", b"\xd0\xcf\x11\xe0", ".xls files are not supported"),
    ],
)
def test_new_types_that_are_not_what_they_say_are_rejected(filename: str, head: bytes, expected: str) -> None:
    with pytest.raises(UnsupportedFile, match=f"^{filename}: ") as info:
        detect_mime(filename=filename, head=head)
    assert expected in str(info.value)


# --------------------------------------------------------------------------- reStructuredText


def test_rst_sections_become_the_heading_tree() -> None:
    result = load("docutils-security.rst")
    assert headings(result)[:4] == [
        (1, "Deploying Docutils Securely"), (2, "Introduction"), (2, "The Issues"), (3, "File Creation")
    ]
    assert result.title == "Deploying Docutils Securely"
    assert "Author: David Goodger" in result.text
    # The include directive is disabled: nothing from another file, no docutils complaint in the text.
    assert "System Message" not in result.text and "include" not in result.text.split("\n")[0]
    chunks_quote_the_text(result)


def test_sphinx_roles_and_directives_degrade_to_their_text() -> None:
    source = """Guide
=====

See :ref:`the install guide <install>` and :pep:`8`; run ``make html``.

.. versionadded:: 2.1
   The ``--fast`` flag skips the link check.

.. toctree::
   :maxdepth: 2

   install

.. warning:: Never commit the key.

Example::

    $ kb ingest docs/
"""
    result = extract(data=source.encode(), mime=RST, filename="guide.rst")
    text = result.text
    assert "See the install guide and PEP 8; run make html." in text
    assert "2.1\nThe ``--fast`` flag skips the link check." in text
    assert "Warning: Never commit the key." in text
    assert "    $ kb ingest docs/" not in text and "$ kb ingest docs/" in text  # literal block kept verbatim
    assert "maxdepth" not in text and "install\n" not in text  # navigation, not content
    assert ":ref:" not in text and "Unknown" not in text


def test_an_rst_file_that_is_not_utf8_fails_with_its_reason() -> None:
    data = "Caf\xe9\n====\n\nMen\xfc.\n".encode("latin-1")
    with pytest.raises(ExtractionError, match=r"^menu.rst: the file is not UTF-8 text"):
        extract(data=data, mime=RST, filename="menu.rst")


# --------------------------------------------------------------------------- OpenDocument


def test_odt_outline_headings_tables_and_lists() -> None:
    tables = load("docutils-odt-tables.odt")
    assert headings(tables)[:3] == [(1, "Test 1"), (1, "Test 2"), (1, "Test 3")]
    assert "body row 3 | Cells may span rows. aaa | Table cells contain body elements." in tables.text
    lists = load("odfpy-twolevellist.odt")
    assert "- Item A\n\n- Item B\n\n- Subitem B.1" in lists.text
    chunks_quote_the_text(tables)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (lambda: truncated("docutils-odt-tables.odt"), "cannot read OpenDocument text: "),
        (lambda: rezipped_without("docutils-odt-tables.odt", "content.xml"), "the package has no content.xml"),
    ],
)
def test_a_broken_odt_fails_with_its_reason(data: Callable[[], bytes], reason: str) -> None:
    with pytest.raises(ExtractionError, match=f"^broken.odt: .*{reason}"):
        load("broken.odt", data())


# --------------------------------------------------------------------------- PowerPoint


def test_pptx_slide_sections_with_tables_groups_and_notes() -> None:
    real = load("python-pptx-test-slides.pptx")
    assert headings(real) == [(1, "Slide 1")]
    assert "Col head 1 | Col head 2\nCell text 1 | Cell text 2" in real.text
    assert "Group test text" in real.text


def test_pptx_titles_number_the_slides_and_notes_are_marked() -> None:
    import pptx

    deck = pptx.Presentation()
    for title, body, notes in [("Quarterly review", "Revenue grew 12%.", "Mention the Lisbon office."),
                               ("Next steps", "Hire two engineers.", "")]:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
        if notes:
            slide.notes_slide.notes_text_frame.text = notes
    out = io.BytesIO()
    deck.save(out)
    result = load("review.pptx", out.getvalue())
    assert headings(result) == [(1, "Slide 1: Quarterly review"), (1, "Slide 2: Next steps")]
    assert result.title == "Quarterly review"
    assert "Revenue grew 12%.\n\nSpeaker notes: Mention the Lisbon office." in result.text
    drafts = split(result, title="Review")
    assert [d.breadcrumb for d in drafts] == [("Review", "Slide 1: Quarterly review"), ("Review", "Slide 2: Next steps")]


def test_a_truncated_pptx_fails_with_its_reason() -> None:
    with pytest.raises(ExtractionError, match="^deck.pptx: cannot read PowerPoint presentation: "):
        load("deck.pptx", truncated("python-pptx-test-slides.pptx"))


# --------------------------------------------------------------------------- Excel and CSV


def test_xlsx_rows_carry_their_header_names_and_row_numbers() -> None:
    result = load("tablib-founders.xlsx")
    assert headings(result) == [(1, "Sheet: Feuille1"), (2, "Rows 2–4")]
    assert "Row 3: first_name: George; last_name: Washington; gpa: 67" in result.text
    assert result.title is None  # the file name names it, not the first sheet
    # A sheet whose stored size runs far past its data is read to its data, with no false warning.
    padded = load("tablib-bad-dimensions.xlsx")
    assert "Row 3: PN: EP00002; Price: 1" in padded.text and padded.warnings == ()


def test_csv_rows_are_records_in_blocks_each_under_its_row_range() -> None:
    result = load("matplotlib-msft.csv")
    assert "Row 2: Date: 19-Sep-03; Open: 29.76; High: 29.97; Low: 29.52; Close: 29.96; " in result.text
    ranges = [title for level, title in headings(result) if level == 2]
    assert ranges[0] == "Rows 2–7" and len(ranges) > 5
    drafts = split(result, title="msft")
    assert all(d.breadcrumb[-1].startswith("Rows ") for d in drafts[1:])  # the locator: sheet + row range


def test_long_and_wide_sheets_are_bounded_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    from kb.library.ingest.formats import sheets

    monkeypatch.setattr(sheets, "MAX_ROWS", 50)
    monkeypatch.setattr(sheets, "MAX_COLUMNS", 3)
    text = "a,b,c,d\n" + "".join(f"{n},{n},{n},{n}\n" for n in range(100))
    result = extract(data=text.encode(), mime=CSV, filename="big.csv")
    assert "Row 50: a: 48; b: 48; c: 48" in result.text and "Row 51:" not in result.text
    assert "big.csv: only the first 50 rows were read" in result.warnings
    assert any("only the first 3 columns were read" in w for w in result.warnings)


def test_a_utf16_csv_and_a_truncated_xlsx_fail_with_their_reasons() -> None:
    with pytest.raises(UnsupportedFile, match="^docutils-utf-16.csv: the file is UTF-16 text; save it as UTF-8"):
        load("docutils-utf-16.csv")
    with pytest.raises(ExtractionError, match="^book.xlsx: cannot read Excel workbook: "):
        load("book.xlsx", truncated("tablib-founders.xlsx"))


# --------------------------------------------------------------------------- EPUB


def epub_book() -> bytes:
    """A two-chapter book written by ebooklib; the second chapter has no heading of its own."""
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("kb-test-1")
    book.set_title("Field manual")
    book.set_language("en")
    one = epub.EpubHtml(title="Arrival", file_name="one.xhtml")
    one.content = "<h1>Arrival</h1><p>Sign in at the gate with your badge.</p><h2>Parking</h2><p>Bay 4 is for visitors.</p>"
    two = epub.EpubHtml(title="Departure", file_name="two.xhtml")
    two.content = "<p>Return the badge to the desk before you leave.</p>"
    for chapter in (one, two):
        book.add_item(chapter)
    book.toc = (one, two)
    book.spine = [one, two]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    out = io.BytesIO()
    epub.write_epub(out, book)
    return out.getvalue()


def test_epub_chapters_make_the_heading_tree() -> None:
    result = load("manual.epub", epub_book())
    assert headings(result) == [(1, "Arrival"), (2, "Parking"), (1, "Departure")]
    assert result.title == "Field manual"
    assert "# Departure\n\nReturn the badge to the desk before you leave." in result.text
    chunks_quote_the_text(result)


def test_a_real_epub3_book_keeps_its_chapters_as_the_heading_tree() -> None:
    """IDPF's EPUB 3 sample as epubcheck ships it: XHTML chapters, nested headings, a cover image."""
    result = load("epubcheck-childrens-literature.epub")
    found = headings(result)
    assert (2, "SECTION IV FAIRY STORIES\u2014MODERN FANTASTIC TALES") in found
    assert (4, "THE EMPEROR'S NEW CLOTHES") in found and (4, "THE NIGHTINGALE") in found
    assert "Andersen, Hans Christian, Fairy Tales." in result.text
    assert "<p" not in result.text and "xmlns" not in result.text
    chunks_quote_the_text(result)


def test_a_truncated_epub_fails_with_its_reason() -> None:
    data = epub_book()
    with pytest.raises(ExtractionError, match="^manual.epub: cannot read EPUB: "):
        load("manual.epub", data[: len(data) // 2])


# --------------------------------------------------------------------------- e-mail


def test_eml_headers_as_metadata_and_the_plain_body() -> None:
    result = load("mail-parser-comma-names.eml")
    assert headings(result) == [(1, "Test for Comma and Name Bugs")]
    assert result.title == "Test for Comma and Name Bugs"
    assert 'From: "LastßlName, FirstName" <comma.name@example.com>' in result.text  # encoded words decoded
    assert "\nCc: simple@example.net" in result.text
    assert "This is a test email body." in result.text


def test_eml_attachments_are_listed_not_followed() -> None:
    result = load("mail-parser-delivery-failure.eml")
    assert "User's mailbox quota exceeded" in result.text
    assert "Attachments (not indexed):\n- DSN57BAC498.txt (message/delivery-status" in result.text


def test_an_eml_without_mail_headers_fails_with_its_reason() -> None:
    with pytest.raises(ExtractionError, match="^notes.eml: cannot read e-mail: it has no From, To, Subject or Date"):
        extract(data=b"just some words\nand more words\n", mime=EML, filename="notes.eml")


# --------------------------------------------------------------------------- RTF

MEMO_RTF = (
    b"{\\rtf1\\ansi\\ansicpg1252\\deff0{\\fonttbl{\\f0 Arial;}}"
    b"{\\info{\\title Canteen memo}}"
    b"\\f0\\fs24 Canteen opening hours\\par\\par "
    b"The caf\\'e9 on floor 2 opens at 8:00 and closes at 15:30.\\par "
    b"{\\b Bring your own cup.}\\par}"
)


def test_rtf_text_with_code_page_escapes() -> None:
    result = load("memo.rtf", MEMO_RTF)
    assert "The café on floor 2 opens at 8:00 and closes at 15:30." in result.text
    assert "Bring your own cup." in result.text and "\\b" not in result.text and "Arial" not in result.text


def test_a_real_word_rtf_keeps_its_text_and_drops_its_font_tables() -> None:
    """Written by Word for Mac (rtf2xml's test file): Unicode/font groups and panose data are not text."""
    result = load("rtf2xml-headings-mixed.rtf")
    assert result.text.startswith("Text before headers.")
    for words in ("Heading one", "Heading three", "Heading five"):
        assert words in result.text
    assert not any(noise in result.text for noise in ("Times", "Helvetica", "panose", "\\", "{", "}"))


def test_a_truncated_rtf_fails_with_its_reason() -> None:
    with pytest.raises(ExtractionError, match=r"^memo.rtf: cannot read RTF: the file is truncated or damaged"):
        load("memo.rtf", MEMO_RTF[:90])
