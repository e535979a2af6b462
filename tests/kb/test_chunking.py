"""Chunking by the heading tree within the token budget, with the real tokenizer and the eval corpus."""

from __future__ import annotations

import itertools
import json
import re
import statistics
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from kb.library.ingest.chunking import MAX_TOKENS, MIN_TOKENS, OVERLAP_TOKENS, Draft, format_header, split
from kb.library.ingest.extract import MARKDOWN, Extracted, Heading, Page, detect_mime, extract
from kb.text.tokens import WINDOW, PieceIndex, count_tokens

# The demo evaluation set ships in the repository, so these tests always run.
EVAL = Path(__file__).resolve().parents[2] / "demo" / "eval"
CORPUS = EVAL / "corpus"

Corpus = dict[str, tuple[Extracted, list[Draft]]]  # corpus path -> (extraction, chunks)


def md(text: str) -> Extracted:
    return extract(data=text.encode(), mime=MARKDOWN, filename="doc.md")


def norm(text: str) -> str:
    return " ".join(text.split())


def check_invariants(extracted: Extracted, drafts: list[Draft], *, max_tokens: int = MAX_TOKENS) -> None:
    assert [d.ordinal for d in drafts] == list(range(len(drafts)))
    for d in drafts:
        assert d.content == extracted.text[d.start : d.end]
        assert d.content == d.content.strip() and d.content
        assert d.text.endswith("\n" + d.content) and d.text.startswith("[")
        assert d.tokens == count_tokens(d.text) <= max_tokens
        assert (d.part is None) == (d.parts is None) == (d.group is None) == (d.kind != "part")
        assert re.fullmatch(r"[0-9a-f]{32}", d.stable_id)
    assert len({d.stable_id for d in drafts}) == len(drafts)


def sentences(words: int, *, seed: str) -> str:
    """A paragraph of distinct sentences, about `words` words long."""
    out: list[str] = []
    n = 0
    while sum(len(s.split()) for s in out) < words:
        n += 1
        out.append(f"The {seed} sentence number {n} explains one more detail about the filter bar and its fields.")
    return " ".join(out)


# --------------------------------------------------------------------------- the eval corpus


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    out = {}
    for path in sorted(CORPUS.rglob("*.*")):
        data = path.read_bytes()
        extracted = extract(data=data, mime=detect_mime(filename=path.name, head=data[:4096]), filename=path.name)
        out[str(path.relative_to(CORPUS))] = (extracted, split(extracted, title=extracted.title or path.stem))
    return out


def test_every_chunk_quotes_its_exact_span_and_fits_the_budget(corpus: Corpus) -> None:
    for extracted, drafts in corpus.values():
        check_invariants(extracted, drafts)
        assert drafts


def test_no_answer_is_destroyed_by_chunking(corpus: Corpus) -> None:
    """Each eval needle must be whole inside some chunk's content (after whitespace normalisation)."""
    questions = [json.loads(line) for line in (EVAL / "questions.jsonl").read_text().splitlines()]
    needles = {q["gt"]: (q["doc"], q["needle"]) for q in questions}
    destroyed = [
        gt for gt, (doc, needle) in needles.items() if not any(needle in norm(d.content) for d in corpus[doc][1])
    ]
    drafts = [d for _, ds in corpus.values() for d in ds]
    tokens = [d.tokens for d in drafts]
    print(
        f"\nanswers destroyed: {len(destroyed)} of {len(needles)} {destroyed}"
        f"\nchunks: {len(drafts)} over {len(corpus)} documents; tokens mean {statistics.mean(tokens):.1f}, "
        f"max {max(tokens)} (budget {MAX_TOKENS}, window {WINDOW}); kinds {dict(Counter(d.kind for d in drafts))}"
    )
    assert destroyed == []
    assert max(tokens) <= MAX_TOKENS < WINDOW


