"""Issue 28: every reader runs in a child process with CPU and memory limits (kb.library.ingest.bounded);
items 6 (docutils is quadratic on crafted reStructuredText) and 7 (OCR rendered a page at any size).

Before: a 100 KB .rst of unclosed emphasis held the ingest worker for minutes (docutils took 5.4 s
at 20 KB, 62 s at 80 KB), and OCR rendered a blank 14,400 pt page at 144 dpi (10.4 GB at its peak).
"""

from __future__ import annotations

import io
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import pytest
from pypdf import PdfWriter

from kb.library.ingest import bounded, extract
from kb.library.ingest.extract import EML, MARKDOWN, ODT, PDF, RST, XLSX, ExtractionError, UnsupportedFile
from kb.library.ingest.formats import ocr
from tests.robust.test_zoo import raw_pdf

FIXTURES = Path(__file__).parents[1] / "kb" / "fixtures" / "formats"
# One 100 KB paragraph of emphasis never closed: for each `*`, docutils searches the rest of the paragraph.
HOSTILE_RST = "\n".join(["*a " * 26] * 1_300).encode()
GENEROUS = {"cpu_seconds": 60, "memory_mb": 3072}


def huge_page_pdf() -> bytes:
    """About 400 bytes: one blank page of 14,400 × 14,400 pt (200 inches a side, the PDF maximum)."""
    writer = PdfWriter()
    writer.add_blank_page(width=14_400, height=14_400)
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def read(data: bytes, mime: str, filename: str, **options: Any) -> extract.Extracted:
    limits = {**GENEROUS, "ocr": False, "ocr_max_pixels": extract.OCR_MAX_PIXELS, **options}
    return bounded.extract(data=data, mime=mime, filename=filename, **limits)


def time_limit_reason(name: str, cpu_seconds: int) -> str:
    """The CPU limit's reason, or on a machine too busy to give the child that much CPU in time, the clock's."""
    clock = f"{bounded.wall_seconds(cpu_seconds):.0f} s to read \\(by the clock; KB_EXTRACT_CPU_SECONDS is {cpu_seconds}\\)"
    return rf"^{re.escape(name)}: took longer than ({cpu_seconds} s to read \(KB_EXTRACT_CPU_SECONDS\)|{clock})$"


def test_a_hostile_rst_fails_with_the_time_limit_as_its_reason_within_that_limit() -> None:
    started = time.monotonic()
    with pytest.raises(ExtractionError) as failure:
        read(HOSTILE_RST, RST, "hostile.rst", cpu_seconds=2)
    assert re.match(time_limit_reason("hostile.rst", 2), str(failure.value)), failure.value
    assert time.monotonic() - started < bounded.wall_seconds(2) + 2  # the child's start and its kill


def test_a_reader_over_the_memory_limit_fails_with_that_reason() -> None:
    # Without the pixel cap the page would be a 28,800-pixel-square bitmap: 3.3 GB at once.
    with pytest.raises(ExtractionError) as failure:
        read(huge_page_pdf(), PDF, "huge.pdf", ocr=True, ocr_max_pixels=10**12, memory_mb=1024)
    assert str(failure.value) == "huge.pdf: needed more than 1024 MB to read (KB_EXTRACT_MEMORY_MB)"


def test_ocr_renders_a_huge_page_within_the_pixel_cap_and_the_memory_limit() -> None:
    for width, height in [(14_400, 14_400), (14_400, 72), (595, 842), (3, 3)]:
        scale = ocr.render_scale(width, height, max_pixels=1_000_000)
        assert width * height * scale**2 <= 1_000_000 * 1.000001
        assert scale == ocr.RENDER_SCALE or width * height * ocr.RENDER_SCALE**2 > 1_000_000
    assert ocr.render_scale(595, 842, max_pixels=extract.OCR_MAX_PIXELS) == ocr.RENDER_SCALE  # A4 is read as before

    progress: list[tuple[int, int]] = []
    found = read(huge_page_pdf(), PDF, "huge.pdf", ocr=True, ocr_max_pixels=1_000_000, memory_mb=2048,
                 on_ocr_page=lambda done, total: progress.append((done, total)))
    assert found.warnings == (
        "page 1 is 200 × 200 in; read by OCR at 5 dpi instead of 144 (KB_OCR_MAX_PIXELS)",
        "page 1 has no text layer and OCR found no text",
    )
    assert progress == [(1, 1)]


