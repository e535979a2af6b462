"""Excel workbooks and CSV files: one section per sheet, one self-contained line per row.

A row is written with its header names ("Row 7: Region: North; Revenue: 1200"), so a
chunk holding any row can be read (and quoted) without the header line, and the row
number in the text plus the "Rows a–b" heading above it locate it in the sheet.
Very long or wide sheets are cut at fixed bounds, with a warning naming what was left out.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import Iterable, Iterator
from dataclasses import replace

from kb.library.ingest.canonical import (
    CSV,
    XLSX,
    Block,
    Extracted,
    ExtractionError,
    ReadOptions,
    decode,
    from_blocks,
    heading_block,
    reading,
    reads,
)

MAX_ROWS = 5000  # per sheet
SCAN_EMPTY_ROWS = 10_000  # beyond MAX_ROWS, how far to look for data that would be left out
MAX_COLUMNS = 60
MAX_CELL_CHARS = 2000
ROWS_PER_BLOCK = 20  # a "Rows a–b" heading every so many rows...
BLOCK_CHARS = 700  # ...or sooner, so that a block usually fits one chunk

Row = tuple[int, list[str]]  # 1-based row number in the sheet, cell texts


@reads(XLSX)
def extract_xlsx(data: bytes, name: str, options: ReadOptions) -> Extracted:
    import openpyxl

    blocks: list[Block] = []
    warnings: list[str] = []
    with reading(name, "Excel workbook"):
        workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
        try:
            title = workbook.properties.title
            for sheet in workbook.worksheets:
                rows = ((r, [_cell(v) for v in values]) for r, values in enumerate(sheet.iter_rows(values_only=True), 1))
                blocks += _sheet_blocks(f"Sheet: {sheet.title}", rows, warnings, label=sheet.title)
        finally:
            workbook.close()
    if not blocks:
        raise ExtractionError(f"{name}: the workbook has no sheets")
    # A workbook is known by its title property or its file name, never by its first sheet.
    return replace(from_blocks(blocks, title=title, warnings=warnings), title=title or None)


@reads(CSV)
def extract_csv(data: bytes, name: str, options: ReadOptions) -> Extracted:
    return _extract_csv(decode(data, name), name)


def _extract_csv(text: str, name: str) -> Extracted:
    warnings: list[str] = []
    try:
        dialect: type[csv.Dialect] | csv.Dialect = csv.Sniffer().sniff(text[:8192], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel  # one column, or too little text to tell: the standard comma
    try:
        rows = ((r, [_cell(v) for v in values]) for r, values in enumerate(csv.reader(io.StringIO(text), dialect), 1))
        blocks = _sheet_blocks(f"Table: {name}", rows, warnings, label=name)
    except csv.Error as exc:
        raise ExtractionError(f"{name}: cannot read CSV: {exc}") from None
    return replace(from_blocks(blocks, title=None, warnings=warnings), title=None)


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ").removesuffix(" 00:00:00")
    text = " ".join(str(value).split())
    return text[:MAX_CELL_CHARS] + "…" if len(text) > MAX_CELL_CHARS else text


def _sheet_blocks(heading: str, rows: Iterable[Row], warnings: list[str], *, label: str) -> list[Block]:
    """The sheet's heading, then its data rows under "Rows a–b" subheadings; the first row is the header."""
    records = _records(rows, warnings, label=label)
    blocks = [heading_block(1, heading)]
    batch: list[tuple[int, str]] = []
    for row, line in records:
        if batch and (len(batch) >= ROWS_PER_BLOCK or sum(len(t) for _, t in batch) + len(line) > BLOCK_CHARS):
            blocks += _row_block(batch)
            batch = []
        batch.append((row, line))
    if batch:
        blocks += _row_block(batch)
    return blocks


def _records(rows: Iterable[Row], warnings: list[str], *, label: str) -> Iterator[tuple[int, str]]:
    header: tuple[int, list[str]] | None = None
    written = 0
    for row, cells in rows:
        if row > MAX_ROWS:
            if any(cells):
                warnings.append(f"{label}: only the first {MAX_ROWS} rows were read")
                break
            if row > MAX_ROWS + SCAN_EMPTY_ROWS:  # a sheet whose stored size is far beyond its data
                break
            continue
        if len(cells) > MAX_COLUMNS:
            if any(cells[MAX_COLUMNS:]):
                warnings.append(f"{label}: row {row}: only the first {MAX_COLUMNS} columns were read")
            cells = cells[:MAX_COLUMNS]
        if not any(cells):
            continue
        if header is None:
            header = (row, cells)
            continue
        names = [header[1][i] if i < len(header[1]) and header[1][i] else f"Column {_column(i)}" for i in range(len(cells))]
        fields = "; ".join(f"{n}: {v}" for n, v in zip(names, cells, strict=True) if v)
        written += 1
        yield row, f"Row {row}: {fields}"
    if header is not None and not written:  # a one-row sheet is data, not a header of nothing
        yield header[0], f"Row {header[0]}: " + "; ".join(v for v in header[1] if v)


def _row_block(batch: list[tuple[int, str]]) -> list[Block]:
    first, last = batch[0][0], batch[-1][0]
    title = f"Row {first}" if first == last else f"Rows {first}–{last}"
    return [heading_block(2, title), Block(text="\n".join(line for _, line in batch))]


def _column(index: int) -> str:
    """Spreadsheet column letters: 0 → A, 26 → AA."""
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(65 + rest) + letters
    return letters
