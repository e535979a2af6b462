"""Citations are attached by the server: the model writes [n], never a link.

`CitationFilter` cleans the model's text while it streams: [n] outside 1..k is dropped
(with the space before it), "[Source 2]" / "[1, 3]" become [2] / [1][3], and anything
that a Markdown or HTML renderer could turn into a link (inline links and images,
autolinks, bare URLs, e-mail addresses, <a> tags) is made inert: the address stays
readable, wrapped in backticks, and no "](" survives. It holds back only what might
still become such a construct (the current word, an unclosed "[" or "<"), so tokens
reach the reader one word behind the model at most.

`render_html` is the one place that turns an answer into links: the [n] of the
citations the reader may see become links to the server's locators; nothing else does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from django.utils.html import escape, format_html

MAX_HOLD = 300  # an unclosed "[" or "<" further back than this is plain text
MAX_PENDING = 4000  # a "word" longer than this is released as it is

_NUMBERS = r"\d{1,3}(?:\s*(?:,|;|&|and)\s*\d{1,3})*"
_PREFIX = r"(?:\^|(?:sources?|src|ref)\s*:?\s*#?)?"
MARKER = re.compile(rf"([ \t]*)\[\s*{_PREFIX}({_NUMBERS})\s*\]", re.I)
MARKER_LABEL = re.compile(rf"^\s*{_PREFIX}({_NUMBERS})\s*$", re.I)
LINK = re.compile(r"!?\[([^\[\]\n]*)\]\(([^()\n]*(?:\([^()\n]*\)[^()\n]*)*)\)")
AUTOLINK = re.compile(r"<((?:[a-z][a-z0-9+.\-]{1,31}:|www\.)[^\s<>]*|[\w.+\-]+@[\w\-]+(?:\.[\w\-]+)+)>", re.I)
LINK_TAG = re.compile(r"</?(?:a|img|area|link)\b[^>\n]*>", re.I)
URL = re.compile(
    r"(?<![\w`/.@\-])((?:[a-z][a-z0-9+.\-]{1,31}://|www\.|mailto:)[^\s<>`\"]+|[\w.+\-]+@[\w\-]+(?:\.[\w\-]+)+)",
    re.I,
)
REFERENCE_DEFINITION = re.compile(r"^(\s{0,3}\[[^\]\n]+\]):", re.M)
TRAILING = ".,;:!?'\""
CODE_SPAN = re.compile(r"`([^`\n]+)`")
HTML_MARKER = re.compile(r"\[(\d{1,3})\]")
LOOKS_LIKE_URL = re.compile(r"^(?:[a-z][a-z0-9+.\-]*://|www\.|mailto:)|@", re.I)


def _inert(url: str) -> str:
    """`url` as text no renderer links: in a code span. Trailing punctuation stays outside."""
    tail = ""
    while url and (url[-1] in TRAILING or (url[-1] in ")]" and url.count("(" if url[-1] == ")" else "[")
                                         < url.count(url[-1]))):
        tail = url[-1] + tail
        url = url[:-1]
    return f"`{url}`{tail}" if url else tail


def _open_construct(buffer: str, opener: str) -> int | None:
    """Where an unclosed `[`..`](`..`)` or `<`..`>` starts near the end of `buffer`, if any."""
    i = buffer.rfind(opener)
    if i < 0 or len(buffer) - i > MAX_HOLD or "\n" in buffer[i:]:
        return None
    tail = buffer[i:]
    if opener == "<":
        return i if ">" not in tail else None
    close = tail.find("]")
    if close < 0:
        return i
    after = tail[close + 1 :]
    if after == "" or (after.startswith("(") and ")" not in after):
        return i  # "[label]" may still be followed by "(url)"
    return None


def _enclosing(buffer: str, cut: int) -> int:
    """`cut`, moved back to the start of a "[...]", "[...](...)" or "<...>" it would split."""
    while True:
        moved = cut
        for opener, closer in (("[", "]"), ("<", ">"), ("](", ")")):
            i = buffer.rfind(opener, 0, moved)
            if i < 0 or moved - i > MAX_HOLD or closer in buffer[i + len(opener) : moved] or "\n" in buffer[i:moved]:
                continue
            if opener == "](":
                i = buffer.rfind("[", 0, i)
            if 0 <= i < moved:
                moved = i
        if moved == cut:
            return cut
        cut = moved


def settled(buffer: str) -> int:
    """How much of `buffer` can be cleaned and sent now: up to the current word or an open construct."""
    cut = re.search(r"\s*\S*\Z", buffer).start()  # type: ignore[union-attr]  # always matches
    for opener in ("[", "<"):
        i = _open_construct(buffer, opener)
        if i is not None:
            cut = min(cut, i)
    cut = _enclosing(buffer, cut)
    while cut > 0 and buffer[cut - 1] in " \t":
        cut -= 1  # a marker dropped later takes the space before it along
    return cut


class CitationFilter:
    """Streams the model's text through the citation and link rules; `cited` keeps first-use order."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.cited: list[int] = []
        self._pending = ""
        self._out: list[str] = []

    @property
    def text(self) -> str:
        return "".join(self._out)

    def feed(self, piece: str) -> str:
        self._pending += piece
        cut = len(self._pending) if len(self._pending) > MAX_PENDING else settled(self._pending)
        if cut <= 0:
            return ""
        ready, self._pending = self._pending[:cut], self._pending[cut:]
        return self._emit(ready)

    def finish(self) -> str:
        ready, self._pending = self._pending, ""
        return self._emit(ready) if ready else ""

    def _emit(self, ready: str) -> str:
        cleaned = self.clean(ready, line_start=not self._out or self._out[-1].endswith("\n"))
        if cleaned:
            self._out.append(cleaned)
        return cleaned

    def clean(self, text: str, *, line_start: bool = True) -> str:
        """Apply the rules to a complete stretch of text (no construct cut in two); `line_start`: whether the
        stretch starts a line (a stretch that starts at "[3]:" mid-line is a citation before a colon, not a
        reference definition)."""
        text = LINK.sub(self._link, text)
        text = AUTOLINK.sub(lambda m: _inert(m.group(1)), text)
        text = LINK_TAG.sub("", text)
        text = URL.sub(lambda m: _inert(m.group(1)), text)
        text = MARKER.sub(self._marker, text)
        text = text.replace("](", "] (")  # whatever is left can never form an inline link
        return REFERENCE_DEFINITION.sub(
            lambda m: m.group() if m.start() == 0 and not line_start else f"{m.group(1)} :", text)

    def _link(self, match: re.Match[str]) -> str:
        label, target = match.group(1).strip(), match.group(2).strip()
        if MARKER_LABEL.match(label):
            return f"[{label}]"  # "[1](http://...)": the number is the citation, the server links it
        url = target.split()[0].strip("<>") if target else ""
        if not url:
            return label
        return f"{label} ({_inert(url)})" if label else _inert(url)

    def _marker(self, match: re.Match[str]) -> str:
        numbers = [int(n) for n in re.findall(r"\d+", match.group(2))]
        keep = [n for n in dict.fromkeys(numbers) if 1 <= n <= self.k]
        if not keep:
            return ""
        for n in keep:
            if n not in self.cited:
                self.cited.append(n)
        return match.group(1) + "".join(f"[{n}]" for n in keep)