@pytest.mark.parametrize(
    ("filename", "mime"),
    [("docutils-security.rst", RST), ("odfpy-twolevellist.odt", ODT), ("tablib-founders.xlsx", XLSX),
     ("mail-parser-comma-names.eml", EML)],
)
def test_the_child_reads_what_the_worker_would_have_read(filename: str, mime: str) -> None:
    data = (FIXTURES / filename).read_bytes()
    assert read(data, mime, filename) == extract.extract(data=data, mime=mime, filename=filename)


def test_pages_cross_the_boundary() -> None:
    pdf = raw_pdf(3, "Printer codes are on the back")
    found = read(pdf, PDF, "three.pdf")
    assert found == extract.extract(data=pdf, mime=PDF, filename="three.pdf") and len(found.pages) == 3


def test_reader_errors_reach_the_caller_with_their_class_and_message() -> None:
    cases: list[tuple[bytes, str, str]] = [
        (b"%PDF-1.4 truncated", PDF, "broken.pdf"),
        (b"\xff\xfe not utf-8", MARKDOWN, "latin.md"),
        (b"   \n", RST, "empty.rst"),
        (b"anything", "application/x-unknown", "odd.bin"),
    ]
    for data, mime, filename in cases:
        with pytest.raises((ExtractionError, UnsupportedFile)) as expected:
            extract.extract(data=data, mime=mime, filename=filename)
        with pytest.raises(type(expected.value)) as got:
            read(data, mime, filename)
        assert str(got.value) == str(expected.value)


def zygotes() -> list[psutil.Process]:
    """This process's zygotes: children running kb.library.ingest.bounded's zygote_main."""
    return [p for p in psutil.Process().children() if "zygote_main" in " ".join(p.cmdline())]


def test_one_zygote_forks_a_reader_per_file_and_a_killed_one_is_replaced() -> None:
    bounded.ZYGOTES.close()
    note = b"# Note\n\nBay 4 opens at six."
    first = read(note, MARKDOWN, "note.md")
    [zygote] = zygotes()
    with pytest.raises(ExtractionError):  # a reader stopped by its limit ends its child, not the zygote
        read(HOSTILE_RST, RST, "hostile.rst", cpu_seconds=1)
    assert read(note, MARKDOWN, "note.md") == first and zygotes() == [zygote]
    assert not zygote.children()  # every reader child reaped

    zygote.kill()
    zygote.wait(10)
    assert read(note, MARKDOWN, "note.md") == first  # a dead zygote is replaced, the file still read
    [replacement] = zygotes()
    assert replacement.pid != zygote.pid
    bounded.ZYGOTES.close()
    assert zygotes() == []  # closed, a zygote exits


