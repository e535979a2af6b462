"""A newcomer's map (issue 52): docs/ARCHITECTURE.md's "Map" names every room the repository has.

The map's table lists each directory git tracks at the top two levels (`kb/`, `kb/library/`) and the files at
the root (`Makefile`); a room added, moved or removed without its row fails here, naming the row. The tracked
tree is the truth, not the working tree: `var/`, `test-output/` and other ignored or untracked folders are no
rooms. A dotfile at the root whose job is plain (`.gitignore`) may stay out of the map if DOTFILES names it.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
DOTFILES = {".gitignore"}

MAP_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|")


def map_entries(markdown: str) -> set[str]:
    """The paths the "## Map" section's table names, one a row, as written (a directory ends in `/`)."""
    section = re.search(r"^## Map\n(.*?)(?=^## |\Z)", markdown, re.M | re.S)
    if section is None:
        return set()
    return {match.group(1) for line in section.group(1).splitlines() if (match := MAP_ROW.match(line))}


def tracked_layout(files: Iterable[str]) -> tuple[set[str], set[str]]:
    """The directories at depth 1 and 2 that hold tracked files (`kb/`, `kb/library/`), and the root's files."""
    directories: set[str] = set()
    top_files: set[str] = set()
    for name in files:
        parts = name.split("/")
        if len(parts) == 1:
            top_files.add(name)
            continue
        directories.add(f"{parts[0]}/")
        if len(parts) > 2:
            directories.add(f"{parts[0]}/{parts[1]}/")
    return directories, top_files


def map_drift(entries: set[str], directories: set[str], top_files: set[str], dotfiles: set[str]) -> list[str]:
    """What the map and the tracked tree disagree on, one line a name; empty when they match."""
    named_directories = {entry for entry in entries if entry.endswith("/")}
    named_files = entries - named_directories
    return (
        [f"missing from the map: {name}" for name in sorted(directories - named_directories)]
        + [f"in the map but no tracked directory: {name}" for name in sorted(named_directories - directories)]
        + [f"top-level file missing from the map: {name}" for name in sorted(top_files - named_files - dotfiles)]
        + [f"in the map but no tracked top-level file: {name}" for name in sorted(named_files - top_files)]
    )


def tracked_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [name for name in listed.stdout.decode().split("\0") if name]


def test_the_map_matches_the_tracked_tree() -> None:
    entries = map_entries(ARCHITECTURE.read_text(encoding="utf-8"))
    directories, top_files = tracked_layout(tracked_files())
    # The parse found the table and the listing the repository: rooms every checkout has, at both depths.
    assert {"kb/", "kb/library/", "chat/review/", "tests/", "Makefile"} <= entries
    assert {"kb/", "kb/library/", "docs/"} <= directories and "pyproject.toml" in top_files
    assert DOTFILES <= top_files, "a dotfile DOTFILES leaves out of the map is no longer tracked"
    assert map_drift(entries, directories, top_files, DOTFILES) == []


SAMPLE = """# Architecture

## Map

| path | its one job |
| --- | --- |
| `Makefile` | the commands |
| `kb/` | the project package |
| `kb/library/` | the documents app |
| `kb/gone/` | a room that moved away |

## Who owns what

| package | owns |
| --- | --- |
| `search/` | retrieval (a later table: not the map) |
"""


def test_the_comparison_flags_a_missing_and_an_extra_room() -> None:
    entries = map_entries(SAMPLE)
    assert entries == {"Makefile", "kb/", "kb/library/", "kb/gone/"}
    directories, top_files = tracked_layout(
        ["Makefile", ".gitignore", "manage.py", "kb/settings.py", "kb/library/models.py",
         "kb/text/tokens.py", "kb/library/ingest/formats/pdf.py"]
    )
    assert directories == {"kb/", "kb/library/", "kb/text/"}  # depth 3 (`kb/library/ingest/`) is no row
    assert top_files == {"Makefile", ".gitignore", "manage.py"}
    assert map_drift(entries, directories, top_files, {".gitignore"}) == [
        "missing from the map: kb/text/",
        "in the map but no tracked directory: kb/gone/",
        "top-level file missing from the map: manage.py",
    ]
    assert "top-level file missing from the map: .gitignore" in map_drift(entries, directories, top_files, set())
    assert "in the map but no tracked top-level file: README.md" in map_drift(
        entries | {"README.md"}, directories, top_files, {".gitignore"}
    )
    assert map_entries("# Architecture\n\n| `kb/` | no Map section |\n") == set()