def test_pdf_chunks_never_span_two_pages(corpus: Corpus) -> None:
    for name in ("everyone/handbook-welcome-and-workplace.pdf", "finance/supplier-invoice-processing.pdf"):
        extracted, drafts = corpus[name]
        pages = {p.number: p for p in extracted.pages}
        assert {d.page for d in drafts} == set(pages)
        for d in drafts:
            assert pages[d.page].start <= d.start < d.end <= pages[d.page].end


def test_parts_over_the_corpus_are_numbered_and_grouped(corpus: Corpus) -> None:
    groups: dict[str, list[Draft]] = defaultdict(list)
    for _, drafts in corpus.values():
        for d in drafts:
            if d.group:
                groups[d.group].append(d)
    assert groups
    for parts in groups.values():
        assert [d.part for d in parts] == list(range(1, len(parts) + 1))
        assert {d.parts for d in parts} == {len(parts)} and len({d.breadcrumb for d in parts}) == 1
        assert all(a.start < b.start and a.end < b.end for a, b in itertools.pairwise(parts))


def test_a_smaller_budget_still_holds_everywhere(corpus: Corpus) -> None:
    for name in ("hr/remote-work-and-travel-abroad.html", "finance/month-end-close.md", "everyone/handbook-welcome-and-workplace.pdf"):
        extracted, _ = corpus[name]
        check_invariants(extracted, split(extracted, title="t", max_tokens=64), max_tokens=64)


# --------------------------------------------------------------------------- the heading tree

TREE = f"""---
title: Shipments
---

Intro before any heading. {sentences(30, seed="intro")}

## Filters

{sentences(60, seed="filters")}

### Carrier field

Type a carrier name.

### Status menu

{sentences(60, seed="status")}

#### Closed status

{sentences(60, seed="closed")}

## Exports

{sentences(60, seed="exports")}
"""


def test_each_section_is_a_chunk_with_its_breadcrumb() -> None:
    extracted = md(TREE)
    drafts = split(extracted, title="Shipments guide")
    check_invariants(extracted, drafts)
    got = [(d.kind, d.breadcrumb) for d in drafts]
    assert got == [
        ("note", ("Shipments guide",)),
        ("merged", ("Shipments guide", "Filters")),
        ("subsection", ("Shipments guide", "Filters", "Status menu")),
        ("subsection", ("Shipments guide", "Filters", "Status menu", "Closed status")),
        ("section", ("Shipments guide", "Exports")),
    ]
    for d in drafts:
        assert d.text == format_header(d.breadcrumb) + "\n" + d.content
        assert d.page is None
    note, merged, status, closed, exports = drafts
    assert note.content.startswith("---\ntitle: Shipments\n---\n\nIntro before any heading.")
    # The short subsection joined its parent; its heading line stays in the quoted content.
    assert merged.content.startswith("The filters sentence number 1")
    assert merged.content.endswith("### Carrier field\n\nType a carrier name.")
    # A section's own heading line is in the breadcrumb, not in its content.
    assert status.content.startswith("The status sentence") and "Status menu" not in status.content
    assert closed.content.startswith("The closed sentence")
    assert exports.end == len(extracted.text.rstrip())


def test_a_lone_h1_is_the_title_and_its_text_a_note() -> None:
    text = f"# Shipments guide\n\nA short intro.\n\n## Filters\n\n{sentences(50, seed='b')}\n\n### Carrier\n\nShort.\n"
    drafts = split(md(text), title="Shipments guide")
    assert [(d.kind, d.breadcrumb, d.content[:14]) for d in drafts] == [
        ("note", ("Shipments guide",), "A short intro."),  # not repeated as "Shipments guide > Shipments guide"
        ("merged", ("Shipments guide", "Filters"), "The b sentence"),
    ]
    titled = split(md(text), title="guide.md")
    assert [d.breadcrumb for d in titled] == [
        ("guide.md", "Shipments guide"),
        ("guide.md", "Shipments guide", "Filters"),
    ]


