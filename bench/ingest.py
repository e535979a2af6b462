"""Ingest throughput against the raw encoder, measured in the same run on the same texts.

    .venv/bin/python bench/ingest.py [CORPUS_DIR] [--runs 3]     (default: ../shared/eval/corpus)
    .venv/bin/python bench/ingest.py --pdf [--runs 3]            (a PDF-heavy corpus, built once)

`--pdf` builds a corpus of public PDF manuals under var/bench-pdf the first time: the PDFs
in Debian's gnuplot-doc package (the gnuplot manual, 311 pages; fetched with `apt-get
download`, unpacked with `dpkg-deb`, nothing installed) and any PDF already under
/usr/share/doc.

Runs in a scratch database on the knowledge base's PostgreSQL server (dropped at the end):
the live knowledge base is never touched. Each run ingests the corpus through the real
pipeline into a fresh folder (extract, chunk, count tokens, classify, embed, write with all
indexes; then one statistics refresh) and encodes the same chunk texts with the encoder
alone (as the pipeline calls it: bf16 where the CPU has it). Prints chunks/s per stage
(from the times each document stores, Document.stage_seconds), for the whole pipeline and
for the raw encoder, and their ratio: per run and the median over the runs, with the load
average beside each.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.settings")
PDF_PACKAGES = ("gnuplot-doc",)

from bench._common import load_average, rerun_in_scratch_database  # noqa: E402


def pdf_corpus(target: Path) -> Path:
    """The PDF-heavy corpus: built once from Debian packages' public manuals, then reused."""
    if target.is_dir() and any(target.glob("*.pdf")):
        return target
    from bench.manuals import debian_files

    found = debian_files(PDF_PACKAGES, lambda path: path.endswith(".pdf"), target)
    for pdf in Path("/usr/share/doc").rglob("*.pdf"):
        if not (target / pdf.name).exists():
            shutil.copy(pdf, target / pdf.name)
            found.append(target / pdf.name)
    for pdf in found:
        if pdf.stat().st_size <= 50_000:
            pdf.unlink()  # figures and stubs
    return target


def outer(corpus: Path, runs: int) -> int:
    return rerun_in_scratch_database([sys.executable, __file__, str(corpus), "--runs", str(runs)])


def inner(corpus: Path, runs: int) -> None:
    import django

    from kb.runtime.embedded import ensure_services

    ensure_services()  # an entry point, like manage.py: the settings only read where the servers are
    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db.models import Sum

    from kb.library.ingest import chunking, extract
    from kb.library.ingest.batch import expand_paths, ingest_paths
    from kb.library.ingest.pipeline import STAGES
    from kb.library.models import Chunk, Document, Folder
    from kb.text import classify, embedding
    from search.stats import lexeme_stats_refresh

    call_command("migrate", verbosity=0)
    files = list(expand_paths([corpus]))
    texts: list[str] = []
    pages = 0
    for path in files:
        data = path.read_bytes()
        extracted = extract.extract(data=data, mime=extract.detect_mime(filename=path.name, head=data[:8192]),
                                    filename=path.name)
        pages += len(extracted.pages)
        drafts = chunking.split(extracted, title=extracted.title or path.stem)
        [classify.classify_chunk(text=d.text) for d in drafts]
        texts += [d.text for d in drafts]
    embedding.embed(texts[:64])  # load the model and warm up before any measurement
    print(f"corpus: {corpus} · {len(files)} files, {pages} PDF pages, {len(texts)} chunks; "
          f"encoder {'bf16' if embedding.use_bf16() else 'fp32'}, torch threads "
          f"{__import__('torch').get_num_threads()}, {os.cpu_count()} CPUs")

    ratios, pipeline_rates, raw_rates = [], [], []
    for run in range(1, runs + 1):
        started = time.perf_counter()
        embedding.embed(texts)  # the encoder exactly as the pipeline calls it
        raw_rate = len(texts) / (time.perf_counter() - started)
        raw_load = load_average()

        folder = Folder.objects.create(name=f"bench-run-{run}")
        started = time.perf_counter()
        summary = ingest_paths([corpus], folder=folder, sync=True)  # ends with one statistics refresh
        pipeline_s = time.perf_counter() - started
        documents = Document.objects.filter(folder=folder)
        stored = Chunk.objects.filter(document__in=documents).count()
        stages = {stage: sum(d.stage_seconds.get(stage, 0.0) for d in documents) for stage in STAGES}
        started = time.perf_counter()
        lexeme_stats_refresh()  # what the pipeline's final refresh costs, measured on its own
        stages["stats"] = time.perf_counter() - started
        pipeline_rate = stored / pipeline_s
        ratios.append(pipeline_rate / raw_rate)
        pipeline_rates.append(pipeline_rate)
        raw_rates.append(raw_rate)
        tokens = documents.aggregate(total=Sum("token_total"))["total"] or 0
        print(f"run {run}: {len(summary.ready)} ready, {len(summary.failed)} failed, {stored} chunks "
              f"({tokens / max(stored, 1):.0f} tokens mean)")
        print("  per stage, chunks/s: " + "  ".join(
            f"{stage} {stored / seconds:,.0f}" if seconds else f"{stage} -" for stage, seconds in stages.items()))
        print(f"  raw encoder {raw_rate:6.1f} chunks/s (load {raw_load}) · whole pipeline {pipeline_rate:6.1f} chunks/s "
              f"({pipeline_s:.1f} s, load {load_average()}) · ratio {pipeline_rate / raw_rate:.2f}")
    shutil.rmtree(settings.MEDIA_ROOT, ignore_errors=True)
    print(f"median of {runs} runs: raw encoder {statistics.median(raw_rates):.1f} chunks/s, pipeline "
          f"{statistics.median(pipeline_rates):.1f} chunks/s, ratio {statistics.median(ratios):.2f} (target >= 0.75)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", nargs="?", type=Path, default=ROOT.parent / "shared" / "eval" / "corpus")
    parser.add_argument("--pdf", action="store_true", help="the PDF-heavy corpus (built under var/bench-pdf)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if os.environ.get("KB_BENCH_INNER"):
        inner(args.corpus, args.runs)
    else:
        from kb.runtime.embedded import var_dir

        target = pdf_corpus(var_dir() / "bench-pdf") if args.pdf else args.corpus
        sys.exit(outer(target, args.runs))
