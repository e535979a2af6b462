"""CSV that a spreadsheet opens as text: the exports of content gaps and the review access log hold
people's words (questions, user names), and a cell that starts like a formula would run as one."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator

_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def cell(value: object) -> str:
    text = str(value)
    return f"'{text}" if text[:1] in _FORMULA else text


def csv_lines(rows: Iterable[Iterable[object]]) -> Iterator[str]:
    """Each row as one CSV line (a streamed export needs no buffer of the whole file)."""

    class Line:
        def write(self, value: str) -> str:
            return value

    writer = csv.writer(Line())
    for row in rows:
        yield writer.writerow([cell(value) for value in row])