def test_short_siblings_merge_under_their_parent() -> None:
    text = (
        f"## Intro\n\n{sentences(20, seed='intro')}\n\n"
        f"## Options\n\n{sentences(250, seed='options')}\n\n"  # too long to take a child in
        "### indent\n\nThe number of spaces for indentation.\n\n"
        "### locale\n\nThe locale used for numbers.\n"
    )
    extracted = md(text)
    drafts = split(extracted, title="Fava")
    check_invariants(extracted, drafts)
    assert [(d.kind, d.breadcrumb) for d in drafts if d.kind != "part"] == [
        ("section", ("Fava", "Intro")),
        ("merged", ("Fava", "Options")),
    ]
    assert drafts[-1].content == (
        "### indent\n\nThe number of spaces for indentation.\n\n### locale\n\nThe locale used for numbers."
    )
    assert count_tokens("The number of spaces for indentation.") < MIN_TOKENS


def test_a_parent_with_a_one_line_intro_absorbs_its_first_child() -> None:
    text = f"## Leave\n\nTalk to your supervisor.\n\n### Annual leave\n\n{sentences(60, seed='annual')}\n"
    drafts = split(md(text), title="HR")
    assert [(d.kind, d.breadcrumb) for d in drafts] == [("merged", ("HR", "Leave"))]
    assert drafts[0].content.startswith("Talk to your supervisor.\n\n### Annual leave\n\nThe annual")


def test_front_matter_alone_is_not_a_chunk_and_empty_sections_are_skipped() -> None:
    text = f"---\nid: x\ntitle: X\n---\n\n## Empty\n\n## Body\n\n{sentences(50, seed='body')}\n\n## Blank\n\n   \n\n"
    drafts = split(md(text), title="X")
    assert [(d.kind, d.breadcrumb) for d in drafts] == [("section", ("X", "Body"))]
    assert split(md(""), title="X") == [] and split(md(" \n\n\t\n"), title="X") == []


def test_text_without_headings_is_one_note() -> None:
    extracted = md("  \n\nJust a short note.\n\n")
    [draft] = split(extracted, title="Memo")
    assert (draft.kind, draft.breadcrumb, draft.content) == ("note", ("Memo",), "Just a short note.")
    assert (draft.start, draft.end) == (4, 22)


# --------------------------------------------------------------------------- the token budget pass


def test_an_oversized_paragraph_is_cut_at_sentence_ends() -> None:
    paragraph = sentences(600, seed="long")
    extracted = md(f"## Big\n\n{paragraph}\n")
    drafts = split(extracted, title="Doc")
    check_invariants(extracted, drafts)
    assert len(drafts) > 3 and all(d.kind == "part" for d in drafts)
    for d in drafts:
        assert d.content.startswith("The long sentence number") and d.content.endswith("fields.")
    for sentence in re.findall(r"The long sentence number \d+ [^.]*\.", paragraph):
        assert any(sentence in d.content for d in drafts)


def test_paragraphs_are_not_cut_when_they_fit() -> None:
    paragraphs = [sentences(40, seed=f"p{i}") for i in range(12)]
    extracted = md("## Many\n\n" + "\n\n".join(paragraphs) + "\n")
    drafts = split(extracted, title="Doc")
    check_invariants(extracted, drafts)
    own = [d.content for d in drafts]
    for p in paragraphs:
        assert any(p in c for c in own)  # every paragraph is whole in some part


def test_parts_are_numbered_share_a_group_and_overlap_by_whole_sentences() -> None:
    paragraphs = [sentences(70, seed=f"p{i}") for i in range(8)]
    extracted = md("## Many\n\n" + "\n\n".join(paragraphs) + "\n\n## Next\n\nShort.\n")
    drafts = split(extracted, title="Doc")
    check_invariants(extracted, drafts)
    parts = [d for d in drafts if d.breadcrumb == ("Doc", "Many")]
    n = len(parts)
    assert n > 2
    assert [(d.kind, d.part, d.parts) for d in parts] == [("part", i, n) for i in range(1, n + 1)]
    assert len({d.group for d in parts}) == 1
    overlapping = 0
    for a, b in itertools.pairwise(parts):
        assert a.start < b.start < a.end or b.start >= a.end
        if b.start < a.end:
            overlapping += 1
            repeated = extracted.text[b.start : a.end]
            assert repeated.startswith("The ") and repeated.endswith(".")  # whole sentences
            assert count_tokens(repeated) - 2 <= OVERLAP_TOKENS
    assert overlapping == n - 1
    assert drafts[-1].kind == "section" and drafts[-1].group is None


