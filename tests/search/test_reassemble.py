"""A split section reaches the generator as the matched part with its neighbours, not as a whole manual.

A PDF has no heading tree, so a 300-page manual is one section of hundreds of parts; every answer
from it used to quote, and align sentence by sentence, the whole document.
"""

from __future__ import annotations

from typing import Any

import pytest

from kb.library.models import Chunk
from search.retrieval import REASSEMBLE_REACH, Hit, reassemble
from tests.factories import ingested_document

pytestmark = pytest.mark.django_db

PARAGRAPH = ("Paragraph {n} of the handbook explains how depot {n} records its deliveries, which clerk signs "
             "the note, and where the copy is filed once the carrier has left the yard.")


def hit(chunk: Chunk) -> Hit:
    return Hit(chunk_id=chunk.pk, document_id=chunk.document_id, document_title="Handbook", mime_type="text/plain",
               ordinal=chunk.ordinal, breadcrumb=chunk.breadcrumb, content=chunk.content, start=chunk.start,
               end=chunk.end, page=None, kind=chunk.kind, audience=chunk.audience, part=chunk.part,
               parts=chunk.parts, split_group=chunk.split_group, distance=0.3, score=1.0, ranks={})


def section(paragraphs: int) -> list[Chunk]:
    text = "\n\n".join(PARAGRAPH.format(n=n) for n in range(paragraphs)) + "\n"
    document = ingested_document(text, name=f"handbook-{paragraphs}.txt")
    chunks = list(Chunk.objects.filter(document=document).order_by("ordinal"))
    assert len({c.split_group for c in chunks}) == 1 and chunks[0].parts == len(chunks)
    return chunks


def parts_of(sources: list[tuple[Hit, list[Any]]]) -> list[list[int]]:
    return [[c.part for c in parts] for _, parts in sources]


def test_a_long_section_brings_the_matched_part_and_its_neighbours_once() -> None:
    chunks = section(120)
    by_part = {c.part: c for c in chunks}
    assert len(chunks) > 4 * REASSEMBLE_REACH + 4, "the section must be much longer than a window"
    middle = len(chunks) // 2
    sources = reassemble([hit(by_part[middle]), hit(by_part[middle + 1]), hit(by_part[middle + 5]),
                          hit(by_part[1])])
    assert parts_of(sources) == [
        list(range(middle - 3, middle + 4)),  # the best hit with three parts each side, in order
        list(range(middle + 4, middle + 9)),  # a later hit outside it: its own window, clipped at the first
        list(range(1, 8)),  # at the start: shifted inside the section
    ]  # the hit at middle + 1 lay inside the first window: nothing twice
    last = reassemble([hit(by_part[len(chunks)])])
    assert parts_of(last) == [list(range(len(chunks) - 6, len(chunks) + 1))]


def test_a_section_of_up_to_seven_parts_comes_whole() -> None:
    chunks = section(25)
    assert 2 <= len(chunks) <= 2 * REASSEMBLE_REACH + 1
    [(_, parts)] = reassemble([hit(chunks[-1])])
    assert [c.pk for c in parts] == [c.pk for c in chunks]
