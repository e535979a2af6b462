"""HTML to Markdown-like text that keeps the heading tree: block elements become paragraphs, `<h1>`-`<h6>`
become `#` headings, navigation and scripts are left out, meaningful images stay as references."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from kb.library.ingest.canonical import (
    HTML,
    MAX_HTML_CHARS,
    Block,
    Extracted,
    ExtractionError,
    ReadOptions,
    decode,
    heading_block,
    join_blocks,
    newlines,
    reads,
)

if TYPE_CHECKING:  # BeautifulSoup is imported where used: a Markdown upload need not load it
    from bs4.element import PageElement, Tag

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
        code = newlines(raw).strip("\n").rstrip()
        code = re.sub(r"\n[ \t]*\n(?:[ \t]*\n)+", "\n\n", code)
        if code.strip():
            self.blocks.append(Block(text=code))


@reads(HTML)
def read_html(data: bytes, name: str, options: ReadOptions) -> Extracted:
    return _extract_html(decode(data, name), name)


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