def test_a_sentence_longer_than_the_budget_is_cut_between_words() -> None:
    words = " ".join(f"word{i}" for i in range(500))
    extracted = md(f"Intro.\n\n{words}\n")
    drafts = split(extracted, title="Doc")
    check_invariants(extracted, drafts)
    text = extracted.text
    for d in drafts:
        assert text[d.start - 1].isspace() and (d.end == len(text) or text[d.end].isspace())
    assert {w for d in drafts for w in d.content.split()} >= set(words.split())


def test_one_enormous_word_is_cut_hard_but_stays_within_the_budget() -> None:
    blob = "path/" * 600  # no whitespace, but ~1200 word-pieces (a run of 100+ letters would be one [UNK])
    extracted = md(blob)
    drafts = split(extracted, title="Doc")
    check_invariants(extracted, drafts)
    assert len(drafts) > 5
    assert "".join(d.content for d in drafts) == blob  # contiguous, and no overlap inside a word


def test_densely_tokenized_scripts_still_fit() -> None:
    extracted = md("## 한국어\n\n" + "각간갈 " * 400 + "\n\n" + "x-" * 400)  # ~3 pieces per Hangul syllable
    drafts = split(extracted, title="Doc")
    check_invariants(extracted, drafts)
    assert len(drafts) > 10


def test_long_breadcrumbs_are_shortened_in_the_header_not_in_the_breadcrumb() -> None:
    long = "A remarkably long heading that keeps going with many words about the settings screen"
    text = "".join(f"{'#' * level} {long} level {level}\n\n" for level in range(1, 7)) + "The only sentence.\n"
    extracted = md(text)
    [draft] = split(extracted, title=f"{long} document title", max_tokens=80)
    assert draft.breadcrumb[-1] == f"{long} level 6" and len(draft.breadcrumb) == 7
    header = draft.text.split("\n", 1)[0]
    assert "…" in header and header != format_header(draft.breadcrumb)
    assert draft.tokens <= 80 and draft.content == "The only sentence."


def test_pages_split_sections_and_set_the_page() -> None:
    page1, page2 = "First page text. It is short.", "Second page text."
    text = f"{page1}\n\n{page2}"
    extracted = Extracted(
        text=text,
        headings=(),
        pages=(Page(1, 0, len(page1)), Page(2, len(page1) + 2, len(text))),
        warnings=(),
        title=None,
    )
    drafts = split(extracted, title="Scan")
    check_invariants(extracted, drafts)
    assert [(d.page, d.content, d.part, d.parts) for d in drafts] == [(1, page1, 1, 2), (2, page2, 2, 2)]


def test_a_budget_over_the_model_window_is_refused() -> None:
    with pytest.raises(ValueError, match="window"):
        split(md("x"), title="t", max_tokens=WINDOW + 1)


# --------------------------------------------------------------------------- identity


def test_stable_ids_survive_an_edit_elsewhere_in_the_document() -> None:
    before = md(TREE)
    after = md(TREE.replace("The exports sentence number 2 ", "The exports sentence number two "))
    old, new = split(before, title="Guide"), split(after, title="Guide")
    assert len(old) == len(new)
    changed = [(a.breadcrumb, a.stable_id == b.stable_id) for a, b in zip(old, new, strict=True)]
    assert changed == [(d.breadcrumb, d.breadcrumb[-1] != "Exports") for d in old]
    # Moving text around changes offsets but not the ids of the unchanged chunks.
    shifted = split(md(TREE.replace("Intro before", "A longer intro, written later, before")), title="Guide")
    assert [d.stable_id for d in shifted][1:] == [d.stable_id for d in old][1:]
    assert [d.start for d in shifted][1:] != [d.start for d in old][1:]


