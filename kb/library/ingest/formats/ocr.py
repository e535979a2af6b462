"""OCR of PDF pages that have no text layer (scans, photographed pages).

pypdfium2 renders the page and RapidOCR (ONNX models shipped in its wheel, CPU only)
reads it. The engine is loaded once per process; it costs about a second to load.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

RENDER_SCALE = 2.0  # 144 dpi: small print is still legible, and the page stays fast to read


@dataclass(frozen=True)
class OcrPage:
    text: str
    confidence: float  # mean over the recognised lines, 0 when nothing was read
    reduced: str = ""  # why and how far the page was rendered below RENDER_SCALE, for the warnings


@functools.cache
def _engine() -> Any:
    from rapidocr_onnxruntime import RapidOCR

    return RapidOCR()


def read_page(data: bytes, index: int, *, max_pixels: int) -> OcrPage:
    """The text of page `index` (0-based) of the PDF in `data`, line by line from top to bottom.

    A page is rendered at no more than `max_pixels` (a PDF page may be 200 inches wide: at
    144 dpi, a 3 GB bitmap from a 200-byte file); RapidOCR shrinks what it reads to 2,000
    pixels a side anyway.
    """
    import numpy as np
    import pypdfium2

    pdf = pypdfium2.PdfDocument(data)
    try:
        page = pdf[index]
        width, height = page.get_size()  # points
        scale = render_scale(width, height, max_pixels=max_pixels)
        bitmap = page.render(scale=scale)
        image = np.asarray(bitmap.to_pil().convert("RGB"))
    finally:
        pdf.close()
    result, _elapsed = _engine()(image)
    lines = _lines(result or [])
    scores = [float(score) for _box, _text, score in result or []]
    reduced = ""
    if scale < RENDER_SCALE:
        reduced = (f"is {width / 72:,.0f} × {height / 72:,.0f} in; read by OCR at {72 * scale:.0f} dpi "
                   f"instead of {72 * RENDER_SCALE:.0f} (KB_OCR_MAX_PIXELS)")
    return OcrPage(text="\n".join(lines), confidence=sum(scores) / len(scores) if scores else 0.0, reduced=reduced)


def render_scale(width: float, height: float, *, max_pixels: int) -> float:
    """RENDER_SCALE, or less where the page in points would come out over `max_pixels`."""
    full = width * height * RENDER_SCALE**2
    return RENDER_SCALE if full <= max_pixels else RENDER_SCALE * math.sqrt(max_pixels / full)


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
