"""Turn an uploaded file into one canonical text plus its heading tree and page spans.

The canonical text is what chunks quote (`content == text[start:end]`), so every
format is reduced to plain, Markdown-like text *before* anything is cut, and the
heading and page offsets recorded here point into exactly that string.
Pure Python: no Django, so it can be tested without a database.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import re
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # parsers are imported where used: a Markdown upload need not load lxml
    from bs4.element import PageElement, Tag
    from docx.table import Table
    from docx.text.paragraph import Paragraph

# 2: more formats; PDF pages joined where a sentence continues, page numbers dropped. 3: PDF text read by PDFium.
# 4: a PDF's bookmarks found in its text are its headings.
EXTRACTOR_VERSION: int = 4

MARKDOWN = "text/markdown"
PLAIN = "text/plain"
HTML = "text/html"
PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
RST = "text/x-rst"
ODT = "application/vnd.oasis.opendocument.text"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
CSV = "text/csv"
EPUB = "application/epub+zip"
EML = "message/rfc822"
RTF = "application/rtf"

SUPPORTED: dict[str, str] = {
    ".md": MARKDOWN,
    ".markdown": MARKDOWN,
    ".txt": PLAIN,
    ".html": HTML,
    ".htm": HTML,
    ".pdf": PDF,
    ".docx": DOCX,
    ".rst": RST,
    ".odt": ODT,
    ".pptx": PPTX,
    ".xlsx": XLSX,
    ".csv": CSV,
    ".epub": EPUB,
    ".eml": EML,
    ".rtf": RTF,
}
SUPPORTED_HINT = "supported: " + ", ".join(SUPPORTED)
SUPPORTED_KINDS = (  # the same list in words, for the upload form and the ingest command's help
    "Markdown (.md), text (.txt), HTML, PDF (scans are read by OCR), Word (.docx), reStructuredText (.rst), "
    "OpenDocument text (.odt), PowerPoint (.pptx), Excel (.xlsx), CSV, EPUB, e-mail (.eml) and RTF"
)
# ZIP packages, with what the user would call them in an error message.
_ZIP_KINDS = {
    DOCX: "a Word .docx document",
    ODT: "an OpenDocument text (.odt)",
    PPTX: "a PowerPoint .pptx presentation",
    XLSX: "an Excel .xlsx workbook",
    EPUB: "an EPUB book",
}
_OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # .doc/.xls/.ppt of Office 97-2003

# Bounded work per file: a small upload must not unpack, parse or index without limit.
MAX_TEXT_CHARS = 10_000_000  # canonical text of any format (about 2,500 pages); checked by the pipeline
MAX_HTML_CHARS = 10_000_000  # HTML source: BeautifulSoup builds the whole tree in memory
MAX_PDF_PAGES = 2_000
MAX_ZIP_ENTRIES = 5_000  # entries of a ZIP package (DOCX, ODT, PPTX, XLSX, EPUB)
MAX_ZIP_UNPACKED = 200 * 1024 * 1024  # a package's declared uncompressed bytes (zipfile never reads past them)
OCR_MAX_PIXELS = 16_000_000  # a page read by OCR is rendered at most this large (KB_OCR_MAX_PIXELS)


class UnsupportedFile(ValueError):
    """The file is of a kind we do not ingest, or is not what its name says. Shown to the user."""


class ExtractionError(ValueError):
    """The file is of a supported kind but could not be read. Shown to the user."""


@dataclass(frozen=True)
class Heading:
    level: int
    title: str
    start: int  # offsets of the whole heading line(s) in the canonical text
    end: int


@dataclass(frozen=True)
class Page:
    number: int  # 1-based
    start: int
    end: int


@dataclass(frozen=True)
class Extracted:
    text: str
    headings: tuple[Heading, ...]
    pages: tuple[Page, ...]
    warnings: tuple[str, ...]
    title: str | None


# --------------------------------------------------------------------------- detection


def detect_mime(*, filename: str, head: bytes) -> str:
    """MIME type from the extension, checked against the first bytes of the file.

    `head` is the start of the file (a few KiB are enough). Raises UnsupportedFile with a
    message naming the file when the extension is unknown or the bytes contradict it.
    """
    name = display_name(filename)
    ext = PurePath(name).suffix.lower()
    if not ext:
        raise UnsupportedFile(f"{name}: files without an extension are not supported ({SUPPORTED_HINT})")
    mime = SUPPORTED.get(ext)
    if mime is None:
        raise UnsupportedFile(f"{name}: {ext} files are not supported ({SUPPORTED_HINT})")
    if mime == PDF:
        # The PDF spec tolerates a little junk before the header; real files put it first.
        if b"%PDF-" not in head[:1024]:
            raise UnsupportedFile(f"{name}: the file is not a PDF (it does not start with %PDF-)")
    elif mime in _ZIP_KINDS:
        if head.startswith(_OLE2):
            raise UnsupportedFile(
                f"{name}: the file is an Office 97-2003 binary file, not {_ZIP_KINDS[mime]}; save it in the newer format"
            )
        if not head.startswith(b"PK\x03\x04"):
            raise UnsupportedFile(f"{name}: the file is not {_ZIP_KINDS[mime]} (it is not a ZIP package)")
    elif mime == RTF:
        if not head.lstrip().startswith(b"{\\rtf"):
            raise UnsupportedFile(f"{name}: the file is not RTF (it does not start with {{\\rtf)")
    elif mime == EML:
        # Mail bodies may be in any charset (8-bit Latin-1 is common): only binary data is refused here.
        if head.startswith(_OLE2):
            raise UnsupportedFile(f"{name}: the file is an Outlook .msg file, not an e-mail message; save it as .eml")
        if b"\x00" in head:
            raise UnsupportedFile(f"{name}: the file is not an e-mail message (it contains NUL bytes)")
    else:
        if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
            raise UnsupportedFile(f"{name}: the file is UTF-16 text; save it as UTF-8")
        if b"\x00" in head:
            raise UnsupportedFile(f"{name}: the file is not text (it contains NUL bytes); is it really {ext}?")
        try:
            # Incremental so that a multi-byte character cut at the end of `head` is not an error.
            codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
        except UnicodeDecodeError as exc:
            raise UnsupportedFile(
                f"{name}: the file is not UTF-8 text (invalid byte at position {exc.start}); save it as UTF-8"
            ) from None
    return mime


# --------------------------------------------------------------------------- extraction


def extract(
    *, data: bytes, mime: str, filename: str, ocr: bool = False, ocr_max_pixels: int = OCR_MAX_PIXELS,
    on_ocr_page: Callable[[int, int], None] | None = None,
) -> Extracted:
    """Canonical text, headings and pages of one file. Raises ExtractionError (or UnsupportedFile).

    `ocr`: read PDF pages that have no text layer with OCR (slow: seconds per page), each rendered
    at no more than `ocr_max_pixels`. `on_ocr_page(done, total)` is called after each page read by
    OCR, so a caller can show progress and keep its claim on the document alive through a long scan.
    This runs in the caller's process without limits; the pipeline runs it in kb.ingest.bounded.
    """
    name = display_name(filename)
    return _without_nul(_extract(data=data, mime=mime, name=name, ocr=ocr, ocr_max_pixels=ocr_max_pixels,
                                 on_ocr_page=on_ocr_page))


def _extract(
    *, data: bytes, mime: str, name: str, ocr: bool, ocr_max_pixels: int,
    on_ocr_page: Callable[[int, int], None] | None,
) -> Extracted:
    from kb.ingest import formats  # the formats import this module's plumbing

    if mime in _ZIP_KINDS:
        _check_package(data, name, _ZIP_KINDS[mime])
    if mime == MARKDOWN:
        return _extract_text(_decode(data, name), markdown=True)
    if mime == PLAIN:
        return _extract_text(_decode(data, name), markdown=False)
    if mime == HTML:
        return _extract_html(_decode(data, name), name)
    if mime == PDF:
        return _extract_pdf(data, name, ocr=ocr, ocr_max_pixels=ocr_max_pixels, on_ocr_page=on_ocr_page)
    if mime == DOCX:
        return _extract_docx(data, name)
    if mime == CSV:
        return formats.sheets.extract_csv(_decode(data, name), name)
    if mime == RST:
        return formats.rst.extract(_decode(data, name), name)
    readers = {
        ODT: formats.odt.extract,
        PPTX: formats.slides.extract,
        XLSX: formats.sheets.extract_xlsx,
        EPUB: formats.epub.extract,
        EML: formats.mail.extract,
        RTF: formats.rtf.extract,
    }
    if mime in readers:
        return readers[mime](data, name)
    raise UnsupportedFile(f"{name}: {mime} files are not supported ({SUPPORTED_HINT})")


def _without_nul(extracted: Extracted) -> Extracted:
    """NUL characters (a mail body, a PDF's text layer) become spaces: PostgreSQL text cannot hold
    them, and a space keeps every heading and page offset pointing at the same characters."""
    if "\x00" not in extracted.text:
        return extracted
    count = extracted.text.count("\x00")
    return replace(
        extracted,
        text=extracted.text.replace("\x00", " "),
        headings=tuple(replace(h, title=h.title.replace("\x00", " ")) for h in extracted.headings),
        title=extracted.title.replace("\x00", " ") if extracted.title else extracted.title,
        warnings=(*extracted.warnings, f"{count:,} NUL characters in the text were replaced by spaces"),
    )


def display_name(filename: str) -> str:
    """The name error messages use: browsers on Windows may send a full path; the user knows the base name."""
    return PurePath(filename.replace("\\", "/")).name or filename


def _decode(data: bytes, name: str) -> str:
    if b"\x00" in data:
        raise ExtractionError(f"{name}: the file is not text (it contains NUL bytes)")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ExtractionError(
            f"{name}: the file is not UTF-8 text (invalid byte at position {exc.start}); save it as UTF-8"
        ) from None
    return _newlines(text)


def _newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


# --------------------------------------------------------------------------- Markdown / plain text

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
# Trailing blanks are stripped by _clean_title, not by the patterns: a lazy `(.*?)` before
# `\s*$` re-scans every run of blanks inside the line, quadratic in the line's length.
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*))?$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_TRAC = re.compile(r"^\s*(=+)\s+(\S.*)$")
_NOT_A_SETEXT_TITLE = re.compile(r"^\s*([-*+>|]|\d+[.)]\s|```|~~~|<)")
# YAML front matter (Jekyll, Docusaurus, Hugo): metadata, kept in the text but never a heading.
FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?\n)?(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL)
_FM_TITLE = re.compile(r"^title:[ \t]*(.+)$", re.MULTILINE)


def _extract_text(text: str, *, markdown: bool) -> Extracted:
    """Markdown and plain text are kept exactly as written; only headings are located."""
    front = FRONT_MATTER.match(text) if markdown or text.startswith("---") else None
    body_from = front.end() if front else 0
    headings = tuple(_text_headings(text, body_from=body_from, trac=not markdown))
    title = None
    if front and (m := _FM_TITLE.search(front.group(1) or "")):
        title = m.group(1).strip().strip("\"'").strip() or None
    if title is None:
        title = next((h.title for h in headings if h.level == 1), None)
    return Extracted(text=text, headings=headings, pages=(), warnings=(), title=title)


def _text_headings(text: str, *, body_from: int, trac: bool) -> Iterator[Heading]:
    fence: str | None = None  # the fence that opened the current code block
    trac_block = False
    after_break = True  # the previous line was blank, a heading, or the start of the body
    candidate: tuple[int, str] | None = None  # a one-line paragraph that an underline would make a heading
    for m in re.finditer(r"(?m)^[^\n]*", text[body_from:]):
        pos, line = body_from + m.start(), m.group()
        stripped = line.strip()
        if fence is not None:
            if stripped.startswith(fence) and not stripped.strip(fence[0]):
                fence = None
            candidate, after_break = None, False
            continue
        if trac_block:
            if stripped.startswith("}}}"):
                trac_block = False
            candidate, after_break = None, False
            continue
        if fm := _FENCE.match(line):
            fence = fm.group(1)
            candidate, after_break = None, False
            continue
        if trac and stripped.startswith("{{{") and "}}}" not in stripped[3:]:
            trac_block = True
            candidate, after_break = None, False
            continue
        heading: Heading | None = None
        if hm := _ATX.match(line):
            heading = _heading(len(hm.group(1)), hm.group(2) or "", pos, pos + len(line), atx=True)
        elif trac and (hm := _TRAC.match(line)):
            heading = _heading(len(hm.group(1)), hm.group(2), pos, pos + len(line), atx=False)
        elif candidate is not None and (hm := _SETEXT.match(line)):
            # Only a one-line paragraph counts: "---" under anything else is a rule or front matter.
            level = 1 if hm.group(1)[0] == "=" else 2
            heading = _heading(level, candidate[1], candidate[0], pos + len(line), atx=False)
        if heading is not None or _ATX.match(line) or (trac and _TRAC.match(line)):
            if heading is not None:
                yield heading
            candidate, after_break = None, True
            continue
        if not stripped:
            candidate, after_break = None, True
            continue
        candidate = (pos, line) if after_break and not _NOT_A_SETEXT_TITLE.match(line) else None
        after_break = False


def _heading(level: int, raw: str, start: int, end: int, *, atx: bool) -> Heading | None:
    title = _clean_title(raw, atx=atx)
    return Heading(level=level, title=title, start=start, end=end) if title else None


def _clean_title(raw: str, *, atx: bool) -> str:
    """The heading's words without its decorations; string methods, not end-anchored
    `re.sub`s, which would re-scan blank runs from every position (quadratic)."""
    title = raw.strip()
    if atx:
        bare = title.rstrip("#")  # closing hashes: "## Title ##"
        if bare != title and (not bare or bare[-1] in " \t"):
            title = bare
    else:
        head, hash_sign, anchor = title.rpartition("#")  # Trac: "== Title == #anchor"
        if hash_sign and head[-1:].isspace() and anchor and all(c.isalnum() or c in "_-" for c in anchor):
            title = head
        title = title.rstrip().rstrip("=")
    if title.endswith("}"):  # Docusaurus/kramdown ids: "Title {#id}"
        opening = title.find("{#", title.rfind("}", 0, len(title) - 1) + 1)
        if opening >= 0:
            title = title[:opening]
    return " ".join(title.split())


# --------------------------------------------------------------------------- blocks (HTML, DOCX)


@dataclass
class Block:
    text: str
    level: int = 0  # > 0 for a heading
    title: str = ""


def join_blocks(blocks: list[Block]) -> tuple[str, tuple[Heading, ...]]:
    """Blank-line separated blocks; heading blocks become `#` lines whose offsets are recorded."""
    parts: list[str] = []
    headings: list[Heading] = []
    pos = 0
    for block in blocks:
        if parts:
            parts.append("\n\n")
            pos += 2
        if block.level:
            headings.append(Heading(level=block.level, title=block.title, start=pos, end=pos + len(block.text)))
        parts.append(block.text)
        pos += len(block.text)
    text = "".join(parts)
    for h in headings:  # built, not found: make sure the two agree
        assert text[h.start : h.end].endswith(h.title), h  # noqa: S101  (an invariant of this builder)
    return text, tuple(headings)


def heading_block(level: int, title: str) -> Block:
    return Block(text=f"{'#' * level} {title}", level=level, title=title)


def from_blocks(blocks: list[Block], *, title: str | None, warnings: Iterable[str] = ()) -> Extracted:
    """An unpaged document from its blocks; without a `title`, its first level-1 heading names it."""
    text, headings = join_blocks(blocks)
    title = " ".join((title or "").split()) or next((h.title for h in headings if h.level == 1), None)
    return Extracted(text=text, headings=headings, pages=(), warnings=tuple(warnings), title=title)


@contextlib.contextmanager
def reading(name: str, kind: str) -> Iterator[None]:
    """Turn whatever a parser library raises into one ExtractionError naming the file and its kind."""
    try:
        yield
    except (ExtractionError, UnsupportedFile):
        raise
    except Exception as exc:  # libraries raise many types (BadZipFile, KeyError, lxml and XML errors...)
        raise ExtractionError(f"{name}: cannot read {kind}: {exc or type(exc).__name__}") from exc


# --------------------------------------------------------------------------- HTML

_HTML_SKIP = frozenset(
    "head title script style noscript template nav footer svg math iframe object embed canvas map "
    "select button input textarea".split()
)
_HTML_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_HTML_BLOCKS = frozenset(
    "address article aside blockquote body caption center dd details dialog dir div dl dt fieldset "
    "figcaption figure form header hgroup hr html legend main menu ol p section summary table tbody "
    "tfoot thead tr ul".split()
)
_WS = re.compile(r"\s+")
_HEADING_DECOR = " \t\n\xa0¶§#🔗"


class _HtmlWriter:
    """Collects inline text into paragraphs; block elements end the current paragraph.

    Inline elements are concatenated exactly as they are in the source, so
    `<code>X</code>,` stays `X,` (a separator there would break verbatim quotes).
    """

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.buf: list[str] = []
        self.prefix = ""
        self.images: list[str] = []

    def text(self, s: str) -> None:
        self.buf.append(_WS.sub(" ", s))

    def newline(self) -> None:
        self.buf.append("\n")

    def cell(self) -> None:
        if "".join(self.buf).strip():
            self.buf.append(" | ")

    def flush(self) -> None:
        raw = "".join(self.buf)
        self.buf = []
        para = re.sub(r" *\n *", "\n", re.sub(r" {2,}", " ", raw)).strip()
        para = re.sub(r"\n{2,}", "\n", para)
        if para:
            self.blocks.append(Block(text=self.prefix + para))
            self.prefix = ""
        for image in self.images:
            self.blocks.append(Block(text=image))
        self.images = []

    def heading(self, level: int, title: str) -> None:
        self.flush()
        self.blocks.append(heading_block(level, title))

    def pre(self, raw: str) -> None:
        self.flush()
        code = _newlines(raw).strip("\n").rstrip()
        code = re.sub(r"\n[ \t]*\n(?:[ \t]*\n)+", "\n\n", code)
        if code.strip():
            self.blocks.append(Block(text=code))


def _extract_html(source: str, name: str) -> Extracted:
    if len(source) > MAX_HTML_CHARS:
        raise ExtractionError(f"{name}: the HTML is {len(source):,} characters long; at most {MAX_HTML_CHARS:,} are read")
    from bs4 import BeautifulSoup
    from bs4.element import CData, NavigableString, Tag

    soup = BeautifulSoup(source, "html.parser")
    w = _HtmlWriter()
    ol_counters: dict[int, int] = {}
    # Iterative walk: pages with unclosed <p> nest thousands deep under html.parser.
    stack: list[tuple[Iterator[PageElement], Tag | None]] = [(iter(list(soup.contents)), None)]
    while stack:
        child = next(stack[-1][0], None)
        if child is None:
            _, tag = stack.pop()
            if tag is not None and (tag.name in _HTML_BLOCKS or tag.name == "li"):
                w.flush()
            continue
        if isinstance(child, NavigableString):
            if type(child) in (NavigableString, CData):  # not comments, doctypes, <?xml?>
                w.text(str(child))
            continue
        if not isinstance(child, Tag):
            continue
        name = child.name.lower()
        if name in _HTML_SKIP or child.has_attr("hidden") or child.get("role") == "navigation":
            continue
        if name in _HTML_HEADINGS:
            title = " ".join(child.get_text().split()).strip(_HEADING_DECOR)
            if title:
                w.heading(_HTML_HEADINGS[name], title)
            else:
                w.flush()
            continue
        if name == "pre":
            w.pre(child.get_text())
            continue
        if name == "br":
            w.newline()
            continue
        if name == "img":
            _html_image(w, child)
            continue
        if name in ("td", "th"):
            w.cell()
        elif name == "li":
            w.flush()
            parent = child.find_parent(["ol", "ul", "menu", "dir"])  # unclosed <li>/<p> nest items
            if parent is not None and parent.name == "ol":
                ol_counters[id(parent)] = ol_counters.get(id(parent), 0) + 1
                w.prefix = f"{ol_counters[id(parent)]}. "
            else:
                w.prefix = "- "
        elif name in _HTML_BLOCKS:
            w.flush()
        stack.append((iter(list(child.contents)), child))
    w.flush()
    text, headings = join_blocks(w.blocks)
    page_title: str | None = None
    if soup.title is not None:
        page_title = " ".join(soup.title.get_text().split()) or None
    if page_title is None:
        page_title = next((h.title for h in headings if h.level == 1), None)
    return Extracted(text=text, headings=headings, pages=(), warnings=(), title=page_title)


def _html_image(w: _HtmlWriter, img: Tag) -> None:
    """Keep meaningful images as Markdown references (the UI renders them); drop decoration."""
    alt = " ".join(str(img.get("alt") or "").split())
    src = str(img.get("src") or "").strip()
    if not src or not any(c.isalnum() for c in alt):
        return
    link = img.find_parent("a")
    if link is not None and str(link.get("href") or "").startswith("#"):
        return  # "back to top" arrows and the like
    w.images.append(f"![{alt}]({src})")


# --------------------------------------------------------------------------- PDF


def _extract_pdf(data: bytes, name: str, *, ocr: bool, ocr_max_pixels: int,
                 on_ocr_page: Callable[[int, int], None] | None) -> Extracted:
    from kb.ingest.formats import ocr as ocr_reader
    from kb.ingest.formats.pages import join_pages

    texts, title, outline = _pdf_pages(data, name)
    warnings: list[str] = []
    if not texts:
        raise ExtractionError(f"{name}: cannot read PDF: it has no pages")
    blank = [index for index, page_text in enumerate(texts) if not page_text.strip()]
    for done, index in enumerate(blank, start=1):
        if not ocr:
            warnings.append(f"page {index + 1} has no text layer")
            continue
        with reading(name, f"page {index + 1} by OCR"):
            found = ocr_reader.read_page(data, index, max_pixels=ocr_max_pixels)
        if on_ocr_page is not None:
            on_ocr_page(done, len(blank))
        texts[index] = found.text
        if found.reduced:
            warnings.append(f"page {index + 1} {found.reduced}")
        if found.text.strip():
            warnings.append(f"page {index + 1} read by OCR (confidence {found.confidence:.2f})")
        else:
            warnings.append(f"page {index + 1} has no text layer and OCR found no text")
    text, pages = join_pages(texts)
    return Extracted(text=text, headings=outline_headings(text, pages, outline), pages=pages,
                     warnings=tuple(warnings), title=title)


def _pdf_pages(data: bytes, name: str) -> tuple[list[str], str | None, list[OutlineEntry]]:
    """Each page's text and the metadata title, read with PDFium.

    pypdf's pure-Python text extraction took 0.2-0.3 s a page on 2 cores, most of a
    PDF-heavy corpus's ingest time (a 73-page manual: ~20 s before a chunk was embedded);
    PDFium reads the same text ~13x faster.
    """
    import pypdfium2

    try:
        # Many PDFs are "encrypted" only with an owner password: PDFium opens those as they are.
        pdf = pypdfium2.PdfDocument(data)
    except pypdfium2.PdfiumError as exc:
        if "password" in str(exc).lower():
            raise ExtractionError(f"{name}: cannot read PDF: it is password-protected") from exc
        raise ExtractionError(f"{name}: cannot read PDF: {exc}") from exc
    try:
        if len(pdf) > MAX_PDF_PAGES:
            raise ExtractionError(f"{name}: the PDF has {len(pdf):,} pages; at most {MAX_PDF_PAGES:,} are read (split it)")
        texts: list[str] = []
        for page in pdf:
            textpage = page.get_textpage()
            # PDFium marks a word hyphenated across a line end with \x02 and drops the line end.
            texts.append(_newlines(textpage.get_text_bounded().replace("\x02", "-\n")).replace("\x00", ""))
            textpage.close()
            page.close()
        raw_title = pdf.get_metadata_dict().get("Title")
        outline = _pdf_outline(pdf)
    finally:
        pdf.close()
    return texts, _pdf_title(raw_title) if raw_title else None, outline


MAX_OUTLINE = 20_000  # bookmarks read; a manual has a few thousand at most


@dataclass(frozen=True)
class OutlineEntry:
    level: int  # 1 for a top-level bookmark
    title: str
    page: int  # 0-based index of the page it points to


def _pdf_outline(pdf: Any) -> list[OutlineEntry]:
    """The PDF's bookmarks (its table of contents) that point at a page, in order."""
    entries: list[OutlineEntry] = []
    for bookmark in pdf.get_toc(max_depth=6):
        dest = bookmark.get_dest()
        index = dest.get_index() if dest is not None else None
        title = " ".join((bookmark.get_title() or "").split())
        if index is not None and title:
            entries.append(OutlineEntry(level=bookmark.level + 1, title=title, page=index))
        if len(entries) >= MAX_OUTLINE:
            break
    return entries


# What a heading line may carry before its bookmark's title: "12.3.4 ", "A.1 ", "Chapter 3 ", "II. ".
_SECTION_NUMBER = re.compile(
    r"(?:(?:chapter|part|section|appendix)\s+)?(?:(?:\d{1,3}|[ivxlc]{2,6}|[a-z])[.)])*(?:\d{1,3}|[ivxlc]{2,6}|[a-z])?[.):]?\s")
SECTION_NUMBER_CHARS = 24


def outline_headings(text: str, pages: Sequence[Page], outline: Sequence[OutlineEntry]) -> tuple[Heading, ...]:
    """The bookmarks found as lines of the canonical text: a bookmark's title alone on a line (after a
    section number at most) on the page it points to or the next, after the heading before it. A PDF
    has no heading tree of its own; without one a 300-page manual is one section, its chunks carry
    no breadcrumb, and a citation names no chapter. A bookmark not found on its page is left out."""
    headings: list[Heading] = []
    after = 0
    for entry in outline:
        if not 0 <= entry.page < len(pages):
            continue
        low = max(after, pages[entry.page].start)
        high = pages[min(entry.page + 1, len(pages) - 1)].end
        wanted = entry.title.casefold()
        at = low
        for line in text[low:high].split("\n"):
            plain = " ".join(line.split()).casefold()
            prefix = plain[: len(plain) - len(wanted)]
            if plain.endswith(wanted) and (not prefix or (len(prefix) <= SECTION_NUMBER_CHARS
                                                          and _SECTION_NUMBER.fullmatch(prefix))):
                headings.append(Heading(level=min(entry.level, 6), title=entry.title, start=at, end=at + len(line)))
                after = at + len(line)
                break
            at += len(line) + 1
    return tuple(headings)


def _pdf_title(raw: str) -> str | None:
    """The metadata title, unless it is the usual junk: a file name or a tool's stamp."""
    title = " ".join(raw.split())
    title = re.sub(r"^Microsoft (?:Word|PowerPoint|Excel) - ", "", title)
    if " " not in title or re.search(r"\.(?:docx?|pptx?|xlsx?|indd|pdf|tex|dvi)$", title, re.I):
        return None
    return title


# --------------------------------------------------------------------------- DOCX


def _extract_docx(data: bytes, name: str) -> Extracted:
    import docx
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as package:
            if "word/document.xml" not in package.namelist():
                raise ExtractionError(f"{name}: cannot read DOCX: it is not a Word document (no word/document.xml)")
        document = docx.Document(io.BytesIO(data))
        blocks: list[Block] = []
        for item in document.iter_inner_content():
            if isinstance(item, Paragraph):
                if block := _docx_paragraph(item):
                    blocks.append(block)
            elif isinstance(item, Table):
                if block := _docx_table(item):
                    blocks.append(block)
        core_title = document.core_properties.title
    except ExtractionError:
        raise
    except Exception as exc:  # zipfile.BadZipFile, KeyError, lxml errors...
        raise ExtractionError(f"{name}: cannot read DOCX: {exc or type(exc).__name__}") from exc
    text, headings = join_blocks(blocks)
    title = " ".join((core_title or "").split()) or next((h.title for h in headings if h.level == 1), None)
    return Extracted(text=text, headings=headings, pages=(), warnings=(), title=title)


def _check_package(data: bytes, name: str, kind: str) -> None:
    """Refuse a ZIP package before a reader unpacks it: too many entries or too many bytes is a zip bomb."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as package:
            entries = package.infolist()
    except (zipfile.BadZipFile, ValueError):
        return  # not a readable package: its reader says so in its own words
    if len(entries) > MAX_ZIP_ENTRIES:
        raise ExtractionError(
            f"{name}: cannot read {kind}: it has {len(entries):,} parts (at most {MAX_ZIP_ENTRIES:,}); is it a zip bomb?"
        )
    unpacked = sum(entry.file_size for entry in entries)
    if unpacked > MAX_ZIP_UNPACKED:
        raise ExtractionError(
            f"{name}: cannot read {kind}: it unpacks to {unpacked // 2**20:,} MB "
            f"(at most {MAX_ZIP_UNPACKED // 2**20:,} MB); is it a zip bomb?"
        )


def _docx_paragraph(paragraph: Paragraph) -> Block | None:
    body = _newlines(paragraph.text).strip()
    if not body:
        return None
    style = (paragraph.style.name if paragraph.style is not None else "") or ""
    if style == "Title":
        return heading_block(1, " ".join(body.split()))
    if m := re.fullmatch(r"Heading ([1-9])", style):
        return heading_block(int(m.group(1)), " ".join(body.split()))
    if style.startswith("List"):
        body = "- " + body
    return Block(text=re.sub(r"\n{2,}", "\n", body))


def _docx_table(table: Table) -> Block | None:
    rows: list[str] = []
    for row in table.rows:
        cells: list[str] = []
        seen: set[int] = set()
        for cell in row.cells:
            if id(cell._tc) in seen:  # a merged cell is reported once per grid column it spans
                continue
            seen.add(id(cell._tc))
            cells.append(" ".join(cell.text.split()))
        if any(cells):
            rows.append(" | ".join(cells))
    return Block(text="\n".join(rows)) if rows else None
