"""Inline Markdown spans (code, images, links, bold, bare URLs) found in linear time.

One alternation regex over a line re-scanned the rest of the line from every backtick run,
`[` and `**` that had no partner, so a line of repeated `[a` or growing backtick runs
took time quadratic in its length, on every viewer request. Here each partner is found
once: backtick runs are paired by a right-to-left pass, `]` and `**` by pointers that
only move forward, and the `(target)` after a `]` is parsed once per `]`.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

Kind = Literal["code", "img", "link", "bold", "url"]

_START = re.compile(r"[`!\[*]|\bhttps?://")
_TICKS = re.compile(r"`+")
_DOUBLE_STAR = re.compile(r"\*(?=\*)")
_TARGET = re.compile(r"\((?P<target>[^()\s]+)(?:[ \t]+\"[^\"\n]*\")?\)")
_URL = re.compile(r"https?://[^\s<>()\[\]\"']+[^\s<>()\[\]\"'.,;:!?]")


@dataclass(frozen=True)
class Span:
    """[start, end) of the whole construct; [inner_start, inner_end) is what is shown
    (code text, image alt, link label, bold text, the URL itself)."""

    kind: Kind
    start: int
    end: int
    inner_start: int
    inner_end: int
    target: str = ""  # href of a link, src of an image, the URL of a bare URL


def inline_spans(text: str, start: int, end: int) -> Iterator[Span]:
    """The spans in text[start:end], left to right, never overlapping; none crosses a line."""
    line_start = start
    while line_start < end:
        line_end = text.find("\n", line_start, end)
        if line_end < 0:
            line_end = end
        yield from _LineScanner(text, line_start, line_end).spans()
        line_start = line_end + 1


class _LineScanner:
    def __init__(self, text: str, start: int, end: int) -> None:
        self.text, self.start, self.end = text, start, end
        # Each backtick run closes at the next run of the same length (CommonMark code spans).
        runs = [(m.start(), m.end()) for m in _TICKS.finditer(text, start, end)]
        self.code_close: dict[int, tuple[int, int]] = {}
        self.run_end = dict(runs)
        later: dict[int, tuple[int, int]] = {}
        for run in reversed(runs):
            length = run[1] - run[0]
            if length in later:
                self.code_close[run[0]] = later[length]
            later[length] = run
        # `**` may close bold where a non-blank precedes it.
        self.bold_close = [
            m.start() for m in _DOUBLE_STAR.finditer(text, start, end)
            if m.start() > start and not text[m.start() - 1].isspace()
        ]
        self.next_bracket = -2  # position of the next `]` at or after the scan position; -1: none left
        self.targets: dict[int, re.Match[str] | None] = {}

    def spans(self) -> Iterator[Span]:
        text, end = self.text, self.end
        pos = self.start
        while (found := _START.search(text, pos, end)) is not None:
            at = found.start()
            span = self.span_at(at)
            if span is not None:
                yield span
                pos = span.end
            else:
                pos = self.run_end.get(at, at + 1)  # an unmatched backtick run is text as a whole

    def span_at(self, at: int) -> Span | None:
        char = self.text[at]
        if char == "`":
            return self.code(at)
        if char == "!":
            return self.bracketed(at, at + 1, "img")
        if char == "[":
            return self.bracketed(at, at, "link")
        if char == "*":
            return self.bold(at)
        return self.url(at)

    def code(self, at: int) -> Span | None:
        opened_to = self.run_end.get(at)
        close = self.code_close.get(at)
        if opened_to is None or close is None:
            return None
        return Span("code", at, close[1], opened_to, close[0])

    def bracketed(self, at: int, bracket: int, kind: Kind) -> Span | None:
        text = self.text
        if bracket >= self.end or text[bracket] != "[":
            return None
        if self.next_bracket != -1 and self.next_bracket <= bracket:
            self.next_bracket = text.find("]", bracket + 1, self.end)
        close = self.next_bracket
        if close < 0 or (kind == "link" and close == bracket + 1):
            return None
        if close not in self.targets:
            self.targets[close] = _TARGET.match(text, close + 1, self.end)
        target = self.targets[close]
        if target is None:
            return None
        return Span(kind, at, target.end(), bracket + 1, close, target.group("target"))

    def bold(self, at: int) -> Span | None:
        text = self.text
        if not text.startswith("**", at) or at + 2 >= self.end or text[at + 2].isspace():
            return None
        n = bisect.bisect_left(self.bold_close, at + 3)
        if n == len(self.bold_close):
            return None
        close = self.bold_close[n]
        return Span("bold", at, close + 2, at + 2, close)

    def url(self, at: int) -> Span | None:
        m = _URL.match(self.text, at, self.end)
        return Span("url", at, m.end(), at, m.end(), m.group()) if m else None