def test_identical_sections_get_distinct_ids() -> None:
    body = sentences(50, seed="same")
    drafts = split(md(f"## Same\n\n{body}\n\n## Same\n\n{body}\n"), title="Doc")
    assert len(drafts) == 2 and drafts[0].stable_id != drafts[1].stable_id


# --------------------------------------------------------------------------- tokens


def test_count_tokens_includes_special_tokens_and_never_truncates() -> None:
    assert count_tokens("") == 2
    assert count_tokens("hello world") == 4
    assert count_tokens("hello " * 1000) == 1002  # the shipped tokenizer.json would stop at 128


def test_a_custom_counter_is_honoured() -> None:
    extracted = md("## A\n\n" + "\n\n".join(sentences(20, seed=f"s{i}") for i in range(10)))
    drafts = split(extracted, title="Doc", max_tokens=60, count=lambda s: len(s.split()))
    assert all(len(d.text.split()) == d.tokens <= 60 for d in drafts)


def test_heading_objects_from_other_extractors_are_accepted() -> None:
    text = "Title line\n\nBody of the only section."
    extracted = Extracted(text=text, headings=(Heading(1, "Title line", 0, 10),), pages=(), warnings=(), title=None)
    [draft] = split(extracted, title="Doc")
    assert (draft.breadcrumb, draft.content) == (("Doc", "Title line"), "Body of the only section.")


# A stretch that tokenizes in every awkward way: accents the normalizer strips, CJK characters
# it splits one by one, words WordPiece cuts into several pieces, punctuation runs, a URL,
# a word over WordPiece's 100-character limit, and abbreviations that end no sentence.
AWKWARD = (
    "Naïve café owners, e.g. Zoë, état-major; unaffable uncharacteristically 東京都の設定. "
    "See https://example.com/a/b?c=d&e=f#g (approx. 3 mins) — “quoted”, it's done!!! "
    + "x" * 120 + " Dr. Müller wrote: 'St. Louis' vs. Ås. "
)


def test_one_tokenization_per_segment_counts_every_span_like_the_tokenizer() -> None:
    text = AWKWARD + sentences(40, seed="k") + "\n\n" + AWKWARD
    index = PieceIndex(text, 0, len(text))
    # Every piece boundary (between words, and between two pieces of one word) and some
    # offsets inside pieces; spans between them, sampled.
    from kb.text.embedding import tokenizer

    offsets = tokenizer().encode(text, add_special_tokens=False).offsets
    bounds = sorted({0, len(text), *(a for a, _ in offsets), *(b for _, b in offsets), *range(1, len(text), 13)})
    counted = unknown = 0
    for start, end in itertools.islice(itertools.combinations(bounds, 2), 0, None, 37):
        pieces = index.pieces(start, end)
        if pieces is None:
            unknown += 1
            continue
        counted += 1
        assert pieces == count_tokens(text[start:end]) - 2, (start, end, text[start:end])
    assert counted > 500 and unknown > 500  # both kinds of span were tried


def test_the_fast_count_cuts_exactly_like_counting_every_span() -> None:
    """The chunker counts a long section from one tokenization; a counter it cannot shortcut
    (any other callable) tokenizes every candidate span. Both must cut the same chunks."""
    body = "\n\n".join(AWKWARD + sentences(90, seed=f"p{i}") for i in range(8))
    extracted = md(f"# Title\n\n## Long section\n\n{body}\n\n## One huge paragraph\n\n{body.replace(chr(10), ' ')}\n")
    fast = split(extracted, title="Doc", max_tokens=120)
    exact = split(extracted, title="Doc", max_tokens=120, count=lambda s: count_tokens(s))
    assert len(fast) > 20
    assert fast == exact
    check_invariants(extracted, fast, max_tokens=120)
