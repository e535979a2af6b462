"""Markdown and plain text (and Trac wiki text, whose `== Title ==` headings plain text may use): kept exactly
as written; only the headings are located."""

from __future__ import annotations

import re
from collections.abc import Iterator

from kb.library.ingest.canonical import MARKDOWN, PLAIN, Extracted, Heading, ReadOptions, decode, reads

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



@reads(MARKDOWN)
def read_markdown(data: bytes, name: str, options: ReadOptions) -> Extracted:
    return _extract_text(decode(data, name), markdown=True)


@reads(PLAIN)
def read_plain(data: bytes, name: str, options: ReadOptions) -> Extracted:
    return _extract_text(decode(data, name), markdown=False)


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
