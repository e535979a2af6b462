"""Issue 29 item 1: scoring the sentences of a long source stays linear in its length.

A source can be a whole section reassembled from many split parts (a chapter of a 300-page
PDF manual). Each of its sentences used to be aligned against every chunk of the section, so
the work grew with sentences x chunks: 15 s of one 19.5 s answer went to `_aligned`.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from chat import sentence_scorer
from chat.backends.extractive import units
from chat.prompts import Source
from kb.library.ingest.pipeline import ingest
from kb.library.models import Chunk, Document
from tests.factories import uploaded_document
from tests.robust.scaling import growth

pytestmark = pytest.mark.django_db

SENTENCES = 1_000
SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "sa", "do", "fu")


def long_section(count: int) -> str:
    """One section of `count` different sentences, each with a bold word: its cleaned text ("Set the
    **vo** …" read as "Set the vo …") is no exact run of the chunk, so it is aligned piece by piece."""
    rng = random.Random(29)

    def word() -> str:
        return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))

    lines = [f"Step {n} of the {word()} procedure sets the **{word()}** value to {n * 7} before the "
             f"{word()} check runs on {word()}." for n in range(count)]
    return "# Manual\n\n## Procedures\n\n" + "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def manual(django_db_setup: None, django_db_blocker: Any) -> Iterator[Document]:
    with django_db_blocker.unblock():
        # Its made-up words read as Shona to the language detector: fixed as English (an admin's correction), the
        # section stays in MiniLM's space alone (the multilingual encoder would add a minute of ingest here).
        document = uploaded_document(long_section(SENTENCES), "long-manual.md")
        Document.objects.filter(pk=document.pk).update(language="en", language_fixed=True)
        assert ingest(document.pk) == Document.Status.READY
        document.refresh_from_db()
    yield document
    with django_db_blocker.unblock():
        document.delete()


def scored(document: Document, sentences: int) -> list[Any]:
    """The pieces of the section's first `sentences` sentences, as one source, and their scores."""
    chunks = list(Chunk.objects.filter(document=document).order_by("ordinal"))
    start = chunks[0].start
    text = document.canonical_text
    end = start
    for _ in range(sentences):  # one sentence a line
        end = text.index("Step ", end) + 1
    end = text.find("\n", end) + 1 or len(text)
    src = Source(number=1, chunk_id=chunks[0].pk, document_id=document.pk, document_title=document.title,
                 label="Manual > Procedures", text=text[start:end], start=start, end=end, page=None, distance=0.2)
    texts = [u.text for u in units(1, src.text)]
    located = sentence_scorer.passage_pieces(sentence_scorer.source_chunks([src]), [src], texts, [1] * len(texts),
                                             coarse=True)
    sentence_scorer.sources_scores("Which value does the procedure set?", [src], texts, [1] * len(texts),
                                   [""] * len(texts))
    return [None if at is None else at[0] for at in located]


@pytest.mark.slow
def test_a_thousand_sentence_section_is_scored_in_linear_time(manual: Document) -> None:
    assert Chunk.objects.filter(document=manual).count() >= 40, "the section must span many chunks"
    pieces = scored(manual, SENTENCES)
    assert len(pieces) == SENTENCES and all(p is not None for p in pieces), "every sentence is found in its chunk"
    ratio = growth(lambda n: scored(manual, n), SENTENCES // 8)
    assert ratio < 24, f"8x the sentences cost {ratio:.0f}x the time: super-linear"

