"""Cut a canonical text into chunks along its heading tree, within the embedding budget.

Two texts per chunk: `content` is exactly `canonical[start:end]` and is what citations
quote; `text` is a breadcrumb header plus `content` and is what gets embedded. Every
offset is *found* in the canonical text (spans of regex matches, never sums of
lengths), so a quote always points at the place it came from.
Pure Python: no Django, so it can be tested without a database.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from kb.library.ingest.extract import Extracted, Heading
from kb.library.ingest.formats.pages import CONTINUES
from kb.library.ingest.formats.text import FRONT_MATTER
from kb.text.sentences import sentence_starts
from kb.text.tokens import WINDOW, PieceIndex, count_tokens

PIPELINE_VERSION: int = 3  # 2: a chunk may cross a PDF page break where the text runs on; 3: budgets in the tokens of
# the model that embeds the chunk (e5 for languages in the multilingual space; unchanged chunks keep their vectors)

MAX_TOKENS = 200  # budget for `text` (header + content): a safety margin under the 256 window
OVERLAP_TOKENS = 24  # repeated between consecutive parts of one split section (whole sentences)
MIN_TOKENS = 40  # a subsection shorter than this merges with its parent

SECTION, SUBSECTION, MERGED, NOTE, PART = "section", "subsection", "merged", "note", "part"

_ELLIPSIS = "…"
_BALANCE_UP_TO = 8  # parts of one section that are evened out in size

Count = Callable[[str], int]
Span = tuple[int, int]


@dataclass(frozen=True)
class Draft:
    ordinal: int  # 0-based position in the document
    kind: str  # "section" | "subsection" | "merged" | "note" | "part"
    breadcrumb: tuple[str, ...]  # (document title, section, subsection, ...)
    text: str  # header + "\n" + content: what is embedded
    content: str  # == canonical[start:end]: what is quoted
    start: int
    end: int
    page: int | None  # page of `start` for paged sources
    part: int | None  # i (1-based) when split, else None
    parts: int | None  # n when split
    group: str | None  # shared by the parts of one split section
    tokens: int  # count(text)
    stable_id: str  # unchanged across re-ingests while breadcrumb and content are unchanged


def format_header(breadcrumb: tuple[str, ...]) -> str:
    """The header line put in front of `content` in `text` (unless it had to be shortened)."""
    return "[" + " > ".join(breadcrumb) + "]"


def split(
    extracted: Extracted,
    *,
    title: str,
    max_tokens: int = MAX_TOKENS,
    count: Count = count_tokens,
) -> list[Draft]:
    """Chunks of one document, in document order, each with `tokens <= max_tokens`.

    `title` heads every breadcrumb. `count` must count like the embedding model
    (special tokens included); tests may pass a cheaper one.
    """
    if max_tokens > WINDOW:
        raise ValueError(f"max_tokens={max_tokens} exceeds the model window ({WINDOW})")
    cutter = _Cutter(extracted=extracted, max_tokens=max_tokens, count=count)
    drafts: list[Draft] = []
    seen: dict[str, int] = {}
    for unit in _merge_short(_sections(extracted, title=title), cutter):
        for piece in cutter.pieces(unit):
            key = _digest("\x1f".join(unit.breadcrumb), "\x1e", piece.content)
            seen[key] = seen.get(key, 0) + 1  # identical sections in one document stay distinct
            draft = Draft(
                ordinal=len(drafts),
                kind=piece.kind,
                breadcrumb=unit.breadcrumb,
                text=piece.text,
                content=piece.content,
                start=piece.start,
                end=piece.end,
                page=cutter.page_of(piece.start),
                part=piece.part,
                parts=piece.parts,
                group=piece.group,
                tokens=piece.tokens,
                stable_id=_digest(key, str(seen[key]))[:32],
            )
            # Invariants the rest of the system relies on; cheap, so checked always (not `assert`).
            if draft.tokens > max_tokens:
                raise AssertionError(f"chunk {draft.ordinal} has {draft.tokens} tokens > {max_tokens}")
            if extracted.text[draft.start : draft.end] != draft.content or not draft.content.strip():
                raise AssertionError(f"chunk {draft.ordinal} content does not match its span")
            drafts.append(draft)
    return drafts


# --------------------------------------------------------------------------- the heading tree


@dataclass
class _Unit:
    kind: str
    breadcrumb: tuple[str, ...]
    start: int  # where the content may begin (after the heading line)
    end: int
    heading_start: int  # where the heading line begins (== start for the preamble)


def _sections(extracted: Extracted, *, title: str) -> list[_Unit]:
    """The preamble, then one unit per heading: its own text up to the next heading."""
    text = extracted.text
    heads = sorted(extracted.headings, key=lambda h: h.start)
    doc_title = " ".join(title.split())
    first = heads[0].start if heads else len(text)
    # Text before the first heading is a note, unless it is only front matter (metadata, no prose).
    front = FRONT_MATTER.match(text)
    if front is None or text[front.end() : first].strip():
        units = [_Unit(kind=NOTE, breadcrumb=(doc_title,), start=0, end=first, heading_start=0)]
    else:
        units = []
    # A lone h1 that opens the document is its title: its children are the sections, its own text a note.
    title_heading = heads[0] if heads and heads[0].level == 1 and sum(h.level == 1 for h in heads) == 1 else None
    stack: list[Heading] = []
    for i, head in enumerate(heads):
        while stack and stack[-1].level >= head.level:
            stack.pop()
        stack.append(head)
        names = [h.title for h in stack]
        if names and names[0].casefold() == doc_title.casefold():
            names = names[1:]  # "Doc > Doc > Section" says nothing twice
        depth = len(stack) - (1 if stack[0] is title_heading else 0)
        end = heads[i + 1].start if i + 1 < len(heads) else len(text)
        units.append(
            _Unit(
                # The title's own text sits before any section: like the preamble, a note.
                kind=NOTE if head is title_heading else SECTION if depth <= 1 else SUBSECTION,
                breadcrumb=(doc_title, *names),
                start=head.end,
                end=end,
                heading_start=head.start,
            )
        )
    return units


def _merge_short(units: list[_Unit], cutter: _Cutter) -> list[_Unit]:
    """Fold each short subsection into the unit just before it, when that fits the budget.

    Into an ancestor, the merged chunk keeps the ancestor's breadcrumb; with a sibling,
    it takes their parent's breadcrumb and starts at the sibling's heading line. Either
    way the breadcrumb stays true of everything in the chunk, and the headings it does
    not name are in `content`.
    """
    out: list[_Unit] = []
    for unit in units:
        prev = out[-1] if out else None
        if prev is None or prev.end != unit.heading_start or unit.kind == NOTE or prev.kind == NOTE:
            out.append(unit)
            continue
        short = cutter.content_tokens(unit.start, unit.end) < MIN_TOKENS
        parent = unit.breadcrumb[:-1]
        merged = None
        if prev.breadcrumb == unit.breadcrumb[: len(prev.breadcrumb)] and cutter.has_text(prev.start, prev.end):
            # A short subsection joins its parent; so does the first child of a parent that has little to say.
            if (short and unit.kind == SUBSECTION) or cutter.content_tokens(prev.start, prev.end) < MIN_TOKENS:
                merged = _Unit(MERGED, prev.breadcrumb, prev.start, unit.end, prev.heading_start)
        elif short and unit.kind == SUBSECTION and prev.breadcrumb[:-1] == parent:
            merged = _Unit(MERGED, parent, prev.heading_start, unit.end, prev.heading_start)
        if merged is not None and cutter.fits_one(merged.breadcrumb, merged.start, merged.end):
            out[-1] = merged
        else:
            out.append(unit)
    return out


# --------------------------------------------------------------------------- cutting within the budget


@dataclass(frozen=True)
class _Piece:
    kind: str
    text: str
    content: str
    start: int
    end: int
    tokens: int
    part: int | None = None
    parts: int | None = None
    group: str | None = None


_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n\s*")
# A new list item or table row starts a sentence too.
_ITEM_START = re.compile(r"\n[ \t]*(?=[-*+|>]\s|\||\d{1,3}[.)]\s)")
_LINE_BREAK = re.compile(r"\n\s*")
_WORD_BREAK = re.compile(r"\s+")


class _Cutter:
    """Token-aware cutting of spans of one canonical text."""

    def __init__(self, *, extracted: Extracted, max_tokens: int, count: Count) -> None:
        self.text = extracted.text
        self.pages = sorted(extracted.pages, key=lambda p: p.start)
        self.page_starts = [p.start for p in self.pages]
        self.max_tokens = max_tokens
        self.count = count
        self._chars_bound_pieces = count is count_tokens  # the shortcut in fits() is only proven for it
        self._header_counts: dict[str, int] = {}
        self._headers: dict[tuple[str, ...], str] = {}
        self._counts: dict[tuple[str, int, int], int] = {}
        self._index: PieceIndex | None = None  # the segment being cut, tokenized once

    # ---- helpers

    def page_of(self, pos: int) -> int | None:
        if not self.pages:
            return None
        i = bisect.bisect_right(self.page_starts, pos) - 1
        return self.pages[max(i, 0)].number

    def strip(self, start: int, end: int) -> Span:
        """Narrow a span to its first and last non-blank characters (no string editing)."""
        m = re.search(r"\S", self.text[start:end])
        if m is None:
            return start, start
        tail = len(self.text[start:end].rstrip())
        return start + m.start(), start + tail

    def has_text(self, start: int, end: int) -> bool:
        s, e = self.strip(start, end)
        return e > s

    def header(self, breadcrumb: tuple[str, ...]) -> str:
        if breadcrumb not in self._headers:
            self._headers[breadcrumb] = _short_header(breadcrumb, self.count, max(12, self.max_tokens // 4))
        return self._headers[breadcrumb]

    def tokens(self, header: str, start: int, end: int) -> int:
        key = (header, start, end)
        if key not in self._counts:
            # `header + "\n" + content` splits between the two, so its pieces are the header's
            # (with [CLS] and [SEP]) plus the content's.
            pieces = self._index.pieces(start, end) if self._index is not None else None
            if pieces is not None:
                self._counts[key] = self.tokens_of(header) + pieces
            else:
                self._counts[key] = self.count(header + "\n" + self.text[start:end])
        return self._counts[key]

    def fits(self, header: str, start: int, end: int, limit: int | None = None) -> bool:
        limit = limit or self.max_tokens
        # No character yields more than 3 word-pieces (a Hangul syllable splits into its jamo;
        # checked over every code point), so a short span fits without tokenizing it.
        if self._chars_bound_pieces and self.tokens_of(header) + 3 * (end - start) <= limit:
            return True
        return self.tokens(header, start, end) <= limit

    def tokens_of(self, header: str) -> int:
        if header not in self._header_counts:
            self._header_counts[header] = self.count(header)
        return self._header_counts[header]

    def content_tokens(self, start: int, end: int) -> int:
        s, e = self.strip(start, end)
        if e <= s:
            return 0
        pieces = self._index.pieces(s, e) if self._index is not None else None
        return pieces if pieces is not None else self.count(self.text[s:e]) - self.count("")

    def fits_one(self, breadcrumb: tuple[str, ...], start: int, end: int) -> bool:
        s, e = self.strip(start, end)
        return not self.pages and self.fits(self.header(breadcrumb), s, e)

    # ---- one unit → pieces

    def pieces(self, unit: _Unit) -> list[_Piece]:
        header = self.header(unit.breadcrumb)
        segments = [(s, e) for s, e in (self.strip(*seg) for seg in self._page_segments(unit.start, unit.end)) if e > s]
        if not segments:
            return []
        if len(segments) == 1 and self.fits(header, *segments[0]):
            s, e = segments[0]
            return [self._piece(unit.kind, header, s, e)]
        spans = [span for s, e in segments for span in self._parts(header, s, e)]
        group = _digest("group", "\x1f".join(unit.breadcrumb), "\x1e", self.text[unit.start : unit.end])[:16]
        return [
            self._piece(PART, header, s, e, part=(i, len(spans), group)) for i, (s, e) in enumerate(spans, start=1)
        ]

    def _piece(
        self, kind: str, header: str, start: int, end: int, *, part: tuple[int, int, str] | None = None
    ) -> _Piece:
        content = self.text[start:end]
        i, n, group = part if part is not None else (None, None, None)
        return _Piece(
            kind=kind,
            text=header + "\n" + content,
            content=content,
            start=start,
            end=end,
            tokens=self.tokens(header, start, end),
            part=i,
            parts=n,
            group=group,
        )

    def _page_segments(self, start: int, end: int) -> Iterator[Span]:
        """Cut the unit at page breaks between paragraphs; a sentence running across a page stays whole."""
        bounds = [start]
        for before, page in zip(self.pages, self.pages[1:], strict=False):
            if start < page.start < end and self.text[before.end : page.start] != CONTINUES:
                bounds.append(page.start)
        bounds.append(end)
        yield from ((s, e) for s, e in zip(bounds, bounds[1:], strict=False) if s < e)

    def _parts(self, header: str, start: int, end: int) -> list[Span]:
        """Spans of the parts of an over-budget segment, balanced and overlapping a little."""
        if self._chars_bound_pieces:  # a cheaper `count` from a test is called as given
            self._index = PieceIndex(self.text, start, end)
        atoms = self._atoms(header, start, end, level=0)
        greedy = self._pack(header, atoms, self.max_tokens)
        assert greedy is not None  # noqa: S101  (every atom fits alone, so the full budget always packs)
        if not 1 < len(greedy) <= _BALANCE_UP_TO:
            return greedy  # in a long run of parts only the last is short; not worth the passes
        # Even the parts out: the smallest limit that still needs no more parts than greedy.
        lo, hi, best = max(1, self.tokens(header, start, end) // len(greedy)), self.max_tokens, greedy
        while lo < hi:
            mid = (lo + hi) // 2
            packed = self._pack(header, atoms, mid)
            if packed is not None and len(packed) <= len(greedy):
                best, hi = packed, mid
            else:
                lo = mid + 1
        return best

    def _pack(self, header: str, atoms: list[Span], limit: int) -> list[Span] | None:
        """Greedy runs of whole atoms within `limit`; each run after the first starts with overlap."""
        parts: list[Span] = []
        i = 0
        while i < len(atoms):
            if not parts:
                lead = atoms[i][0]
            else:
                lead = self._overlap_start(header, parts[-1], atoms[i], limit)
            if not self.fits(header, lead, atoms[i][1], limit):
                return None
            # The last atom that still fits: gallop, then bisect (fitting is monotone in the end).
            good, step = i, 1
            while good + step < len(atoms) and self.fits(header, lead, atoms[good + step][1], limit):
                good, step = good + step, step * 2
            bad = min(good + step, len(atoms))
            while bad - good > 1:
                mid = (good + bad) // 2
                if self.fits(header, lead, atoms[mid][1], limit):
                    good = mid
                else:
                    bad = mid
            j = good
            parts.append((lead, atoms[j][1]))
            i = j + 1
        return parts

    def _overlap_start(self, header: str, prev: Span, first: Span, limit: int) -> int:
        """Start of the last sentence(s) of `prev` worth repeating before `first`, or `first`'s start."""
        starts = [s for s in self._sentence_starts(*prev) if prev[0] < s < prev[1]]
        if not starts:
            # No sentence structure (PDF columns, lists): lines, but not ones continuing a sentence.
            lines = _LINE_BREAK.finditer(self.text[prev[0] : prev[1]])
            starts = [prev[0] + m.end() for m in lines if not self.text[prev[0] + m.end()].islower()]
        best = first[0]
        for s in sorted(starts, reverse=True):  # the overlap grows as its start moves back
            s, e = self.strip(s, prev[1])
            if e <= s or s <= prev[0]:
                continue
            if self.content_tokens(s, e) > OVERLAP_TOKENS or not self.fits(header, s, first[1], limit):
                break
            best = s
        return best

    def _sentence_starts(self, start: int, end: int) -> list[int]:
        chunk = self.text[start:end]
        out = [start + m.end() for m in _PARAGRAPH_BREAK.finditer(chunk)]
        out += [start + s for s in sentence_starts(chunk)]  # any script's (kb.text.sentences)
        out += [start + m.end() for m in _ITEM_START.finditer(chunk)]
        return sorted(set(out))

    def _atoms(self, header: str, start: int, end: int, *, level: int) -> list[Span]:
        """Pieces that each fit the budget: paragraphs, else sentences, else lines, else words."""
        if level == 0:
            cuts = [start + m.end() for m in _PARAGRAPH_BREAK.finditer(self.text[start:end])]
        elif level == 1:
            cuts = self._sentence_starts(start, end)
        elif level == 2:
            cuts = [start + m.end() for m in _LINE_BREAK.finditer(self.text[start:end])]
        elif level == 3:
            cuts = [start + m.end() for m in _WORD_BREAK.finditer(self.text[start:end])]
        else:
            return self._hard_cut(header, start, end)
        bounds = [start, *[c for c in cuts if start < c < end], end]
        atoms: list[Span] = []
        for s, e in itertools.pairwise(bounds):
            s, e = self.strip(s, e)
            if e <= s:
                continue
            if self.fits(header, s, e):
                atoms.append((s, e))
            else:
                atoms.extend(self._atoms(header, s, e, level=level + 1))
        return atoms

    def _hard_cut(self, header: str, start: int, end: int) -> list[Span]:
        """Last resort for one enormous 'word' (a data URI, a minified line): cut by characters."""
        atoms: list[Span] = []
        s = start
        while s < end:
            # The longest prefix that fits (a single character always does): gallop, then bisect,
            # so a megabyte-long "word" costs a few tokenizer calls per piece, not per character.
            lo, step = s + 1, 256
            while lo < end and self.fits(header, s, min(s + step, end)):
                lo, step = min(s + step, end), step * 2
            hi = min(s + step, end) if lo < end else end
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if self.fits(header, s, mid):
                    lo = mid
                else:
                    hi = mid - 1
            atoms.append((s, lo))
            s = lo
        return atoms


