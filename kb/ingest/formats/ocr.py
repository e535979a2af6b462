"""OCR of PDF pages that have no text layer (scans, photographed pages).

pypdfium2 renders the page and RapidOCR (ONNX models shipped in its wheel, CPU only)
reads it. The engine is loaded once per process; it costs about a second to load.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

RENDER_SCALE = 2.0  # 144 dpi: small print is still legible, and the page stays fast to read


@dataclass(frozen=True)
class OcrPage:
    text: str
    confidence: float  # mean over the recognised lines, 0 when nothing was read


@functools.cache
def _engine() -> Any:
    from rapidocr_onnxruntime import RapidOCR

    return RapidOCR()


def read_page(data: bytes, index: int) -> OcrPage:
    """The text of page `index` (0-based) of the PDF in `data`, line by line from top to bottom."""
    import numpy as np
    import pypdfium2

    pdf = pypdfium2.PdfDocument(data)
    try:
        bitmap = pdf[index].render(scale=RENDER_SCALE)
        image = np.asarray(bitmap.to_pil().convert("RGB"))
    finally:
        pdf.close()
    result, _elapsed = _engine()(image)
    lines = _lines(result or [])
    scores = [float(score) for _box, _text, score in result or []]
    return OcrPage(text="\n".join(lines), confidence=sum(scores) / len(scores) if scores else 0.0)


def _lines(result: list[Any]) -> list[str]:
    """Boxes grouped into lines (boxes whose vertical centres are close), each line read left to right."""
    boxes = sorted(
        ((sum(p[1] for p in box) / 4, min(p[0] for p in box), max(p[1] for p in box) - min(p[1] for p in box), text)
         for box, text, _score in result),
    )
    lines: list[list[tuple[float, str]]] = []
    last_y = None
    for y, x, height, text in boxes:
        if last_y is None or y - last_y > max(height, 1) / 2:
            lines.append([])
        lines[-1].append((x, text))
        last_y = y
    return [" ".join(t for _, t in sorted(line)) for line in lines]
