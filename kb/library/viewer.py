"""The document page: a document's canonical text as safe HTML, with its headings, pages and highlight.

The viewer must let a citation `#char=start,end` (offsets into Document.canonical_text)
land on exactly the quoted characters. So the text is never re-flowed through a
Markdown library: it is cut into blocks and inline spans *by offset*, every character
is emitted (escaped) exactly once and in order, and Markdown syntax is kept in the DOM
inside hidden spans. The rendered element's textContent is therefore the canonical
text itself, and a range of it can be highlighted on the server (`?hl=`) or in the
browser (viewer.js) by counting characters.

Nothing in the text becomes markup of its own: tags, event-handler attributes and
`javascript:` links in a document stay visible text. The only elements produced are
ours; links get an href only for http(s)/mailto URLs, images a src only for https:
(and data:image/) URLs, loaded lazily when the viewer shows them.

Headings come from `Document.headings`, located once at ingest (kb.library.ingest.headings); the
page never runs the extractor.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

from kb.library.ingest import extract, headings
from kb.library.ingest.formats.text import FRONT_MATTER
from kb.library.inline import Span, inline_spans
from kb.library.models import Document


@dataclass(frozen=True)
class TocEntry:
    level: int
    title: str
    anchor: str


@dataclass(frozen=True)
class RenderedText:
    html: SafeString
    toc: tuple[TocEntry, ...]
    highlighted: bool


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_LIST = re.compile(r"^([ \t]*)([-*+]|\d{1,9}[.)])([ \t]+|$)")
_QUOTE = re.compile(r"^ {0,3}> ?", re.MULTILINE)  # MULTILINE: ^ must also hold at match(text, pos)
_TABLE = re.compile(r"^ {0,3}\|")
_TABLE_SEP = re.compile(r"^ {0,3}\|?(?:[ \t]*:?-{2,}:?[ \t]*\|)+(?:[ \t]*:?-{2,}:?[ \t]*)?$")
_HR = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_ATX_MARK = re.compile(r"^ {0,3}#{1,6}(?:[ \t]+|$)", re.MULTILINE)
_DATA_IMAGE = re.compile(r"^data:image/(?:png|jpeg|gif|webp);base64,[A-Za-z0-9+/=]+$")
_HEADING_TAGS = {1: "h2", 2: "h3", 3: "h4", 4: "h5", 5: "h6", 6: "h6"}  # the page's own h1 is the title


def _lit(html: str) -> SafeString:
    """A fixed piece of our own markup (a string literal, never data)."""
    return mark_safe(html)  # noqa: S308


def _safe_href(url: str) -> bool:
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    if parts.scheme.lower() in {"http", "https"}:
        return bool(parts.netloc)
    return parts.scheme.lower() == "mailto" and bool(parts.path)


def _safe_image(url: str) -> bool:
    """Images load from elsewhere at display time; only over https (the CSP allows no more)."""
    if _DATA_IMAGE.match(url):
        return True
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme.lower() == "https" and bool(parts.netloc)


class _Out:
    """Our markup (already safe) interleaved with [start, end) ranges of the text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.parts: list[SafeString | tuple[int, int]] = []

    def tag(self, html: SafeString) -> None:
        self.parts.append(html)

    def leaf(self, start: int, end: int) -> None:
        if end > start:
            self.parts.append((start, end))

    def hidden(self, start: int, end: int) -> None:
        """Syntax that stays in the text (offsets depend on it) but is not shown."""
        if end > start:
            self.tag(_lit('<span class="md">'))
            self.leaf(start, end)
            self.tag(_lit("</span>"))

    def html(self, highlight: tuple[int, int] | None) -> SafeString:
        a, b = highlight if highlight else (-1, -1)
        open_mark, close_mark = _lit('<mark class="hl">'), _lit("</mark>")
        out: list[str] = []
        for part in self.parts:
            if not isinstance(part, tuple):
                out.append(part)
                continue
            start, end = part
            if b <= start or a >= end:
                out.append(escape(self.text[start:end]))
                continue
            lo, hi = max(start, a), min(end, b)
            out += [escape(self.text[start:lo]), open_mark, escape(self.text[lo:hi]), close_mark, escape(self.text[hi:end])]
        # Every piece is format_html()/_lit() markup or escape()d text, so the whole is safe.
        return mark_safe("".join(out))  # noqa: S308


