"""OCR time per scanned PDF page on this machine, next to the text-layer extraction of the same pages.

    .venv/bin/python bench/ocr.py [PDF] [--runs 3]   (default: demo/corpus/everyone/handbook-welcome-and-workplace.pdf)

Every page of PDF is rendered to pixels at 144 dpi and wrapped in an image-only PDF (what a
scanner produces), then read back with `extract(..., ocr=True)`. Prints the median of the
runs (seconds per page), the load average beside it, and how much of the original text
layer's words the OCR text recovered. The first, untimed run loads the ONNX models.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def scanned(data: bytes, limit: int) -> bytes:
    import pypdfium2

    pages = [page.render(scale=2).to_pil().convert("L") for page in list(pypdfium2.PdfDocument(data))[:limit]]
    out = io.BytesIO()
    pages[0].save(out, format="PDF", resolution=144, save_all=True, append_images=pages[1:])
    return out.getvalue()


def main() -> None:
    from kb.library.ingest.extract import PDF, extract

    parser = argparse.ArgumentParser()
    parser.add_argument("pdf", nargs="?", type=Path,
                        default=ROOT / "demo" / "corpus" / "everyone" / "handbook-welcome-and-workplace.pdf")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pages", type=int, default=3, help="scan only the first N pages")
    args = parser.parse_args()
    original = args.pdf.read_bytes()
    image_only = scanned(original, args.pages)
    layer = extract(data=original, mime=PDF, filename=args.pdf.name)
    layer_words = " ".join(layer.text[p.start : p.end] for p in layer.pages[: args.pages]).split()
    extract(data=image_only, mime=PDF, filename="scan.pdf", ocr=True)  # warm-up: loads the models
    times, cpu, result = [], [], None
    for _ in range(args.runs):
        started, started_cpu = time.perf_counter(), time.process_time()
        result = extract(data=image_only, mime=PDF, filename="scan.pdf", ocr=True)
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    if result is None:
        raise SystemExit("--runs must be at least 1")
    pages = len(result.pages)
    found = set(result.text.split())
    recovered = sum(w in found for w in layer_words) / max(len(layer_words), 1)
    print(f"{args.pdf.name}: {pages} pages scanned, {len(layer_words)} words in their text layer")
    # CPU seconds do not depend on how busy the machine is; wall seconds do (compare the load average).
    print(f"OCR: median {statistics.median(times) / pages:.2f} s/page wall, {statistics.median(cpu) / pages:.2f} "
          f"CPU-s/page over {args.runs} runs (wall per run: {', '.join(f'{t:.1f}' for t in times)} s) · "
          f"load average {os.getloadavg()[0]:.2f}, {os.getloadavg()[1]:.2f}, {os.getloadavg()[2]:.2f} · "
          f"{os.cpu_count()} CPUs")
    print(f"words of the text layer found by OCR: {recovered:.1%}")
    print("warnings:", "; ".join(result.warnings))


if __name__ == "__main__":
    main()
