"""Join the pages of a PDF into one canonical text without breaking the sentences that cross them.

A page that ends mid-sentence is joined to the next with a single newline (a line
break, which the chunker may pack across), a page that ends a paragraph with a blank
line (which the chunker treats as a hard boundary). Running page numbers and headers or
footers repeated on most pages are dropped from the page edges first: left in place
they would sit in the middle of the very sentence that crosses the break. Page spans
still cover each page's remaining text, for `#page=N` locators.
"""

from __future__ import annotations

import re
from collections import Counter

from kb.library.ingest.canonical import Page

CONTINUES = "\n"  # page break inside a paragraph
PARAGRAPH = "\n\n"  # page break between paragraphs

_PAGE_NUMBER = re.compile(
    r"^[\s\-–—(\[]*(?:page|p\.|seite|página|pagina)?\s*\d{1,4}(?:\s*(?:/|of|von|de)\s*\d{1,4})?[\s\-–—)\]]*$",
    re.IGNORECASE,
)
_ENDS_SENTENCE = re.compile(r"[.!?:…][\"'”’)\]]*$")
# Words a sentence cannot end on: after them the text must go on, whatever case follows.
_ENDS_OPEN = re.compile(
    r"(?:[,;(\-–—/]|\b(?:a|an|the|and|or|but|nor|of|to|in|into|for|from|with|by|on|at|as|is|are|was|were|be|"
    r"been|that|which|who|whose|if|when|than|not|can|will|must|should|may|your|our|their|its|this|these|those|"
    r"per|via))$",
    re.IGNORECASE,
)
_MIN_PAGES_FOR_RUNNING = 2
_RUNNING_SHARE = 0.6
_RUNNING_MAX_CHARS = 120  # headers and footers are short lines; a repeated paragraph is content


def join_pages(texts: list[str]) -> tuple[str, tuple[Page, ...]]:
    """The canonical text of a PDF from its pages' texts, and each page's [start, end) in it."""
    texts = _drop_running_lines(texts)
    parts: list[str] = []
    pages: list[Page] = []
    pos = 0
    for number, page_text in enumerate(texts, start=1):
        if number > 1:
            separator = CONTINUES if continues(texts[number - 2], page_text) else PARAGRAPH
            parts.append(separator)
            pos += len(separator)
        pages.append(Page(number=number, start=pos, end=pos + len(page_text)))
        parts.append(page_text)
        pos += len(page_text)
    text = "".join(parts)
    assert all(text[p.start : p.end] == t for p, t in zip(pages, texts, strict=True))  # noqa: S101  (an invariant)
    return text, tuple(pages)


def continues(before: str, after: str) -> bool:
    """Does the text of one page run on into the next (a sentence cut by the page break)?"""
    tail, head = before.rstrip(), after.lstrip()
    if not tail or not head or _ENDS_SENTENCE.search(tail):
        return False
    # An open clause ("..., the", "and") runs on whatever follows; otherwise the next page
    # must not start like a new sentence, heading or list item.
    return bool(_ENDS_OPEN.search(tail)) or head[0].islower()


def _drop_running_lines(texts: list[str]) -> list[str]:
    """Each page without its page-number line and the header/footer lines most pages repeat."""
    pages = [t.strip("\n").split("\n") if t.strip() else [] for t in texts]
    for edge in (0, -1):
        with_text = [lines for lines in pages if lines]
        shapes = Counter(_shape(lines[edge]) for lines in with_text if len(lines[edge]) <= _RUNNING_MAX_CHARS)
        running = {
            shape for shape, n in shapes.items()
            if len(with_text) >= _MIN_PAGES_FOR_RUNNING and n >= _RUNNING_SHARE * len(with_text)
        }
        for lines in pages:
            if lines and (_PAGE_NUMBER.match(lines[edge]) or _shape(lines[edge]) in running):
                lines.pop(edge)
                if lines and _PAGE_NUMBER.match(lines[edge]):  # "Title" then "3" in one footer
                    lines.pop(edge)
    return ["\n".join(lines) for lines in pages]


def _shape(line: str) -> str:
    """A line with its numbers blanked, so "Handbook · page 3" and "Handbook · page 4" compare equal."""
    return re.sub(r"\d+", "#", " ".join(line.split()))