def _short_header(breadcrumb: tuple[str, ...], count: Count, limit: int) -> str:
    """The full header if it is within `limit` tokens, else one with middle levels and words elided."""
    full = format_header(breadcrumb)
    if count(full) <= limit:
        return full
    first, rest = breadcrumb[0], breadcrumb[1:]
    # Keep the document title and the nearest headings; drop the ones in between.
    for keep in range(len(rest) - 1, 0, -1):
        candidate = format_header((first, _ELLIPSIS, *rest[-keep:]))
        if count(candidate) <= limit:
            return candidate
    # Still too long (very long titles): shorten the longest name, word by word.
    names = [first, _ELLIPSIS, rest[-1]] if len(rest) > 1 else list(breadcrumb)
    while count(format_header(tuple(names))) > limit:
        i = max(range(len(names)), key=lambda k: len(names[k]))
        name = names[i].removesuffix(_ELLIPSIS)
        words = name.split()
        if len(words) > 1:
            names[i] = " ".join(words[:-1]) + _ELLIPSIS
        elif len(name) > 1:
            names[i] = name[: len(name) // 2] + _ELLIPSIS
        else:
            return format_header((_ELLIPSIS,))
    return format_header(tuple(names))


def _digest(*parts: str) -> str:
    return hashlib.sha256("".join(parts).encode("utf-8")).hexdigest()
