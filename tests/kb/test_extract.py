"""Extraction to canonical text: each format, heading/page offsets, and files that lie about their type."""

from __future__ import annotations

import io
import itertools
import json
import zipfile
from pathlib import Path

import pytest

from kb.library.ingest.extract import (
    DOCX,
    HTML,
    MARKDOWN,
    PDF,
    PLAIN,
    SUPPORTED,
    Extracted,
    ExtractionError,
    UnsupportedFile,
    detect_mime,
    extract,
)

# The demo evaluation set ships in the repository, so these tests always run.
EVAL = Path(__file__).resolve().parents[2] / "demo" / "eval"
CORPUS = EVAL / "corpus"
HANDBOOK = CORPUS / "everyone/handbook-welcome-and-workplace.pdf"


def load(path: Path) -> Extracted:
    data = path.read_bytes()
    return extract(data=data, mime=detect_mime(filename=path.name, head=data[:4096]), filename=path.name)


def heading_lines(extracted: Extracted) -> list[tuple[int, str, str]]:
    return [(h.level, h.title, extracted.text[h.start : h.end]) for h in extracted.headings]


# --------------------------------------------------------------------------- detection


@pytest.mark.parametrize(
    ("filename", "head", "mime"),
    [
        ("a.md", b"# Title\n", MARKDOWN),
        ("a.MARKDOWN", b"text", MARKDOWN),
        ("notes.txt", "caf\u00e9".encode(), PLAIN),
        ("page.html", b"<html></html>", HTML),
        ("page.htm", b"\xef\xbb\xbf<p>x</p>", HTML),
        ("doc.pdf", b"%PDF-1.7\n", PDF),
        ("doc.docx", b"PK\x03\x04rest", DOCX),
        ("C:\\Users\\me\\report.md", b"x", MARKDOWN),
    ],
)
def test_detect_mime_by_extension_and_content(filename: str, head: bytes, mime: str) -> None:
    assert detect_mime(filename=filename, head=head) == mime
    assert {MARKDOWN, PLAIN, HTML, PDF, DOCX} <= set(SUPPORTED.values())


def test_a_head_cut_inside_a_utf8_character_is_still_text() -> None:
    assert detect_mime(filename="a.md", head="na\u00efve".encode()[:3]) == MARKDOWN


@pytest.mark.parametrize(
    ("filename", "head", "expected"),
    [
        ("report.exe", b"MZ\x90\x00", ".exe files are not supported (supported: .md, .markdown, .txt, .html, .htm, "
         ".pdf, .docx, .rst, .odt, .pptx, .xlsx, .csv, .epub, .eml, .rtf)"),
        ("Makefile", b"all:\n", "files without an extension are not supported"),
        ("scan.pdf", b"just some text", "the file is not a PDF (it does not start with %PDF-)"),
        ("notes.md", b"# Title\n\x00\x01\x02", "contains NUL bytes"),
        ("letter.docx", b"%PDF-1.4", "not a Word .docx document"),
        ("latin1.txt", "caf\u00e9 cr\u00e8me".encode("latin-1"), "not UTF-8"),
        ("wide.txt", "hello".encode("utf-16"), "UTF-16 text; save it as UTF-8"),
    ],
)
def test_mislabelled_files_are_rejected_with_the_file_name(filename: str, head: bytes, expected: str) -> None:
    with pytest.raises(UnsupportedFile) as info:
        detect_mime(filename=filename, head=head)
    assert str(info.value).startswith(f"{filename}: ")
    assert expected in str(info.value)


def test_extract_refuses_an_unknown_mime() -> None:
    with pytest.raises(UnsupportedFile, match="^x.doc: "):
        extract(data=b"\xd0\xcf\x11\xe0", mime="application/msword", filename="x.doc")


# --------------------------------------------------------------------------- Markdown / plain text

MARKDOWN_SAMPLE = (
    "\ufeff---\r\n"
    "title: \"Shipments guide\"\r\n"
    "tags: [ops]\r\n"
    "---\r\n"
    "\r\n"
    "Intro before any heading.\r\n"
    "\r\n"
    "## Filters {#filters}\r\n"
    "\r\n"
    "Use the filter bar.\r\n"
    "\r\n"
    "```sh\r\n"
    "# not a heading, a shell comment\r\n"
    "```\r\n"
    "\r\n"
    "### Carrier field ###\r\n"
    "Type a carrier.\r\n"
    "\r\n"
    "Exports\r\n"
    "=======\r\n"
    "\r\n"
    "Setext section\r\n"
    "--------------\r\n"
    "A paragraph line\r\n"
    "\r\n"
    "---\r\n"
    "\r\n"
    "After a rule.\r\n"
)


