"""The big-manual corpus of `bench/chat.py --ttft --manuals`: public manuals of hundreds of pages.

Large PDF and reStructuredText manuals are where the answer path used to stall (aligning each sentence
of a long section with every chunk of it: p95 time to first token 7.4 s on documents the team had not
seen). Built once under var/bench-manuals, in the layout of an evaluation set (corpus/, acl.json,
questions.jsonl), from Debian packages fetched with `apt-get download` and unpacked with `dpkg-deb`
(nothing installed): the gnuplot manual (PDF, 311 pages, gnuplot-doc) and the Python 3.11 library
reference's longest pages as written, in reStructuredText (python3.11-doc's Sphinx `_sources`).
The questions are asked about the manuals' own section titles (the PDF's outline, the
reStructuredText's underlined headings), a fixed sample, so every run asks the same ones.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

RST_PAGES = ("library/os.rst.txt", "library/stdtypes.rst.txt", "howto/logging-cookbook.rst.txt",
             "library/unittest.rst.txt", "library/argparse.rst.txt")
QUESTIONS = 120
TEMPLATES = ("What does {} do?", "How do I use {}?", "what should I know about {}")
RST_HEADING = re.compile(r"^(?P<title>[^\s].{3,70})\n(?P<rule>[=\-~^\"'*+#])(?P=rule){3,}\s*$", re.MULTILINE)


def debian_files(packages: tuple[str, ...], wanted: Callable[[str], bool], target: Path) -> list[Path]:
    """The files of Debian `packages` whose path (`wanted` of it) is wanted, downloaded and unpacked in a
    temporary folder and copied flat into `target`; files already there are kept."""
    apt_get, dpkg_deb = shutil.which("apt-get"), shutil.which("dpkg-deb")
    if not (apt_get and dpkg_deb):
        raise SystemExit("this corpus is built from Debian packages: it needs apt-get and dpkg-deb")
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kb-bench-deb-") as tmp:
        subprocess.run([apt_get, "download", *packages], cwd=tmp, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        for deb in Path(tmp).glob("*.deb"):
            subprocess.run([dpkg_deb, "-x", str(deb), str(Path(tmp) / "root")], check=True)
        found = [path for path in (Path(tmp) / "root").rglob("*") if path.is_file() and wanted(path.as_posix())]
        for path in found:
            if not (target / path.name).exists():
                shutil.copy(path, target / path.name)
        return [target / path.name for path in found]


def _pdf_titles(path: Path) -> Iterator[str]:
    from pypdf import PdfReader

    def walk(items: Sequence[object]) -> Iterator[str]:
        for item in items:
            if isinstance(item, Sequence) and not isinstance(item, str):
                yield from walk(item)
            else:
                yield str(getattr(item, "title", "")).strip()

    yield from walk(PdfReader(path).outline)


def _rst_titles(path: Path) -> Iterator[str]:
    for match in RST_HEADING.finditer(path.read_text(encoding="utf-8")):
        title = match.group("title").strip()
        if len(match.group(0).split("\n")[1].strip()) >= len(title) and not title.startswith(".."):
            yield re.sub(r"[:`*]", "", re.sub(r":\w+:`([^`]+)`", r"\1", title))


def build(target: Path) -> Path:
    """The corpus and its questions under `target`, built the first time only."""
    if (target / "questions.jsonl").exists():
        return target
    corpus = target / "corpus" / "everyone"
    pdfs = [p for p in debian_files(("gnuplot-doc",), lambda path: path.endswith(".pdf"), corpus)
            if p.stat().st_size > 500_000]
    for small in set(corpus.glob("*.pdf")) - set(pdfs):
        small.unlink()  # the package's figures and stubs
    rst = []
    for page in debian_files(("python3.11-doc",), lambda path: path.endswith(tuple(f"_sources/{p}" for p in RST_PAGES)),
                             corpus):
        rst.append(page.rename(page.with_name(page.name.removesuffix(".txt"))))
    rng = random.Random(29)  # noqa: S311 (a fixed sample of titles, not a secret)
    samples = [rng.sample(titles, min(QUESTIONS // 2, len(titles)))
               for titles in (sorted({t for pdf in pdfs for t in _pdf_titles(pdf) if len(t) > 3}),
                              sorted({t for page in rst for t in _rst_titles(page)}))]
    picked = [title for pair in zip(*samples, strict=False) for title in pair]  # one PDF, one reStructuredText, …
    with (target / "questions.jsonl").open("w") as out:
        for n, title in enumerate(picked):
            out.write(json.dumps({"id": f"m{n:03d}", "query": TEMPLATES[n % len(TEMPLATES)].format(title)}) + "\n")
    (target / "acl.json").write_text(json.dumps({"groups": {}}))
    return target
