"""Reading a file in its bounded child: a fresh interpreter per file against a fork of a zygote.

    .venv/bin/python bench/extraction.py [--rounds 3]

Every file of demo/corpus (Markdown, HTML, PDF) is read through kb.library.ingest.bounded.extract,
once each way per round, the two ways interleaved. "fresh": the process's zygote is ended after each
file, so each file pays an interpreter's start and the readers' imports (what every file paid before
the zygote) plus one fork. "zygote": one zygote reads them all, as a worker's does. Prints, per
file, the median wall ms and CPU ms (this process, the zygotes and their children) over the rounds,
the ratio, and the load average.
"""

from __future__ import annotations

import argparse
import mimetypes
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import load_average  # noqa: E402
from kb.library.ingest import bounded  # noqa: E402

CORPUS = ROOT / "demo" / "corpus"


def cpu_seconds() -> float:
    ours, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return ours.ru_utime + ours.ru_stime + children.ru_utime + children.ru_stime


def read_all(files: list[Path], *, fresh: bool) -> tuple[float, float]:
    """Wall and CPU seconds per file; every zygote ended (and so counted) before the CPU is read."""
    wall, cpu = time.perf_counter(), cpu_seconds()
    for path in files:
        mime = mimetypes.guess_type(path.name)[0] or "text/plain"
        bounded.extract(data=path.read_bytes(), mime=mime, filename=path.name, ocr=False, ocr_max_pixels=4_000_000,
                        cpu_seconds=60, memory_mb=2048)
        if fresh:
            bounded.ZYGOTES.close()
    bounded.ZYGOTES.close()
    return (time.perf_counter() - wall) / len(files), (cpu_seconds() - cpu) / len(files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    files = sorted(p for p in CORPUS.rglob("*") if p.is_file())
    figures: dict[str, list[tuple[float, float]]] = {"fresh": [], "zygote": []}
    for _ in range(args.rounds):
        for way in figures:
            figures[way].append(read_all(files, fresh=way == "fresh"))
    print(f"{len(files)} files of demo/corpus, {args.rounds} rounds, load {load_average()}")
    medians = {way: (statistics.median(w for w, _ in runs) * 1000, statistics.median(c for _, c in runs) * 1000)
               for way, runs in figures.items()}
    for way, (wall, cpu) in medians.items():
        print(f"  {way:7} wall {wall:6.1f} ms/file   cpu {cpu:6.1f} ms/file")
    print(f"  zygote/fresh: wall {medians['zygote'][0] / medians['fresh'][0]:.2f}, "
          f"cpu {medians['zygote'][1] / medians['fresh'][1]:.2f}")


if __name__ == "__main__":
    main()
