"""Turn an uploaded file into one canonical text plus its heading tree and page spans.

The canonical text is what chunks quote (`content == text[start:end]`), so every
format is reduced to plain, Markdown-like text *before* anything is cut, and the
heading and page offsets recorded here point into exactly that string.
The readers live in kb.library.ingest.formats, one module a format, each registered for its MIME types in
kb.library.ingest.canonical; this module detects a file's type and calls its reader. Importers use this module
as the one door to extraction (it re-exports the canonical types). Pure Python: no Django.
"""

from __future__ import annotations

import codecs
import io
import zipfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import PurePath

from kb.library.ingest import formats  # noqa: F401  (each format module registers its reader on import)
from kb.library.ingest.canonical import (
    CSV,
    DOCX,
    EML,
    EPUB,
    HTML,
    MARKDOWN,
    MAX_HTML_CHARS,
    MAX_PDF_PAGES,
    MAX_TEXT_CHARS,
    MAX_ZIP_ENTRIES,
    MAX_ZIP_UNPACKED,
    OCR_MAX_PIXELS,
    ODT,
    PDF,
    PLAIN,
    PPTX,
    RST,
    RTF,
    SUPPORTED,
    SUPPORTED_HINT,
    SUPPORTED_KINDS,
    XLSX,
    Extracted,
    ExtractionError,
    Heading,
    Page,
    ReadOptions,
    UnsupportedFile,
    display_name,
    read_as,
)

__all__ = [
    "CSV", "DOCX", "EML", "EPUB", "EXTRACTOR_VERSION", "HTML", "MARKDOWN", "MAX_HTML_CHARS", "MAX_PDF_PAGES",
    "MAX_TEXT_CHARS", "MAX_ZIP_ENTRIES", "MAX_ZIP_UNPACKED", "OCR_MAX_PIXELS", "ODT", "PDF", "PLAIN", "PPTX", "RST",
    "RTF", "SUPPORTED", "SUPPORTED_HINT", "SUPPORTED_KINDS", "XLSX", "Extracted", "ExtractionError", "Heading", "Page",
    "UnsupportedFile", "detect_mime", "display_name", "extract",
]

# 2: more formats; PDF pages joined where a sentence continues, page numbers dropped. 3: PDF text read by PDFium.
# 4: a PDF's bookmarks found in its text are its headings.
EXTRACTOR_VERSION: int = 4

# ZIP packages, with what the user would call them in an error message.
_ZIP_KINDS = {
    DOCX: "a Word .docx document",
    ODT: "an OpenDocument text (.odt)",
    PPTX: "a PowerPoint .pptx presentation",
    XLSX: "an Excel .xlsx workbook",
    EPUB: "an EPUB book",
}
_OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # .doc/.xls/.ppt of Office 97-2003


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
    This runs in the caller's process without limits; the pipeline runs it in kb.library.ingest.bounded.
    """
    name = display_name(filename)
    if mime in _ZIP_KINDS:
        _check_package(data, name, _ZIP_KINDS[mime])
    options = ReadOptions(ocr=ocr, ocr_max_pixels=ocr_max_pixels, on_ocr_page=on_ocr_page)
    return _without_nul(read_as(mime, data, name, options))


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