def test_markdown_is_kept_as_written_with_headings_located() -> None:
    result = extract(data=MARKDOWN_SAMPLE.encode(), mime=MARKDOWN, filename="guide.md")
    assert result.text == MARKDOWN_SAMPLE.removeprefix("\ufeff").replace("\r\n", "\n")
    assert result.title == "Shipments guide"
    assert heading_lines(result) == [
        (2, "Filters", "## Filters {#filters}"),
        (3, "Carrier field", "### Carrier field ###"),
        (1, "Exports", "Exports\n======="),
        (2, "Setext section", "Setext section\n--------------"),
    ]
    assert result.pages == () and result.warnings == ()


def test_markdown_title_falls_back_to_the_first_h1() -> None:
    result = extract(data=b"Intro\n\n# Real title\n\ntext\n", mime=MARKDOWN, filename="a.md")
    assert result.title == "Real title"
    assert extract(data=b"no headings at all", mime=MARKDOWN, filename="a.md").title is None


def test_trac_headings_in_plain_text() -> None:
    sample = (
        "= Trac Ticket Queries\n"
        "[[TracGuideToc]]\n\n"
        "== Filters ==\n"
        "Text.\n"
        "{{{\n"
        "= inside a code block =\n"
        "}}}\n"
        "=== Deep === #anchor\n"
        "More text with = signs = in it.\n"
        "== Deleting Tickets #deleter\n"
    )
    result = extract(data=sample.encode(), mime=PLAIN, filename="TracQuery.txt")
    assert result.text == sample
    assert heading_lines(result) == [
        (1, "Trac Ticket Queries", "= Trac Ticket Queries"),
        (2, "Filters", "== Filters =="),
        (3, "Deep", "=== Deep === #anchor"),
        (2, "Deleting Tickets", "== Deleting Tickets #deleter"),
    ]
    assert result.title == "Trac Ticket Queries"


def test_text_that_is_not_utf8_is_an_extraction_error() -> None:
    with pytest.raises(ExtractionError, match="^old.txt: the file is not UTF-8"):
        extract(data="\u00e9t\u00e9".encode("latin-1"), mime=PLAIN, filename="old.txt")


# --------------------------------------------------------------------------- HTML

HTML_SAMPLE = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE html>
<html><head><title>Custom   Error
Responses</title><style>p { color: red }</style><script>var hidden = 1;</script></head>
<body>
<nav><a href="/">Home</a> | <a href="/docs">Docs</a></nav>
<div id="path">Apache &gt; HTTP Server</div>
<h1>Custom Error Responses</h1>
<p>Although the server provides <em>generic</em> error
   responses, they are stark.</p>
