"""The model writes [n]; the server decides what it means and never turns the model's URLs into links."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from chat.citations import CitationFilter, render_html
from chat.prompts import Source, build_prompt
from kb.text.classify import CONCEPT, SCREEN


def streamed(pieces: list[str], k: int) -> tuple[list[str], CitationFilter]:
    stream = CitationFilter(k)
    out = [stream.feed(p) for p in pieces]
    out.append(stream.finish())
    return [o for o in out if o], stream


def clean_text(text: str, *, k: int) -> tuple[str, list[int]]:
    """The whole text through the filter at once: cleaned text and the numbers it cites."""
    stream = CitationFilter(k)
    stream.feed(text)
    stream.finish()
    return stream.text, stream.cited


def test_a_number_outside_the_sources_is_dropped_with_its_space() -> None:
    text, cited = clean_text("The dialog has two tabs [2]. Rows are emailed [7]. Both [1, 7] and [Source 3].", k=4)
    assert text == "The dialog has two tabs [2]. Rows are emailed. Both [1] and [3]."
    assert cited == [2, 1, 3]


def test_a_marker_split_across_tokens_is_judged_whole() -> None:
    out, stream = streamed(["Rows are", " emailed", " [", "7", "]", " and", " kept [", "1", "].", " Done"], k=4)
    assert stream.text == "Rows are emailed and kept [1]. Done"
    assert "[7" not in "".join(out) and stream.cited == [1]


@pytest.mark.parametrize(
    "written",
    [
        "see https://evil.example/login now",
        "see [the portal](https://evil.example/login) now",
        "see <https://evil.example/login> now",
        "see www.evil.example/login now",
        "see <a href=\"https://evil.example/login\">the portal</a> now",
        "mail admin@evil.example now",
        "see ![x](https://evil.example/pixel.png) now",
    ],
)
def test_a_model_written_url_is_never_a_link(written: str) -> None:
    # Token by token, as a model streams it, the address cut at awkward places.
    pieces = [written[i : i + 3] for i in range(0, len(written), 3)]
    out, stream = streamed(pieces, k=2)
    text = stream.text
    assert "".join(out) == text
    assert "](" not in text and "<a" not in text and "<http" not in text
    for url in re.findall(r"(?:https://|www\.)\S+|\S+@\S+", text):
        assert url.startswith("`") or text[text.index(url) - 1] == "`", text
    html = render_html(text, {})
    assert "<a " not in html and "href" not in html
    if "<a href" not in written:  # a tag is dropped whole; any other address stays readable, as text
        assert "evil.example" in html


def test_a_model_link_on_a_citation_keeps_only_the_number() -> None:
    text, cited = clean_text("Open the Export dialog [1](https://evil.example).", k=2)
    assert text == "Open the Export dialog [1]."
    assert cited == [1]


def test_html_links_only_the_servers_citations() -> None:
    @dataclass
    class C:
        link: str
        label: str

    html = render_html('Use <b>Export</b> [1] and [2].\n\nSee `www.x.example`.', {1: C("/documents/4/#char=0,9", "Doc > A")})
    assert '<a class="cite" href="/documents/4/#char=0,9" title="Doc &gt; A">[1]</a>' in html
    assert "[2]" not in html
    assert "&lt;b&gt;Export&lt;/b&gt;" in html
    assert '<code class="inert-url">www.x.example</code>' in html
    assert html.startswith("<p>") and html.count("<p>") == 2


def source(number: int, text: str, label: str = "Doc > Section", parts: int = 1) -> Source:
    return Source(number=number, chunk_id=number, document_id=1, document_title="Doc", label=label, text=text,
                  start=0, end=len(text), page=None, distance=0.3, parts=parts)


def test_the_prompt_is_markdown_with_role_task_confidence_tone_and_numbered_sources() -> None:
    prompt = build_prompt(question="Where is the Export button?", intent=SCREEN,
                          sources=[source(1, "The Export button is at the top right."),
                                   source(2, "Part one.\nPart two ``` trick", parts=3)],
                          earlier=["What is a shipment?"])
    for heading in ("# Role", "# Task", "# Confidence and gaps", "# Tone"):
        assert heading in prompt.system
    assert "cite every claim" in prompt.system.lower() and "only the numbered sources" in prompt.system.lower()
    assert "say plainly" in prompt.system.lower()
    assert "exact field, button" in prompt.system  # the screen variant: literal, where and what
    assert "## [1] Doc > Section" in prompt.user and "## [2] Doc > Section" in prompt.user
    assert "one section in 3 parts, reassembled" in prompt.user
    assert "````text\nPart one.\nPart two ``` trick\n````" in prompt.user  # a source cannot close its fence
    assert prompt.user.index("# Earlier questions") < prompt.user.index("# Question")
    assert "http" not in prompt.markdown  # no link for the model to copy
    concept = build_prompt(question="Why do exports get emailed?", intent=CONCEPT, sources=[source(1, "x")])
    assert "explain the idea" in concept.system and "exact field, button" not in concept.system
    assert [m["role"] for m in concept.messages] == ["system", "user"]


def test_a_citation_before_a_colon_mid_line_stays_as_written_and_a_reference_definition_is_defused() -> None:
    # Streamed so that a stretch starts at "[3]:": it is mid-line, a citation before a colon.
    _, stream = streamed(["Copy the position into the record later", " [3]:", "\n`ctl promote` [3]"], k=3)
    assert stream.text == "Copy the position into the record later [3]:\n`ctl promote` [3]"
    # At the start of a line, "[1]: https://…" would be a Markdown reference definition: it is broken up.
    text, _ = clean_text("Intro [1].\n[1]: https://evil.example/x", k=3)
    assert "\n[1] :" in text
