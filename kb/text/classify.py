"""Screen vs concept: does a chunk (or a question) point at a place in a user interface?

A weighted lexicon of UI vocabulary and question patterns rather than a model: it is
cheap at ingest, the same for chunks and queries, and an admin can read why a chunk
got its label. Pure Python: no Django.
"""

from __future__ import annotations

import math
import re

SCREEN, CONCEPT = "screen", "concept"
LABELS = (SCREEN, CONCEPT)


def _lexicon(entries: dict[str, float]) -> list[tuple[re.Pattern[str], float]]:
    return [(re.compile(rf"(?<![\w-])(?:{pattern})(?![\w-])", re.IGNORECASE), w) for pattern, w in entries.items()]


# Words that name UI widgets or the act of operating them. Weights: how rarely the word
# means anything else in documentation ("click" almost never; "field" or "page" often).
_UI_WORDS = _lexicon(
    {
        r"(?:double-|right-|left-)?click(?:s|ed|ing)?": 3.0,
        r"buttons?": 3.0,
        r"check ?box(?:es)?|radio buttons?|toggles?": 3.0,
        r"drop-?down(?: lists?| menus?)?|pull-?down|combo ?box": 3.0,
        r"(?:sub)?menus?|menu ?bar|context menu": 3.0,
        r"dialog(?:ue)?s?(?: box(?:es)?)?|pop-?ups?|modal": 3.0,
        r"tool ?bars?|side ?bars?|nav(?:igation)? ?bar|status bar|title bar": 3.0,
        r"tabs?": 2.0,
        r"icons?": 2.0,
        r"text ?box(?:es)?|search box|input box|text area": 2.5,
        r"drag(?:ging)?(?: and | ?& ?)drop|drag(?:ged|ging)?": 2.0,
        r"hover(?:ing)?|scroll(?:ing)?(?: down| up)?|tooltip": 2.0,
        r"panels?|panes?|(?-i:windows?)|screens?": 1.5,  # lower case: "Windows" is an OS
        r"fields?|forms?|links?|columns? headers?": 1.0,
        r"select(?:s|ed|ing)?|choose|pick|tick|untick|uncheck": 1.0,
        r"(?:top|bottom|upper|lower)[- ](?:left|right)(?: corner)?|on the (?:left|right)|at the (?:top|bottom)": 2.0,
        r"greyed|grayed|highlighted|disabled": 1.0,
        r"preferences|settings page|settings screen|preview": 1.5,
        r"page|view|grid|label(?:led|ed)?": 0.5,
    }
)

# Question shapes that ask *where* something is on screen rather than how or why it works.
_SCREEN_QUESTION = _lexicon(
    {
        r"where (?:is|are|do|does|can|should|would|'s|in|on)": 2.5,
        r"where do i click|where to click|where can i find": 3.0,
        r"(?:which|what) (?:field|button|menu|tab|checkbox|link|icon|column|box|screen|page|dialog|window|panel)s?": (
            3.0
        ),
        r"(?:which|what) (?:option|setting|item|entry)s?": 1.5,
        r"how (?:do|can|would|should) i": 1.0,  # a procedure: in a product's docs, often done on screen
        r"appear(?:s|ed)?|shown|displayed|show up|visible|under which name|called in": 1.0,
        r"how (?:do|can|would) i (?:find|get to|open|reach|navigate to|access|see|get back|leave|close|switch)": 2.0,
        r"can'?t find|cannot find|could not find|don'?t see|doesn'?t show|not shown|is hidden|missing from": 2.0,
        r"in the (?:ui|gui|web ui|interface|web interface)|on the (?:screen|page)": 2.0,
    }
)

# Things a question points at on screen in data-heavy apps. Query-side only: in a chunk
# "rows" and "cells" are as often about data as about the interface.
_UI_QUERY_NOUNS = _lexicon({r"(?:data )?grid|rows?|cells?|table|sidebar|toolbar": 1.0})

# Shapes of questions about meaning, behaviour or reasons.
_CONCEPT_QUESTION = _lexicon(
    {
        r"why": 2.0,
        r"what (?:is|are|does|do|happens|means?)|what's": 1.5,
        r"how (?:does|do|is|are) (?!i\b)\w+": 1.5,
        r"explain|difference|meaning|purpose|recommended|should i use|when (?:should|does|is|do)": 1.5,
        r"is it (?:possible|safe)|does it|can it|support(?:s|ed)?": 1.0,
    }
)

_WORD = re.compile(r"\w+")
_SCREEN_THRESHOLD = 2.5  # query evidence needed to call a question a screen question


_MARKUP = re.compile(r"</?[A-Za-z][^<>]*>")  # HTML/JSX tags (<Tabs>, <TabItem>) are not prose


def _score(text: str, lexicon: list[tuple[re.Pattern[str], float]]) -> float:
    text = _MARKUP.sub(" ", text)
    return sum(w * len(p.findall(text)) for p, w in lexicon)


def classify_chunk(*, text: str, default: str | None = None) -> str:
    """SCREEN when the chunk walks through a UI (widgets and where to click), else CONCEPT.

    `default` is an admin's setting for the whole document and wins when given.
    """
    if default is not None:
        if default not in LABELS:
            raise ValueError(f"unknown chunk type {default!r} (expected one of {LABELS})")
        return default
    score = _score(text, _UI_WORDS)
    words = max(len(_WORD.findall(text)), 40)  # short chunks are not judged on a handful of words
    # Both an absolute amount of UI talk and a density: a long concept text mentioning one
    # button in passing stays a concept.
    return SCREEN if score >= 6.0 and score * 100 / words >= 5.0 else CONCEPT


def classify_query(query: str) -> tuple[str, float]:
    """(SCREEN or CONCEPT, confidence in 0..1). Unsure means CONCEPT with a low confidence."""
    screen = _score(query, _SCREEN_QUESTION) + min(_score(query, _UI_WORDS) + _score(query, _UI_QUERY_NOUNS), 4.0)
    concept = _score(query, _CONCEPT_QUESTION)
    margin = screen - concept
    if margin >= _SCREEN_THRESHOLD:
        return SCREEN, round(min(0.95, 0.6 + 0.35 * math.tanh((margin - _SCREEN_THRESHOLD) / 3)), 2)
    # No evidence either way is 0.55; concept cues (or screen ones) move it up (or down).
    return CONCEPT, round(min(0.95, max(0.5, 0.55 + 0.1 * (concept - max(screen, 0.0)))), 2)
