"""The headings the document page marks up, located once at ingest and stored on the Document.

The viewer (kb/library/viewer.py) used to find them again on every request. They are found in the
canonical text with the extractor's own Markdown (or plain-text) rules, so a heading in the
page is exactly where its `#`/underline syntax sits in the text, whatever format the text
came from. `Document.headings` keeps them as JSON (`stored`); `loaded` reads them back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kb.library.ingest import extract
from kb.library.ingest.extract import Heading


def locate(*, text: str, mime: str) -> tuple[Heading, ...]:
    """The headings of `text`, in order; none for a PDF, whose text has no heading syntax."""
    if mime == extract.PDF:
        return ()  # a line starting with "#" there is just text
    flavour = extract.PLAIN if mime == extract.PLAIN else extract.MARKDOWN
    try:
        found = extract.extract(data=text.encode(), mime=flavour, filename="canonical.md")
    except (extract.ExtractionError, extract.UnsupportedFile):
        return ()
    if found.text != text:  # e.g. a leading BOM was dropped: the offsets would not match
        return ()
    return found.headings


def stored(headings: Iterable[Heading]) -> list[dict[str, Any]]:
    """The JSON that `Document.headings` holds."""
    return [{"level": h.level, "title": h.title, "start": h.start, "end": h.end} for h in headings]


def loaded(value: Any, length: int) -> tuple[Heading, ...]:
    """`Document.headings` as Headings; an entry that is malformed, overlaps the previous one or
    lies outside a text of `length` characters is left out (the text shows as a paragraph)."""
    headings: list[Heading] = []
    pos = 0
    for item in value if isinstance(value, list) else []:
        try:
            heading = Heading(level=int(item["level"]), title=str(item["title"]), start=int(item["start"]),
                              end=int(item["end"]))
        except (TypeError, ValueError, KeyError):
            continue
        if pos <= heading.start < heading.end <= length:
            headings.append(heading)
            pos = heading.end
    return tuple(headings)
