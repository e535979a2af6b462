"""The viewer's renderer: the HTML's text is the canonical text, character for character."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from kb.library.ingest import headings
from kb.library.models import Document
from kb.library.viewer import parse_range, render_document

SAMPLE = """---
title: Front matter stays text
---
# Shipments guide

Intro with **bold words**, `inline code` and a [link](https://example.com/a?b=1&c=2).
A second line of the same paragraph.

## Filters

- Carrier field: type a name
- Status menu
  - nested item
1. First step
2. Second step

```bash
lumenctl queue stats dispatch.events --by-partition
  indented <not a tag>
```

> A quote that spans
> two lines.

| Field | Meaning |
| ----- | ------- |
| Carrier | who moves it |
| Status | where it is |

---

Setext heading
--------------

![Screen shot of the filter bar](https://img.example.com/filters.png "title")
![relative image](images/local.png)
![tracker](http://insecure.example.com/pixel.gif)
Unicode: caf\u00e9, emoji \U0001F680 and \u4e2d\u6587 survive.
"""

HOSTILE = """# Hostile

<script>window.__pwned = 1</script>
<img src=x onerror="window.__pwned = 2">
[click me](javascript:window.__pwned=3) and [again](JaVaScRiPt:alert(1))
![pic](javascript:alert(1)) ![pic2](https://ok.example.com/x.png" onerror="alert(1))
<a href="javascript:alert(1)">raw anchor</a> <svg onload=alert(1)></svg>
[data](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)
"""


class _Text(HTMLParser):
    """What a browser's textContent would be, plus the tags and attributes it would build."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.marked: list[str] = []
        self._in_mark = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "mark":
            self._in_mark += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "mark":
            self._in_mark -= 1

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in_mark:
            self.marked.append(data)


def parse(html: str) -> _Text:
    parser = _Text()
    parser.feed(html)
    parser.close()
    return parser


def doc(text: str, mime: str = "text/markdown", pages: list[list[int]] | None = None) -> Document:
    """The document as ingestion leaves it: its text with the headings located in it."""
    return Document(
        title="t", canonical_text=text, mime_type=mime, pages=pages or [], status=Document.Status.READY,
        headings=headings.stored(headings.locate(text=text, mime=mime)),
    )


@pytest.mark.parametrize("text", [SAMPLE, HOSTILE, "", "plain", "\n\n# x\n\n", "```\nunclosed fence\n", "| lone |"])
def test_the_rendered_text_is_the_canonical_text(text: str) -> None:
    assert "".join(parse(render_document(doc(text)).html).text) == text


def test_structure_is_rendered_without_changing_the_text() -> None:
    rendered = render_document(doc(SAMPLE))
    tags = [tag for tag, _ in parse(rendered.html).tags]
    for expected in ("h2", "h3", "strong", "code", "a", "blockquote", "table", "th", "td", "img"):
        assert expected in tags, expected
    assert [(e.level, e.title) for e in rendered.toc] == [(1, "Shipments guide"), (2, "Filters"), (2, "Setext heading")]
    assert 'href="https://example.com/a?b=1&amp;c=2"' in rendered.html
    assert '<span class="md"># </span>Shipments guide</h2>' in rendered.html  # syntax kept, but hidden
    assert '<span class="md">&gt; </span>A quote' in rendered.html


def test_only_https_images_are_shown() -> None:
    images = [attrs for tag, attrs in parse(render_document(doc(SAMPLE)).html).tags if tag == "img"]
    assert [i["src"] for i in images] == ["https://img.example.com/filters.png"]
    assert images[0]["loading"] == "lazy" and images[0]["referrerpolicy"] == "no-referrer"


def test_hostile_markup_stays_text() -> None:
    html = render_document(doc(HOSTILE)).html
    parsed = parse(html)
    assert {tag for tag, _ in parsed.tags} <= {"h2", "span", "p", "a", "img", "div"}
    for tag, attrs in parsed.tags:
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        if tag == "a":
            assert attrs["href"].startswith("https://"), attrs
        if tag == "img":
            assert attrs["src"].startswith("https://") and '"' not in attrs["src"], attrs
    assert "&lt;script&gt;" in html and "<script" not in html


def test_pdf_pages_become_sections_and_keep_the_text() -> None:
    text = "Page one line\nsecond line\n\nPage two # not a heading"
    rendered = render_document(doc(text, mime="application/pdf", pages=[[0, 25], [27, len(text)]]))
    parsed = parse(rendered.html)
    assert "".join(parsed.text) == text
    sections = [attrs["data-page"] for tag, attrs in parsed.tags if tag == "section"]
    assert sections == ["1", "2"]
    assert rendered.toc == ()


@pytest.mark.parametrize("start,end", [(0, 5), (120, 260), (300, 420), (len(SAMPLE) - 30, len(SAMPLE))])
def test_a_highlight_marks_exactly_the_range(start: int, end: int) -> None:
    parsed = parse(render_document(doc(SAMPLE), highlight=(start, end)).html)
    assert "".join(parsed.marked) == SAMPLE[start:end]
    assert "".join(parsed.text) == SAMPLE


def test_parse_range_rejects_what_is_outside_the_text() -> None:
    assert parse_range("3,9", 10) == (3, 9)
    assert parse_range("9,3", 10) is None
    assert parse_range("3,11", 10) is None
    assert parse_range("a,b", 10) is None
    assert parse_range(None, 10) is None
