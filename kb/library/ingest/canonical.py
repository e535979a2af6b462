"""What every reader of kb.library.ingest.formats shares: the canonical text's parts (headings, pages, blocks),
the errors shown to users, the bounds on work per file, and the registry through which a reader is found.

A reader is one function registered with `@reads(MIME, ...)`; kb.library.ingest.extract detects a file's type and
calls the reader registered for it. Readers import only this module, never each other or the dispatcher.
Pure Python: no Django, so it can be tested without a database.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import PurePath

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


@dataclass(frozen=True)
class ReadOptions:
    """What a caller asks of a reader beyond the bytes: OCR of PDF pages without a text layer, each rendered
    at no more than `ocr_max_pixels`, with `on_ocr_page(done, total)` called after each page it reads."""

    ocr: bool = False
    ocr_max_pixels: int = OCR_MAX_PIXELS
    on_ocr_page: Callable[[int, int], None] | None = None


Reader = Callable[[bytes, str, ReadOptions], Extracted]
_READERS: dict[str, Reader] = {}


def reads(*mimes: str) -> Callable[[Reader], Reader]:
    """Register the decorated function as the reader of these MIME types (one reader per type)."""

    def register(reader: Reader) -> Reader:
        for mime in mimes:
            if mime in _READERS:
                raise ValueError(f"{mime} has a reader already: {_READERS[mime].__module__}")
            _READERS[mime] = reader
        return reader

    return register


def read_as(mime: str, data: bytes, name: str, options: ReadOptions = ReadOptions()) -> Extracted:
    """The registered reader's result for `data` as `mime` (a reader may hand an embedded part to another)."""
    reader = _READERS.get(mime)
    if reader is None:
        raise UnsupportedFile(f"{name}: {mime} files are not supported ({SUPPORTED_HINT})")
    return reader(data, name, options)


def display_name(filename: str) -> str:
    """The name error messages use: browsers on Windows may send a full path; the user knows the base name."""
    return PurePath(filename.replace("\\", "/")).name or filename


def decode(data: bytes, name: str) -> str:
    if b"\x00" in data:
        raise ExtractionError(f"{name}: the file is not text (it contains NUL bytes)")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ExtractionError(
            f"{name}: the file is not UTF-8 text (invalid byte at position {exc.start}); save it as UTF-8"
        ) from None
    return newlines(text)


def newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


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
