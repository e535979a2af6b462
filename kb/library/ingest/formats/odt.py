"""OpenDocument text (.odt, LibreOffice/OpenOffice) through odfpy: outline headings become the heading tree."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from typing import Any

from kb.library.ingest.canonical import ODT, Block, Extracted, ExtractionError, ReadOptions, from_blocks, heading_block, reading, reads

_TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
_TABLE = "urn:oasis:names:tc:opendocument:xmlns:table:1.0"


@reads(ODT)
def extract(data: bytes, name: str, options: ReadOptions) -> Extracted:
    from odf.opendocument import load

    with reading(name, "OpenDocument text"):
        with zipfile.ZipFile(io.BytesIO(data)) as package:
            if "content.xml" not in package.namelist():
                raise ExtractionError(f"{name}: cannot read OpenDocument text: the package has no content.xml")
        document = load(io.BytesIO(data))
        blocks = list(_blocks(document.text))
        title = _meta_title(document)
    return from_blocks(blocks, title=title)


def _blocks(element: Any, prefix: str = "") -> Iterator[Block]:
    from odf import teletype

    for child in element.childNodes:
        qname = getattr(child, "qname", None)
        if qname == (_TEXT, "h"):
            title = " ".join(teletype.extractText(child).split())
            if title:
                level = int(child.getAttribute("outlinelevel") or 1)
                yield heading_block(min(max(level, 1), 6), title)
        elif qname == (_TEXT, "p"):
            text = teletype.extractText(child).strip()
            if text:
                yield Block(text=prefix + text)
                prefix = ""
        elif qname == (_TEXT, "list-item"):
            yield from _blocks(child, prefix="- ")
        elif qname == (_TABLE, "table"):
            rows = []
            for row in _descendants(child, (_TABLE, "table-row")):
                cells = [_cell_text(c) for c in row.childNodes if getattr(c, "qname", None) == (_TABLE, "table-cell")]
                if any(cells):
                    rows.append(" | ".join(cells))
            if rows:
                yield Block(text="\n".join(rows))
        elif qname is not None and child.childNodes:  # sections, lists, frames: their content counts
            yield from _blocks(child, prefix)


def _cell_text(cell: Any) -> str:
    """A table cell's paragraphs on one line (extractText would run them together: "cellscontain")."""
    from odf import teletype

    return " ".join(" ".join(teletype.extractText(p).split()) for p in _descendants(cell, (_TEXT, "p"))).strip()


def _descendants(element: Any, qname: tuple[str, str]) -> Iterator[Any]:
    for child in element.childNodes:
        if getattr(child, "qname", None) == qname:
            yield child
        elif getattr(child, "childNodes", None) and getattr(child, "qname", None) != (_TABLE, "table"):
            yield from _descendants(child, qname)


def _meta_title(document: Any) -> str | None:
    from odf import dc, teletype

    found = document.meta.getElementsByType(dc.Title)
    return " ".join(teletype.extractText(found[0]).split()) or None if found else None
