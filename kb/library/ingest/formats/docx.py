"""Word .docx with its heading styles (Title, Heading 1-9), lists and tables."""

from __future__ import annotations

import io
import re
import zipfile
from typing import TYPE_CHECKING

from kb.library.ingest.canonical import DOCX, Block, Extracted, ExtractionError, ReadOptions, heading_block, join_blocks, newlines, reads

if TYPE_CHECKING:
    from docx.table import Table
    from docx.text.paragraph import Paragraph


@reads(DOCX)
def read_docx(data: bytes, name: str, options: ReadOptions) -> Extracted:
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


def _docx_paragraph(paragraph: Paragraph) -> Block | None:
    body = newlines(paragraph.text).strip()
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
