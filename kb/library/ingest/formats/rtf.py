"""RTF through striprtf: plain text, headings found like in a plain-text file."""

from __future__ import annotations

from kb.library.ingest.canonical import PLAIN, RTF, Extracted, ExtractionError, ReadOptions, read_as, reading, reads


@reads(RTF)
def extract(data: bytes, name: str, options: ReadOptions) -> Extracted:
    from striprtf.striprtf import rtf_to_text

    # RTF is 7-bit: other characters come as \'hh escapes in the document's code page.
    source = data.decode("latin-1")
    depth = 0
    for char in source:  # a truncated or damaged file leaves groups open; its text would be partial
        depth += (char == "{") - (char == "}")
        if depth < 0:
            break
    if depth != 0:
        raise ExtractionError(f"{name}: cannot read RTF: the file is truncated or damaged (unbalanced braces)")
    with reading(name, "RTF"):
        text: str = rtf_to_text(source, errors="replace")  # type: ignore[no-untyped-call]  # striprtf has no annotations
    return read_as(PLAIN, text.encode("utf-8"), name)