def _lines(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """(start, end) of each line in text[start:end], without the newline."""
    lines = []
    pos = start
    while pos <= end:
        nl = text.find("\n", pos, end)
        stop = end if nl < 0 else nl
        lines.append((pos, stop))
        if nl < 0:
            break
        pos = nl + 1
    return lines


class _Renderer:
    def __init__(self, text: str, *, located: Sequence[extract.Heading], structured: bool) -> None:
        self.text = text
        self.out = _Out(text)
        self.headings = {h.start: h for h in located}
        self.structured = structured
        self.toc: list[TocEntry] = []

    # ---- blocks

    def blocks(self, start: int, end: int) -> None:
        text, out = self.text, self.out
        cursor = start
        front = FRONT_MATTER.match(text) if self.structured and start == 0 else None
        if front and front.end() <= end:  # YAML metadata: kept (offsets), shown as such
            body_end = front.end() - 1 if text[front.end() - 1 : front.end()] == "\n" else front.end()
            out.tag(_lit('<div class="doc-code doc-front">'))
            out.leaf(0, body_end)
            out.tag(_lit("</div>"))
            cursor = body_end
        lines = _lines(text, cursor, end)
        i = 0
        while i < len(lines):
            s, e = lines[i]
            line = text[s:e]
            if not line.strip():
                i += 1
                continue
            out.leaf(cursor, s)  # the blank lines between blocks: collapsed whitespace in the DOM
            if self.structured:
                i, cursor = self.structured_block(lines, i)
            else:
                j = self._paragraph_end(lines, i, plain=True)
                self.paragraph(s, lines[j - 1][1])
                i, cursor = j, lines[j - 1][1]
        out.leaf(cursor, end)

    def structured_block(self, lines: list[tuple[int, int]], i: int) -> tuple[int, int]:
        """Render the block starting at line i; returns (next line index, end offset)."""
        text = self.text
        s, e = lines[i]
        line = text[s:e]
        heading = self.headings.get(s)
        if heading is not None and heading.end <= lines[-1][1]:
            self.heading(heading)
            j = i
            while j < len(lines) and lines[j][0] < heading.end:
                j += 1
            return j, heading.end
        if fence := _FENCE.match(line):
            return self.code(lines, i, fence.group(1))
        if _LIST.match(line):
            return self.listing(lines, i)
        if _QUOTE.match(line):
            j = self._run(lines, i, _QUOTE)
            self.quote(lines[i:j])
            return j, lines[j - 1][1]
        if _TABLE.match(line):
            j = self._run(lines, i, _TABLE)
            self.table(lines[i:j])
            return j, lines[j - 1][1]
        if _HR.match(line):
            self.out.tag(_lit('<div class="doc-hr">'))
            self.out.hidden(s, e)
            self.out.tag(_lit("</div>"))
            return i + 1, e
        j = self._paragraph_end(lines, i, plain=False)
        self.paragraph(s, lines[j - 1][1])
        return j, lines[j - 1][1]

    def _run(self, lines: list[tuple[int, int]], i: int, pattern: re.Pattern[str]) -> int:
        j = i
        while j < len(lines) and pattern.match(self.text[lines[j][0] : lines[j][1]]):
            j += 1
        return j

    def _starts_block(self, s: int, line: str) -> bool:
        return bool(
            s in self.headings or _FENCE.match(line) or _LIST.match(line) or _QUOTE.match(line) or _TABLE.match(line)
        )

    def _paragraph_end(self, lines: list[tuple[int, int]], i: int, *, plain: bool) -> int:
        j = i + 1
        while j < len(lines):
            s, e = lines[j]
            line = self.text[s:e]
            if not line.strip() or (not plain and self._starts_block(s, line)):
                break
            j += 1
        return j

    def paragraph(self, start: int, end: int) -> None:
        self.out.tag(_lit('<p class="doc-p">'))
        if self.structured:
            self.inline(start, end)
        else:
            self.out.leaf(start, end)
        self.out.tag(_lit("</p>"))

    def heading(self, h: extract.Heading) -> None:
        anchor = f"sec-{h.start}"
        level = max(1, min(h.level, 6))
        self.toc.append(TocEntry(level=level, title=h.title, anchor=anchor))
        tag = _HEADING_TAGS[level]
        self.out.tag(format_html('<{} class="doc-h doc-h{}" id="{}">', tag, level, anchor))
        first_end = self.text.find("\n", h.start, h.end)
        if first_end < 0:  # ATX: "## Title"
            mark = _ATX_MARK.match(self.text, h.start, h.end)
            body = mark.end() if mark else h.start
            self.out.hidden(h.start, body)
            self.inline(body, h.end)
        else:  # setext: the title line, then its underline
            self.inline(h.start, first_end)
            self.out.hidden(first_end, h.end)
        self.out.tag(format_html("</{}>", tag))

    def code(self, lines: list[tuple[int, int]], i: int, fence: str) -> tuple[int, int]:
        text, out = self.text, self.out
        s, e = lines[i]
        j = i + 1
        while j < len(lines):
            stripped = text[lines[j][0] : lines[j][1]].strip()
            if stripped.startswith(fence) and not stripped.strip(fence[0]):
                break
            j += 1
        out.tag(_lit('<div class="doc-code">'))
        if j < len(lines):  # closed: the fences are syntax, what lies between is the code
            close_s, close_e = lines[j]
            body_s, body_e = min(e + 1, close_s), max(close_s - 1, e + 1)
            out.hidden(s, body_s)
            out.leaf(body_s, body_e)
            out.hidden(body_e, close_e)
            end, nxt = close_e, j + 1
        else:  # unclosed: code to the end of the range, as CommonMark does
            end = lines[-1][1]
            out.hidden(s, min(e + 1, end))
            out.leaf(min(e + 1, end), end)
            nxt = len(lines)
        out.tag(_lit("</div>"))
        return nxt, end

    def listing(self, lines: list[tuple[int, int]], i: int) -> tuple[int, int]:
        text, out = self.text, self.out
        j = i
        items: list[tuple[re.Match[str], int, int]] = []  # marker match, item start, item end
        while j < len(lines):
            s, e = lines[j]
            line = text[s:e]
            if not line.strip() or (j > i and (s in self.headings or _FENCE.match(line))):
                break
            m = _LIST.match(line)
            if m:
                items.append((m, s, e))
            else:  # a continuation line of the current item
                m0, s0, _ = items[-1]
                items[-1] = (m0, s0, e)
            j += 1
        out.tag(_lit('<div class="doc-list">'))
        prev = items[0][1]
        for m, s, e in items:
            out.leaf(prev, s)
            indent = min(len(m.group(1).expandtabs(4)) // 2, 4)
            bullet = m.group(2) in {"-", "*", "+"}
            out.tag(format_html('<div class="doc-li {} doc-indent-{}">', "doc-bullet" if bullet else "doc-numbered", indent))
            marker_end = s + m.end()
            if bullet:
                out.hidden(s, marker_end)
            else:
                out.hidden(s, s + m.end(1))
                out.tag(_lit('<span class="doc-num">'))
                out.leaf(s + m.end(1), marker_end)
                out.tag(_lit("</span>"))
            self.inline(marker_end, e)
            out.tag(_lit("</div>"))
            prev = e
        out.tag(_lit("</div>"))
        return j, items[-1][2]

    def quote(self, lines: Sequence[tuple[int, int]]) -> None:
        out = self.out
        out.tag(_lit('<blockquote class="doc-quote">'))
        prev = lines[0][0]
        for s, e in lines:
            out.leaf(prev, s)
            m = _QUOTE.match(self.text, s, e)
            body = m.end() if m else s
            out.hidden(s, body)
            self.inline(body, e)
            prev = e
        out.tag(_lit("</blockquote>"))

    def table(self, lines: Sequence[tuple[int, int]]) -> None:
        out, text = self.out, self.text
        header = len(lines) > 1 and bool(_TABLE_SEP.match(text[lines[1][0] : lines[1][1]]))
        out.tag(_lit('<div class="doc-table-wrap"><table class="doc-table"><tbody>'))
        prev = lines[0][0]
        for row, (s, e) in enumerate(lines):
            out.leaf(prev, s)
            prev = e
            if _TABLE_SEP.match(text[s:e]):
                out.tag(_lit('<tr class="doc-table-sep"><td>'))
                out.hidden(s, e)
                out.tag(_lit("</td></tr>"))
                continue
            cell = "th" if header and row == 0 else "td"
            pipes = [k for k in range(s, e) if text[k] == "|" and (k == s or text[k - 1] != "\\")]
            trailing = text[pipes[-1] + 1 : e].strip() == ""
            bounds = list(zip(pipes, [*pipes[1:], e], strict=True))
            if trailing and len(bounds) > 1:
                bounds = bounds[:-1]
            out.tag(_lit("<tr>"))
            for n, (p, q) in enumerate(bounds):
                out.tag(format_html("<{}>", cell))
                out.hidden(s if n == 0 else p, p + 1)  # indentation and the pipe before the cell
                self.inline(p + 1, q)
                if n == len(bounds) - 1 and q < e:
                    out.hidden(q, e)  # the closing pipe
                out.tag(format_html("</{}>", cell))
            out.tag(_lit("</tr>"))
        out.tag(_lit("</tbody></table></div>"))

    # ---- inline

    def inline(self, start: int, end: int) -> None:
        out = self.out
        pos = start
        for span in inline_spans(self.text, start, end):
            out.leaf(pos, span.start)
            pos = span.end
            if span.kind == "img":
                self.image(span)
                continue
            if span.kind == "url":
                if _safe_href(span.target):
                    out.tag(format_html('<a href="{}" rel="nofollow noopener noreferrer" target="_blank">', span.target))
                    out.leaf(span.start, span.end)
                    out.tag(_lit("</a>"))
                else:
                    out.leaf(span.start, span.end)
                continue
            if span.kind == "link" and not _safe_href(span.target):
                out.leaf(span.start, span.end)  # shown as written, never followed
                continue
            opening, closing = {
                "code": (_lit("<code>"), _lit("</code>")),
                "bold": (_lit("<strong>"), _lit("</strong>")),
                "link": (format_html('<a href="{}" rel="nofollow noopener noreferrer" target="_blank">', span.target),
                         _lit("</a>")),
            }[span.kind]
            out.tag(opening)
            out.hidden(span.start, span.inner_start)
            out.leaf(span.inner_start, span.inner_end)
            out.hidden(span.inner_end, span.end)
            out.tag(closing)
        out.leaf(pos, end)

    def image(self, span: Span) -> None:
        out, src, alt = self.out, span.target, self.text[span.inner_start : span.inner_end]
        if not _safe_image(src):
            out.tag(format_html('<span class="doc-imgref" title="{}">', "Image not shown: only https images are displayed"))
            out.leaf(span.start, span.end)
            out.tag(_lit("</span>"))
            return
        out.tag(_lit('<span class="doc-figure">'))
        out.tag(format_html('<img src="{}" alt="{}" loading="lazy" decoding="async" referrerpolicy="no-referrer">', src, alt))
        out.hidden(span.start, span.inner_start)
        out.tag(_lit('<span class="doc-caption">'))
        out.leaf(span.inner_start, span.inner_end)
        out.tag(_lit("</span>"))
        out.hidden(span.inner_end, span.end)
        out.tag(_lit("</span>"))


def _page_ranges(pages: Any, length: int) -> list[tuple[int, int]]:
    """The stored [start, end) of each page, or [] when absent or not a clean partition."""
    ranges: list[tuple[int, int]] = []
    pos = 0
    for item in pages or []:
        try:
            start, end = int(item[0]), int(item[1])
        except (TypeError, ValueError, IndexError):
            return []
        if not pos <= start <= end <= length:
            return []
        ranges.append((start, end))
        pos = end
    return ranges


def parse_range(value: str | None, length: int) -> tuple[int, int] | None:
    """`"a,b"` as a non-empty [a, b) inside a text of `length` characters, else None."""
    if not value:
        return None
    match = re.fullmatch(r"\s*(\d{1,12})\s*,\s*(\d{1,12})\s*", value)
    if not match:
        return None
    a, b = int(match.group(1)), int(match.group(2))
    return (a, b) if 0 <= a < b <= length else None


def render_document(document: Document, *, highlight: tuple[int, int] | None = None) -> RenderedText:
    """The canonical text as HTML whose textContent is exactly the canonical text."""
    text = document.canonical_text or ""
    renderer = _Renderer(
        text, located=headings.loaded(document.headings, len(text)), structured=document.mime_type != extract.PDF
    )
    pages = _page_ranges(document.pages, len(text))
    out = renderer.out
    if pages:
        pos = 0
        for number, (start, end) in enumerate(pages, start=1):
            out.leaf(pos, start)
            out.tag(format_html('<section class="doc-page" id="page-{}" data-page="{}">', number, number))
            renderer.blocks(start, end)
            out.tag(_lit("</section>"))
            pos = end
        out.leaf(pos, len(text))
    else:
        renderer.blocks(0, len(text))
    return RenderedText(html=out.html(highlight), toc=tuple(renderer.toc), highlighted=highlight is not None)


def page_of(document: Document, offset: int) -> int | None:
    """The 1-based page holding `offset`, for paged sources."""
    return page_in(document.pages, len(document.canonical_text or ""), offset)


def page_in(pages: Any, length: int, offset: int) -> int | None:
    """The 1-based page holding `offset`, from a document's stored `pages` and its text's length."""
    for number, (start, end) in enumerate(_page_ranges(pages, length), start=1):
        if start <= offset < end or (offset == end and start == end):
            return number
    return None
