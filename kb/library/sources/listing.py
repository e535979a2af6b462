"""What every kind of source gives the sync: a listing of entries. A new kind is one module with one
function `list_entries(source) -> list[Entry]`, added to KINDS in kb.library.sources.kinds."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import PurePosixPath

from kb.library.ingest.extract import SUPPORTED


class ListingError(Exception):
    """The source could not be listed (missing directory, clone failed, network down); the message says
    why and is shown to the operator. A sync that gets one deletes nothing."""


@dataclass
class Entry:
    """One file at the source. `etag` is the kind's cheap version tag (a Git blob id, a directory entry's
    size and modification time, an HTTP ETag): equal to the stored one means unchanged without reading."""

    path: str  # POSIX path from the source's root (the directory, the repository, the site)
    size: int
    etag: str
    read: Callable[[], bytes]
    # When it last changed at the source, as a POSIX time, where the kind knows it (a file's mtime, the
    # commit time of a Git branch's tip, an HTTP Last-Modified): the start of its index lag.
    modified: float | None = None
    _sha256: str = field(default="", repr=False)

    def sha256(self) -> str:
        """The content hash; reads the file the first time it is asked for."""
        if not self._sha256:
            self._sha256 = hashlib.sha256(self.read()).hexdigest()
        return self._sha256


def sub_path(value: str) -> str:
    """A source's sub-path as a clean relative POSIX path ("" for the whole source); refuses ".." and absolute ones."""
    clean = PurePosixPath(value.strip().strip("/")) if value.strip().strip("/") else PurePosixPath()
    if clean.is_absolute() or ".." in clean.parts:
        raise ListingError(f"{value!r}: the sub-path must stay inside the source (no '..')")
    return "" if str(clean) == "." else str(clean)


def selected(path: str, *, under: str, include: Iterable[str], exclude: Iterable[str]) -> bool:
    """Whether a listed path becomes a document: under the sub-path, of a supported type, not hidden
    (no part starts with a dot: .git, .github, editor files), matched by an include pattern when there
    are any, and by no exclude pattern. Patterns are fnmatch globs on the whole path (`*` crosses '/')."""
    pure = PurePosixPath(path)
    if under and not (path == under or path.startswith(under + "/")):
        return False
    if pure.suffix.lower() not in SUPPORTED or any(part.startswith(".") for part in pure.parts):
        return False
    patterns = list(include)
    if patterns and not any(fnmatchcase(path, pattern) for pattern in patterns):
        return False
    return not any(fnmatchcase(path, pattern) for pattern in exclude)
