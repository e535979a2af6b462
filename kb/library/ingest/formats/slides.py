"""PowerPoint decks: one section per slide, headed "Slide N: title", speaker notes marked.

The slide number is in the heading, so every chunk's breadcrumb (its citation label)
says which slide it came from.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from kb.library.ingest.canonical import PPTX, Block, Extracted, ExtractionError, ReadOptions, from_blocks, heading_block, reading, reads

if TYPE_CHECKING:
    from pptx.shapes.base import BaseShape

NOTES_PREFIX = "Speaker notes: "
_PLACEHOLDER_TITLES = {"", "presentation", "powerpoint presentation", "slide 1"}  # templates' defaults


@reads(PPTX)
def extract(data: bytes, name: str, options: ReadOptions) -> Extracted:
    import pptx

    blocks: list[Block] = []
    with reading(name, "PowerPoint presentation"):
        deck = pptx.Presentation(io.BytesIO(data))
        for number, slide in enumerate(deck.slides, start=1):
            title_shape = slide.shapes.title
            title = " ".join(title_shape.text_frame.text.split()) if title_shape is not None else ""
            blocks.append(heading_block(1, f"Slide {number}: {title}" if title else f"Slide {number}"))
            skip = {title_shape.shape_id} if title_shape is not None else set()
            blocks += _shape_blocks(slide.shapes, skip)
            if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
                notes = _paragraphs(slide.notes_slide.notes_text_frame.text)
                if notes:
                    blocks.append(Block(text=NOTES_PREFIX + notes))
        core_title = deck.core_properties.title
    if not blocks:
        raise ExtractionError(f"{name}: the presentation has no slides")
    if " ".join((core_title or "").split()).casefold() in _PLACEHOLDER_TITLES:
        core_title = None
    return from_blocks(blocks, title=core_title or _first_title(blocks))


def _first_title(blocks: list[Block]) -> str | None:
    """A deck is known by its first slide's title, not by "Slide 1"."""
    title = blocks[0].title.partition(": ")[2]
    return title or None


def _shape_blocks(shapes: Iterable[BaseShape], skip: set[int]) -> Iterator[Block]:
    """Text frames and tables in reading order (top to bottom, then left to right); groups recursed."""
    from pptx.shapes.group import GroupShape

    ordered = sorted(shapes, key=lambda s: ((s.top or 0), (s.left or 0)))
    for shape in ordered:
        if shape.shape_id in skip:
            continue
        if isinstance(shape, GroupShape):
            yield from _shape_blocks(shape.shapes, skip)
        elif getattr(shape, "has_table", False):
            rows = [" | ".join(" ".join(c.text.split()) for c in row.cells) for row in shape.table.rows]  # type: ignore[attr-defined]
            rows = [r for r in rows if r.strip(" |")]
            if rows:
                yield Block(text="\n".join(rows))
        elif getattr(shape, "has_text_frame", False):
            text = _paragraphs(shape.text_frame.text)  # type: ignore[attr-defined]
            if text:
                yield Block(text=text)


def _paragraphs(raw: str) -> str:
    """A text frame's paragraphs, one a line (python-pptx separates them with newlines, line breaks with \\v)."""
    lines = (" ".join(line.split()) for line in raw.replace("\v", "\n").splitlines())
    return "\n".join(line for line in lines if line)
