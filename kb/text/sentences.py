"""Where sentences end, in any script: one splitter for the chunker's cuts, the extractive answer and the citations.

A sentence ends at . ! ? … (plus closing quotes and brackets) followed by whitespace and a character that can
start a sentence, unless the word before the stop is an abbreviation ("e.g.", "z.B.", "bzw.", "Nr.", "np.",
"tzn.", "ul.") or the stop makes a number an ordinal ("1. Januar", "3. maja": a lower-case word after it cannot
start a sentence, and a month name after "1." is a date). Chinese and Japanese end a sentence at 。！？ (full
width), with no space after it.
"""

from __future__ import annotations

import re

_CLOSING = "\"'”’)\\]»」』）】"
_END = re.compile(rf"[.!?…][{_CLOSING}]*\s+|[。！？][{_CLOSING}]*\s*")
# Abbreviations that end in a stop without ending the sentence: English, German, Polish (case-insensitive).
ABBREVIATIONS = frozenset("""
    e.g i.e etc vs cf approx incl no fig mr mrs ms dr st jr sr
    z.b bzw usw ca nr d.h u.a evtl ggf inkl vgl str hr fr prof abs bzgl gem sog s.o s.u u.u z.t
    np tzn ul tj itd itp m.in godz ok tel wg zob pkt ust art al pl nt ds mgr inż
""".split())
MONTHS = frozenset("""
    january february march april may june july august september october november december
    januar jänner februar märz april mai juni juli august september oktober november dezember
    stycznia lutego marca kwietnia maja czerwca lipca sierpnia września października listopada grudnia
""".split())
_WORD_BEFORE = re.compile(r"(?:^|[\s(\[\"'“‘])([^\s(\[\"'“‘]+)$")
_WORD_AFTER = re.compile(r"[^\s.,;:!?]+")


def _starts_sentence(c: str) -> bool:
    return c.isupper() or c.isdigit() or (c != "" and c in "\"'“‘„«([*`_$<") or _is_cjk(c)


def _is_cjk(c: str) -> bool:
    return c != "" and ("\u3040" <= c <= "\u30ff" or "\u3400" <= c <= "\u9fff" or "\uac00" <= c <= "\ud7af")


def _continues(text: str, stop: int, after: int) -> bool:
    """Whether the stop at `stop` ends an abbreviation or an ordinal rather than the sentence (`after`: where
    the next sentence would start)."""
    if text[stop] != ".":
        return False
    before = _WORD_BEFORE.search(text, max(0, stop - 24), stop)
    word = before.group(1) if before else ""
    if word.lower() in ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
        return True
    if word.isdigit() and len(word) <= 2:
        following = _WORD_AFTER.match(text, after)
        return bool(following and following.group().lower() in MONTHS)
    return False


def sentence_starts(text: str) -> list[int]:
    """The offsets in `text` where a sentence after the first starts, in order."""
    starts = []
    for m in _END.finditer(text):
        after = m.end()
        if after >= len(text):
            continue
        cjk = m.group()[0] in "。！？"
        if cjk or (_starts_sentence(text[after]) and not _continues(text, m.start(), after)):
            starts.append(after)
    return starts


def split(text: str) -> list[str]:
    """`text` as its sentences, each stripped, none empty."""
    bounds = [0, *sentence_starts(text), len(text)]
    return [piece for a, b in zip(bounds, bounds[1:], strict=False) if (piece := text[a:b].strip())]


# A list item's marker: a bullet, or a number with a stop or bracket ("3.", "3)").
BULLET = re.compile(r"^\s*(?:[-*+•]|\d{1,2}[.)])\s+")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s")
INTRODUCES = (":", "：")  # a sentence ending so introduces a list, a command or code that follows


def introduced(text: str) -> str:
    """The block at the start of `text` that a sentence ending in a colon introduces: a code fence whole,
    a list's items (across blank lines between them), else the next paragraph; with the blank lines before
    it. A fence left open, or a block running to the end of `text`, loses its unfinished last line: the
    block is read from a window, and a half-quoted command is worse than none."""
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i == len(lines) or _HEADING.match(lines[i]):
        return ""
    if lines[i].strip().startswith("```"):
        for j in range(i + 1, len(lines)):
            if lines[j].strip().startswith("```"):
                return "".join(lines[: j + 1])
        return ""
    listed = bool(BULLET.match(lines[i]))
    j = i
    while j < len(lines) and not _HEADING.match(lines[j]):
        if not lines[j].strip():
            k = j
            while k < len(lines) and not lines[k].strip():
                k += 1
            if not (listed and k < len(lines) and BULLET.match(lines[k])):
                return "".join(lines[:j])
            j = k
            continue
        j += 1
    if j == len(lines) and not text.endswith("\n"):
        j -= 1  # the window cut the last line
    return "".join(lines[:j]) if j > i else ""
