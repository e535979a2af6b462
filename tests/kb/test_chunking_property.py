"""Property: whatever Markdown comes in, every chunk quotes its exact span and fits the budget."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kb.library.ingest.chunking import MAX_TOKENS, split
from kb.library.ingest.extract import MARKDOWN, extract

WORDS = st.sampled_from(
    "the a retry queue carrier invoice LMN-E4012 dispatcher.retry.max_attempts Überweisung naïve 数据 "
    "click Export button e.g. 3.5 --force (see) [link](https://x.test) `code` **bold** — …".split()
)
PARAGRAPH = st.lists(st.lists(WORDS, min_size=1, max_size=30).map(" ".join), min_size=1, max_size=12).map(". ".join)
HEADING = st.tuples(st.integers(1, 4), st.lists(WORDS, min_size=1, max_size=6).map(" ".join)).map(
    lambda t: "#" * t[0] + " " + t[1]
)
LIST = st.lists(st.lists(WORDS, min_size=1, max_size=15).map(" ".join), min_size=1, max_size=6).map(
    lambda items: "\n".join(f"- {item}" for item in items)
)
FENCE = st.lists(WORDS, min_size=1, max_size=20).map(lambda ws: "```\n" + " ".join(ws) + "\n```")
BLOCK = st.one_of(PARAGRAPH, HEADING, HEADING, LIST, FENCE, st.just(""), PARAGRAPH.map(lambda p: p * 6))
DOCUMENT = st.lists(BLOCK, min_size=1, max_size=25).map(lambda blocks: "\n\n".join(blocks))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DOCUMENT, st.sampled_from(["\n", "\r\n"]))
def test_generated_markdown_always_chunks_exactly(source: str, newline: str) -> None:
    extracted = extract(data=source.replace("\n", newline).encode(), mime=MARKDOWN, filename="gen.md")
    drafts = split(extracted, title="Generated")
    for draft in drafts:
        assert draft.content == extracted.text[draft.start : draft.end]
        assert draft.content.strip()
        assert draft.tokens <= MAX_TOKENS
        assert draft.text.endswith(draft.content)
    assert [d.ordinal for d in drafts] == list(range(len(drafts)))
    body = extracted.text
    for heading in reversed(extracted.headings):  # headings live in breadcrumbs, not in chunks
        body = body[: heading.start] + body[heading.end :]
    if body.strip(" \r\n#`-"):
        assert drafts, "text outside headings produced no chunk"