class Linkable(Protocol):
    @property
    def link(self) -> str: ...
    @property
    def label(self) -> str: ...


# Private-use characters mark where an unsupported sentence starts and ends while the text is
# escaped and linked; no answer keeps them (they are removed from the text first).
_OPEN, _CLOSE, _END = "\ue000", "\ue001", "\ue002"
_NOTE = re.compile(f"{_CLOSE}([0-9,]*){_END}")


def _mark_unsupported(text: str, unsupported: Sequence[Mapping[str, Any]]) -> str:
    text = text.translate({ord(_OPEN): None, ord(_CLOSE): None, ord(_END): None})
    for claim in sorted(unsupported, key=lambda c: -c["start"]):
        a, b = claim["start"], claim["end"]
        numbers = ",".join(str(n) for n in claim["numbers"])
        text = f"{text[:a]}{_OPEN}{text[a:b]}{_CLOSE}{numbers}{_END}{text[b:]}"
    return text


def _note(match: re.Match[str]) -> str:
    sources = " ".join(f"[{n}]" for n in match.group(1).split(",") if n)
    return str(format_html('</span> <small class="unsupported-note">not found in source {}</small>', sources))


def render_html(text: str, citations: Mapping[int, Linkable],
                unsupported: Sequence[Mapping[str, Any]] = ()) -> str:
    """Safe HTML for an answer: escaped text, [n] linked to the server's locator, code spans inert, and each
    unsupported sentence (chat.claim_support) underlined subtly with "not found in source [n]" after it."""
    html: str = escape(_mark_unsupported(text, unsupported))

    def marker(match: re.Match[str]) -> str:
        citation = citations.get(int(match.group(1)))
        if citation is None:
            return ""  # a source the reader may not see (or never had) is not shown at all
        return str(format_html('<a class="cite" href="{}" title="{}">[{}]</a>', citation.link, citation.label,
                               match.group(1)))

    def code(match: re.Match[str]) -> str:
        inner = match.group(1)  # already escaped
        css = ' class="inert-url"' if LOOKS_LIKE_URL.search(inner) else ""
        return f"<code{css}>{inner}</code>"

    html = CODE_SPAN.sub(code, html)
    html = HTML_MARKER.sub(marker, html)
    html = html.replace(_OPEN, '<span class="unsupported" title="The cited source does not say this">')
    html = _NOTE.sub(_note, html)
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", html) if p.strip()]
    return "".join(f"<p>{p.replace(chr(10), '<br>')}</p>" for p in paragraphs)
