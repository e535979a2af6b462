"""The repository stands on its own: what its code and documents cite is in it (issue 52, item 4).

The design's rules, interfaces and measurements live in docs/DESIGN.md. A citation of a DESIGN.md must
resolve, from the citing file (or from the root for `docs/...`), to that file, and an anchor after it to a
heading or an `id` there. Nothing may cite the articles the design came from, nor a file beside the clone
for a rule: `../shared/` is only ever the development evaluation set, `../shared/eval`, used as data
(docs/EVALUATION.md says what it is), never its README as a reference.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = "docs/DESIGN.md"

CITED_DESIGN = re.compile(r"([\w./-]*)DESIGN\.md(?:#([\w-]+))?")
OUTSIDE = [
    (re.compile(r"seeds/"), "the design's source articles are not in the repository: docs/DESIGN.md summarises them"),
    (re.compile(r"\.\./shared/(?!eval\b)"), "a file beside the clone: cite what the repository holds"),
    (re.compile(r"shared/eval/README"), "the set's README is not in the repository: cite docs/EVALUATION.md"),
]


def anchors(markdown: str) -> set[str]:
    """The fragments a link into `markdown` may name: explicit ids and GitHub's slugs of its headings."""
    found = set(re.findall(r'id="([\w-]+)"', markdown))
    for heading in re.findall(r"^#+ (.+)$", markdown, re.M):
        found.add(re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-"))
    return found


def broken_citations(path: str, text: str, files: set[str], design_anchors: set[str]) -> list[str]:
    """Each citation in `text` (the file `path`, relative to the root) of something the repository lacks."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in CITED_DESIGN.finditer(line):
            prefix, anchor = match.group(1), match.group(2)
            base = Path() if prefix.startswith("docs/") else Path(path).parent
            target = (ROOT / base / f"{prefix}DESIGN.md").resolve()
            cited = target.relative_to(ROOT).as_posix() if target.is_relative_to(ROOT) else str(target)
            if cited not in files:
                found.append(f"{path}:{number}: {match.group(0)} is not in the repository (docs/DESIGN.md is)")
            elif anchor and cited == DESIGN and anchor not in design_anchors:
                found.append(f"{path}:{number}: {match.group(0)}: docs/DESIGN.md has no #{anchor}")
        for pattern, why in OUTSIDE:
            if pattern.search(line):
                found.append(f"{path}:{number}: {why}: {line.strip()[:100]}")
    return found


def tracked_texts() -> dict[str, str]:
    """The repository's text files: tracked, and new ones git does not ignore (a change not yet committed).
    An evaluation set's `corpus/` is left out: those are other projects' documents, not our citations."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True)
    texts = {}
    for name in listed.stdout.decode().split("\0"):
        path = ROOT / name
        if not name or not path.is_file() or "corpus" in Path(name).parts:
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            texts[name] = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
    return texts


def test_everything_the_repository_cites_is_in_it() -> None:
    texts = tracked_texts()
    assert DESIGN in texts and "README.md" in texts and "kb/settings.py" in texts  # the scan reads the repository
    design_anchors = anchors(texts[DESIGN])
    assert {"dump-format", "threads", "measurements"} <= design_anchors
    this = Path(__file__).resolve().relative_to(ROOT).as_posix()
    found = [line for name, text in texts.items() if name != this
             for line in broken_citations(name, text, set(texts), design_anchors)]
    assert found == []


def test_the_scan_flags_what_is_not_in_the_repository() -> None:
    files = {DESIGN, "kb/settings.py", "docs/SCALING.md", "docs/measurements/threads.md"}
    anchors_ = {"threads"}
    good = {
        "kb/settings.py": "# throughput ~3x (docs/DESIGN.md#threads); data in ../shared/eval/corpus",
        "docs/SCALING.md": "about 3× ([DESIGN.md](DESIGN.md#threads)) on ../shared/eval",
        "docs/measurements/threads.md": "rests on [docs/DESIGN.md](../DESIGN.md#threads)",
    }
    for path, text in good.items():
        assert broken_citations(path, text, files, anchors_) == [], path
    bad = {
        "kb/settings.py": "# throughput ~3x (DESIGN.md)",
        "docs/SCALING.md": "see ../shared/DESIGN.md",
        "docs/measurements/threads.md": "[DESIGN.md](../DESIGN.md#no-such-section)",
        "lab/metrics.py": "follows ../shared/eval/README.md",
        "docs/EVALUATION.md": "why: shared/seeds/README.md",
    }
    for path, text in bad.items():
        assert broken_citations(path, text, files, anchors_), path
    assert len(broken_citations("docs/SCALING.md", "see ../shared/DESIGN.md", files, anchors_)) == 2