<!-- a comment that must not show -->
<h2><a name="variables">Available Variables</a> <a class="permalink" href="#variables">&para;</a></h2>
<p><code>REDIRECT_URL</code>, <code>REDIRECT_STATUS</code>, and
<code>REDIRECT_QUERY_STRING</code> are guaranteed to be set.</p>
<pre>ErrorDocument 500 /cgi-bin/crash
ErrorDocument 404 /errors/not_found.html</pre>
Bare text after a block, as old pages have.
<h3>Steps</h3>
<ol><li>Open the <b>Settings</b> tab</li><li>Click <i>Save</i><br>and wait</li></ol>
<ul><li>first</li><li><p>second in a paragraph</p></li></ul>
<table><tr><th>Code</th><th>Meaning</th></tr><tr><td>404</td><td>Not&nbsp;found</td></tr></table>
<p>Look at <img src="shot.png" alt="the Export dialog"> this screenshot.
<img src="spacer.gif" alt=""></p>
<footer>Copyright 2023</footer>
</body></html>
"""


def test_html_becomes_markdown_like_text_with_a_heading_tree() -> None:
    result = extract(data=HTML_SAMPLE.encode(), mime=HTML, filename="custom-error.html")
    text = result.text
    assert result.title == "Custom Error Responses"
    assert heading_lines(result) == [
        (1, "Custom Error Responses", "# Custom Error Responses"),
        (2, "Available Variables", "## Available Variables"),
        (3, "Steps", "### Steps"),
    ]
    # Inline elements are concatenated as written: no space before the comma.
    assert "REDIRECT_URL, REDIRECT_STATUS, and REDIRECT_QUERY_STRING are guaranteed to be set." in text
    assert "Although the server provides generic error responses, they are stark." in text
    assert "ErrorDocument 500 /cgi-bin/crash\nErrorDocument 404 /errors/not_found.html" in text
    assert "\n\nBare text after a block, as old pages have.\n\n" in text
    assert "1. Open the Settings tab\n\n2. Click Save\nand wait" in text
    assert "- first\n\n- second in a paragraph" in text
    assert "Code | Meaning\n\n404 | Not found" in text
    assert "Look at this screenshot.\n\n![the Export dialog](shot.png)" in text
    for gone in ("var hidden", "color: red", "a comment", "Home", "Copyright", "xml version", "spacer.gif"):
        assert gone not in text
    assert "Apache > HTTP Server" in text  # ordinary boilerplate is kept: harmless


def test_html_title_falls_back_to_the_first_h1() -> None:
    result = extract(data=b"<p>intro</p><h1>Guide</h1><p>x</p>", mime=HTML, filename="a.html")
    assert result.title == "Guide"


def test_html_with_thousands_of_unclosed_paragraphs_does_not_recurse_too_deep() -> None:
    page = "<html><body>" + "<p>line <tt>x</tt>." * 5000 + "</body></html>"
    result = extract(data=page.encode(), mime=HTML, filename="old.html")
    assert result.text.count("line x.") == 5000


# --------------------------------------------------------------------------- PDF


def test_pdf_pages_are_joined_and_their_spans_recorded() -> None:
    result = load(HANDBOOK)
    assert [p.number for p in result.pages] == [1, 2, 3]
    spans = [(p.start, p.end) for p in result.pages]
    assert spans[0][0] == 0 and spans[-1][1] == len(result.text) and "\r" not in result.text
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))  # in order, never overlapping
    assert result.text[spans[0][0] : spans[0][1]].startswith("Employee Handbook: Welcome and Workplace\n")
    assert result.headings == () and result.warnings == ()
    assert result.title == "Employee Handbook: Welcome and Workplace"  # from its metadata


@pytest.mark.parametrize(
    ("raw", "title"),
    [("Annual  report 2024", "Annual report 2024"), ("Microsoft Word - Travel policy.docx", None), ("scan_0001", None)],
)
def test_pdf_metadata_titles_are_used_unless_junk(raw: str, title: str | None) -> None:
    import pypdf

    writer = pypdf.PdfWriter()
    writer.add_blank_page(width=200, height=200)
    writer.add_metadata({"/Title": raw})
    assert extract(data=_pdf_bytes(writer), mime=PDF, filename="a.pdf").title == title


def _pdf_bytes(writer: object) -> bytes:
    buffer = io.BytesIO()
    writer.write(buffer)  # type: ignore[attr-defined]
    return buffer.getvalue()


def test_a_page_without_a_text_layer_is_reported_not_silently_empty() -> None:
    import pypdf

    writer = pypdf.PdfWriter()
    writer.add_page(pypdf.PdfReader(HANDBOOK).pages[0])
    writer.add_blank_page(width=612, height=792)
    result = extract(data=_pdf_bytes(writer), mime=PDF, filename="scan.pdf")
    assert result.warnings == ("page 2 has no text layer",)
    assert [p.number for p in result.pages] == [1, 2]
    assert result.pages[1].start == result.pages[1].end == len(result.text)


def test_a_pdf_with_only_blank_pages_warns_for_each() -> None:
    import pypdf

    writer = pypdf.PdfWriter()
    writer.add_blank_page(width=200, height=200)
    writer.add_blank_page(width=200, height=200)
    result = extract(data=_pdf_bytes(writer), mime=PDF, filename="blank.pdf")
    assert result.text.strip() == ""
    assert result.warnings == ("page 1 has no text layer", "page 2 has no text layer")


def test_an_owner_password_alone_does_not_stop_extraction() -> None:
    import pypdf

    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(HANDBOOK))
    writer.encrypt(user_password="", owner_password="owner", algorithm="AES-128")
    assert "Welcome and Workplace" in extract(data=_pdf_bytes(writer), mime=PDF, filename="locked.pdf").text


def test_a_password_protected_pdf_is_an_extraction_error() -> None:
    import pypdf

    writer = pypdf.PdfWriter()
    writer.add_blank_page(width=200, height=200)
    writer.encrypt(user_password="secret", algorithm="AES-128")
    with pytest.raises(ExtractionError, match="^secret.pdf: cannot read PDF: it is password-protected"):
        extract(data=_pdf_bytes(writer), mime=PDF, filename="secret.pdf")


@pytest.mark.parametrize("data", [b"%PDF-1.7\nthis is not really a pdf", b"%PDF-", b""])
def test_a_corrupt_pdf_is_an_extraction_error(data: bytes) -> None:
    with pytest.raises(ExtractionError, match="^broken.pdf: cannot read PDF: "):
        extract(data=data, mime=PDF, filename="broken.pdf")


# --------------------------------------------------------------------------- DOCX


def _docx_bytes() -> bytes:
    import docx

    document = docx.Document()
    document.add_paragraph("Shipments guide", style="Title")
    document.add_paragraph("Intro paragraph.")
    document.add_heading("Filters", level=1)
    document.add_paragraph("Use the filter bar, then click Apply.")
    document.add_heading("Carrier field", level=2)
    document.add_paragraph("first step", style="List Bullet")
    document.add_paragraph("")  # empty paragraphs vanish
    table = document.add_table(rows=3, cols=3)
    for r, row in enumerate([["Field", "Type", "Note"], ["Carrier", "text", "required"], ["Status", "menu", ""]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    table.cell(2, 1).merge(table.cell(2, 2)).text = "menu"
    document.add_paragraph("After the table.")
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def test_docx_heading_styles_become_heading_lines_and_tables_rows() -> None:
    data = _docx_bytes()
    assert detect_mime(filename="guide.docx", head=data[:4096]) == DOCX
    result = extract(data=data, mime=DOCX, filename="guide.docx")
    assert result.text == (
        "# Shipments guide\n\n"
        "Intro paragraph.\n\n"
        "# Filters\n\n"
        "Use the filter bar, then click Apply.\n\n"
        "## Carrier field\n\n"
        "- first step\n\n"
        "Field | Type | Note\nCarrier | text | required\nStatus | menu\n\n"
        "After the table."
    )
    assert heading_lines(result) == [
        (1, "Shipments guide", "# Shipments guide"),
        (1, "Filters", "# Filters"),
        (2, "Carrier field", "## Carrier field"),
    ]
    assert result.title == "Shipments guide"


def test_a_zip_that_is_not_a_word_document_is_an_extraction_error() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as package:
        package.writestr("hello.txt", "hi")
    data = buffer.getvalue()
    assert detect_mime(filename="fake.docx", head=data) == DOCX  # only the ZIP signature is checked up front
    with pytest.raises(ExtractionError, match="^fake.docx: cannot read DOCX: .*word/document.xml"):
        extract(data=data, mime=DOCX, filename="fake.docx")


def test_a_truncated_docx_is_an_extraction_error() -> None:
    with pytest.raises(ExtractionError, match="^cut.docx: cannot read DOCX: "):
        extract(data=_docx_bytes()[:500], mime=DOCX, filename="cut.docx")


# --------------------------------------------------------------------------- the eval corpus


def test_every_needle_survives_extraction() -> None:
    """The eval needles are verbatim sentences; extraction must not break any of them."""
    questions = [json.loads(line) for line in (EVAL / "questions.jsonl").read_text().splitlines()]
    texts: dict[str, str] = {}
    lost = []
    for q in questions:
        if q["doc"] not in texts:
            texts[q["doc"]] = " ".join(load(CORPUS / q["doc"]).text.split())
        if q["needle"] not in texts[q["doc"]]:
            lost.append(q["gt"])
    assert not lost


def test_heading_offsets_point_at_heading_lines_across_the_corpus() -> None:
    for path in sorted(CORPUS.rglob("*.*")):
        result = load(path)
        for h in result.headings:
            line = result.text[h.start : h.end]
            assert h.start == 0 or result.text[h.start - 1] == "\n", (path, h)
            assert h.end == len(result.text) or result.text[h.end] == "\n", (path, h)
            assert h.title.split()[0] in line, (path, h)
