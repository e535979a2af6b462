"""Issue 12 item 2: extraction and the viewer stay linear in the length of a crafted line.

A heading line with a long blank run inside its title, or a line of unmatched `[a`,
`**a` or growing backtick runs, used to cost time quadratic in the line's length
(1.6 s for 10,000 blanks; 21.5 s for one viewer request), holding a worker or the whole
Daphne process meanwhile.
"""

from __future__ import annotations

import pytest

from kb.library.ingest import headings
from kb.library.ingest.extract import MARKDOWN, PLAIN, Extracted, extract
from kb.library.models import Document
from kb.library.viewer import render_document
from tests.robust.scaling import assert_linear


def markdown(text: str) -> Extracted:
    return extract(data=text.encode(), mime=MARKDOWN, filename="x.md")


def plain(text: str) -> Extracted:
    return extract(data=text.encode(), mime=PLAIN, filename="x.txt")


def view(text: str) -> object:
    """Ingest's part (locating the headings) and the page's part (rendering), timed together."""
    located = headings.stored(headings.locate(text=text, mime=MARKDOWN))
    return render_document(Document(title="x", canonical_text=text, mime_type=MARKDOWN, headings=located))


def backtick_runs(n: int) -> str:
    """Runs of 1, 2, 3, … backticks, none closed: about n characters."""
    parts: list[str] = []
    k = 1
    while sum(map(len, parts)) < n:
        parts.append("`" * k + " a ")
        k += 1
    return "".join(parts)


EXTRACT_CASES = {
    "atx heading with a blank run": lambda n: markdown("# a" + " " * n + "b\n"),
    "atx heading of blanks and hashes": lambda n: markdown("# " + " #" * (n // 2) + "x\n"),
    "trac heading with a blank run": lambda n: plain("== a" + " " * n + "b ==\n"),
    "heading id braces": lambda n: markdown("# a" + " {#" * (n // 3) + "\n"),
    "front matter title": lambda n: markdown("---\ntitle: a" + " " * n + "b\n---\nbody\n"),
}

VIEW_CASES = {
    "growing backtick runs": lambda n: view(backtick_runs(n)),
    "unclosed links": lambda n: view("[a" * (n // 2)),
    "unclosed images": lambda n: view("![a" * (n // 3)),
    "links sharing one bracket": lambda n: view("[a" * (n // 2) + "](" + "x" * 50),
    "unclosed bold": lambda n: view("**a " * (n // 4)),
    "heading with a blank run": lambda n: view("# a" + " " * n + "b\n"),
}


@pytest.mark.parametrize("case", EXTRACT_CASES)
def test_extraction_is_linear(case: str) -> None:
    assert_linear(EXTRACT_CASES[case], 2_000)


@pytest.mark.parametrize("case", VIEW_CASES)
def test_viewer_is_linear(case: str) -> None:
    assert_linear(VIEW_CASES[case], 2_000)


def test_headings_keep_their_words() -> None:
    got = markdown("# Install   guide ##\n\n## Setup {#setup}\n\n### C# tips #\n").headings
    assert [h.title for h in got] == ["Install guide", "Setup", "C# tips"]
    got = plain("== Install ==  #install\n\n=== Notes ===\n").headings
    assert [h.title for h in got] == ["Install", "Notes"]
