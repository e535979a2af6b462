"""Ingest throughput against the raw encoder, measured in the same run on the same texts.

    .venv/bin/python bench/ingest.py [CORPUS_DIR]      (default: ../shared/eval/corpus)

Runs in a scratch database on the knowledge base's PostgreSQL server (dropped at the end):
the live knowledge base is never touched. Prints chunks/s for the whole pipeline (extract,
chunk, classify, embed, write with all indexes, refresh statistics) and for
`SentenceTransformer.encode` alone over the same chunk texts, and their ratio.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.settings")


def outer(corpus: Path) -> int:
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection

    from search.evaluation.runner import database_url, scratch_database

    with scratch_database(connection.settings_dict) as name:
        env = dict(os.environ, DATABASE_URL=database_url(connection.settings_dict, name),
                   REDIS_URL=settings.REDIS_URL, SECRET_KEY=settings.SECRET_KEY,
                   KB_MEDIA_ROOT=str(settings.VAR_DIR / f"bench-media-{name}"), KB_BENCH_INNER="1")
        return subprocess.run([sys.executable, __file__, str(corpus)], env=env).returncode


def inner(corpus: Path) -> None:
    import django

    django.setup()
    import shutil

    from django.conf import settings
    from django.core.management import call_command

    from kb.ingest import chunking, classify, embedding, extract
    from kb.ingest.batch import expand_paths, ingest_paths
    from kb.models import Chunk

    call_command("migrate", verbosity=0)
    files = list(expand_paths([corpus]))
    texts: list[str] = []
    for path in files:
        mime = extract.detect_mime(filename=path.name, head=path.read_bytes()[:8192])
        extracted = extract.extract(data=path.read_bytes(), mime=mime, filename=path.name)
        drafts = chunking.split(extracted, title=extracted.title or path.stem)
        [classify.classify_chunk(text=d.text) for d in drafts]
        texts += [d.text for d in drafts]
    embedding.embed(texts[:64])  # load the model and warm up before either measurement

    started = time.perf_counter()
    embedding.model().encode(texts, batch_size=embedding.BATCH_SIZE, show_progress_bar=False)
    fp32_s = time.perf_counter() - started
    started = time.perf_counter()
    embedding.embed(texts)  # the encoder exactly as the pipeline calls it (bf16 where supported)
    raw_s = time.perf_counter() - started

    started = time.perf_counter()
    summary = ingest_paths([corpus], sync=True)
    pipeline_s = time.perf_counter() - started
    stored = Chunk.objects.count()
    shutil.rmtree(settings.MEDIA_ROOT, ignore_errors=True)

    raw_rate, pipeline_rate = len(texts) / raw_s, stored / pipeline_s
    print(f"corpus: {corpus} · {len(files)} files, {len(summary.ready)} ready, {len(summary.failed)} failed")
    print(f"chunks: {stored} stored ({len(texts)} encoded raw), torch threads {__import__('torch').get_num_threads()}")
    print(f"plain fp32 encode (reference): {fp32_s:7.2f} s  {len(texts) / fp32_s:7.1f} chunks/s")
    print(f"raw encode ({'bf16' if embedding.use_bf16() else 'fp32'}):  {raw_s:7.2f} s  {raw_rate:7.1f} chunks/s")
    print(f"full pipeline: {pipeline_s:7.2f} s  {pipeline_rate:7.1f} chunks/s")
    print(f"ratio pipeline / raw encode: {pipeline_rate / raw_rate:.2f}")


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared" / "eval" / "corpus"
    if os.environ.get("KB_BENCH_INNER"):
        inner(target)
    else:
        sys.exit(outer(target))
