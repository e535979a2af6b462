"""EPUB books through ebooklib: the chapters' own HTML headings make the heading tree.

Each spine document (chapter) is read by the HTML extractor; a chapter without a
heading of its own gets its table-of-contents title, so every chapter is a section.
"""

from __future__ import annotations

import io
import warnings as py_warnings
from typing import Any

from kb.library.ingest.canonical import EPUB, HTML, Extracted, ExtractionError, Heading, ReadOptions, display_name, read_as, reading, reads

_SEPARATOR = "\n\n"


@reads(EPUB)
def extract(data: bytes, name: str, options: ReadOptions) -> Extracted:
    from ebooklib import epub

    with reading(name, "EPUB"):
        with py_warnings.catch_warnings():  # ebooklib warns about its own future defaults
            py_warnings.simplefilter("ignore")
            book = epub.read_epub(io.BytesIO(data), options={"ignore_ncx": True})
        toc = _toc_titles(book.toc)
        chapters: list[tuple[str | None, Extracted]] = []
        for idref, _linear in book.spine:
            item = book.get_item_with_id(idref)
            if item is None:
                continue
            chapter = read_as(HTML, item.get_content(), display_name(item.get_name()))
            if chapter.text.strip():
                chapters.append((toc.get(item.get_name()), chapter))
        titles = book.get_metadata("DC", "title")
    if not chapters:
        raise ExtractionError(f"{name}: cannot read EPUB: the book has no chapters with text")
    parts: list[str] = []
    headings: list[Heading] = []
    pos = 0
    for toc_title, chapter in chapters:
        if parts:
            parts.append(_SEPARATOR)
            pos += len(_SEPARATOR)
        if not chapter.headings and toc_title:
            line = f"# {toc_title}"
            headings.append(Heading(level=1, title=toc_title, start=pos, end=pos + len(line)))
            parts.append(line + _SEPARATOR)
            pos += len(line) + len(_SEPARATOR)
        headings += [Heading(h.level, h.title, h.start + pos, h.end + pos) for h in chapter.headings]
        parts.append(chapter.text)
        pos += len(chapter.text)
    text = "".join(parts)
    title = " ".join(str(titles[0][0]).split()) if titles else None
    return Extracted(text=text, headings=tuple(headings), pages=(), warnings=(), title=title or None)


def _toc_titles(toc: Any) -> dict[str, str]:
    """File name → title of the table-of-contents entries (the first entry naming a file wins)."""
    out: dict[str, str] = {}
    for entry in toc:
        if isinstance(entry, tuple):  # (section, children)
            section, children = entry
            out.setdefault(section.href.split("#")[0], " ".join(section.title.split()))
            for href, title in _toc_titles(children).items():
                out.setdefault(href, title)
        elif getattr(entry, "href", None):
            out.setdefault(entry.href.split("#")[0], " ".join((entry.title or "").split()))
    return {href: title for href, title in out.items() if title}