def test_readers_never_see_the_workers_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = {"DATABASE_URL": "postgresql://kb:pw@db/kb", "REDIS_URL": "redis://cache:6379/0",
               "SECRET_KEY": "s3cret", "OPENAI_API_KEY": "sk-test", "KB_OIDC_CLIENT_SECRET": "oidc"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    bounded.ZYGOTES.close()
    read(b"# Note\n\nBay 4 opens at six.", MARKDOWN, "note.md")
    [zygote] = zygotes()
    seen = zygote.environ()  # every reader child is a fork of it, with its environment
    assert not set(secrets) & set(seen) and seen["PATH"] == os.environ["PATH"]
    bounded.ZYGOTES.close()


def ended(process: psutil.Process, timeout: float) -> bool:
    """Gone, or a zombie where the container's init does not reap. A reader stopped by SIGXCPU closes its pipes
    before it has finished dumping core, so its end is waited for."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_a_zygote_killed_while_its_child_reads_fails_that_file_alone_and_leaves_no_reader_running() -> None:
    bounded.ZYGOTES.close()
    note = b"# Note\n\nBay 4 opens at six."
    read(note, MARKDOWN, "note.md")
    [zygote] = zygotes()
    with ThreadPoolExecutor(1) as pool:
        reading = pool.submit(read, HOSTILE_RST, RST, "hostile.rst", cpu_seconds=2)
        deadline = time.monotonic() + 10
        while not zygote.children() and time.monotonic() < deadline:
            time.sleep(0.02)
        [reader] = zygote.children()
        zygote.kill()
        with pytest.raises(ExtractionError) as failure:
            reading.result(timeout=60)
    assert str(failure.value) == bounded.ZYGOTE_ENDED
    assert ended(reader, timeout=10)  # its limit still stopped the orphaned reader
    assert read(note, MARKDOWN, "note.md").title == "Note"  # the next file is read by a new zygote
    bounded.ZYGOTES.close()


def test_readers_in_two_threads_at_once_each_get_a_zygote() -> None:
    bounded.ZYGOTES.close()

    def hostile(n: int) -> str:  # each child runs its full 2 s of CPU, so the two overlap
        with pytest.raises(ExtractionError) as failure:
            read(HOSTILE_RST, RST, f"hostile{n}.rst", cpu_seconds=2)
        return str(failure.value)

    with ThreadPoolExecutor(2) as pool:
        reasons = list(pool.map(hostile, range(2)))
    assert all(re.match(time_limit_reason(f"hostile{n}.rst", 2), reason) for n, reason in enumerate(reasons)), reasons
    assert len(zygotes()) == 2
    bounded.ZYGOTES.close()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_hostile_files_fail_alone_in_a_real_worker_and_the_next_document_is_indexed() -> None:
    """The acceptance of items 6 and 7: a prefork worker (daemonic pool process, as `make run` has)
    takes the two hostile files and a good one in queue order."""
    from kb.library.models import Document
    from kb.library.services import document_upload
    from tests.conftest import start_worker, stop_process

    # hostile.rst needs minutes; huge.pdf's page render and 5-dpi OCR ~2 s, which took over 3 s of CPU once in
    # CI on a host slowed by another tenant's I/O: the limit leaves it twice that.
    cpu_seconds = 6
    queued = [
        document_upload(name=name, stream=io.BytesIO(data), size=len(data)).document
        for name, data in [("hostile.rst", HOSTILE_RST), ("huge.pdf", huge_page_pdf()),
                           ("next.md", b"# Next\n\nThe printer code is 4711.\n")]
    ]
    worker = start_worker("bounded-worker", pool="prefork", KB_EXTRACT_CPU_SECONDS=str(cpu_seconds),
                          KB_OCR_MAX_PIXELS="1000000", KB_EXTRACT_MEMORY_MB="2048")
    try:
        started = time.monotonic()
        deadline = started + 120
        while time.monotonic() < deadline:
            documents = {d.filename: d for d in Document.objects.filter(pk__in=[d.pk for d in queued])}
            if all(d.status in (Document.Status.READY, Document.Status.FAILED) for d in documents.values()):
                break
            assert worker.poll() is None, "the worker died"
            time.sleep(0.5)
        seconds = time.monotonic() - started
        assert worker.poll() is None, "the worker died"  # before: still reading hostile.rst at the deadline
    finally:
        stop_process(worker)
    hostile = documents.pop("hostile.rst")
    assert hostile.status == Document.Status.FAILED, hostile.status
    assert re.match(time_limit_reason("hostile.rst", cpu_seconds), hostile.failure_reason), hostile.failure_reason
    assert {name: (d.status, d.failure_reason) for name, d in documents.items()} == {
        "huge.pdf": ("failed", "no text could be extracted (page 1 is 200 × 200 in; read by OCR at 5 dpi instead "
                               "of 144 (KB_OCR_MAX_PIXELS); page 1 has no text layer and OCR found no text)"),
        "next.md": ("ready", ""),
    }
    assert documents["next.md"].chunks.filter(content__contains="4711").exists()
    print(f"bounded worker: the three documents took {seconds:.1f} s")
