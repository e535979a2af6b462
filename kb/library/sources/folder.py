"""A directory on the server (a mounted share) as a source."""

from __future__ import annotations

import os
from pathlib import Path

from kb.library.models import Source
from kb.library.sources.listing import Entry, ListingError, sub_path


def list_entries(source: Source) -> list[Entry]:
    """Every regular file under the directory (or its sub-path). Symbolic links are not followed, so a
    link on the share cannot pull in files from elsewhere on the server. The etag is size and mtime."""
    root = Path(source.location)
    if not root.is_absolute():
        raise ListingError(f"{source.location!r}: a folder source needs an absolute path on the server")
    start = root / sub_path(source.path)
    if not start.is_dir():
        raise ListingError(f"{start}: no such directory (is the share mounted?)")
    errors: list[OSError] = []
    entries = []
    for directory, dirs, files in os.walk(start, onerror=errors.append):
        dirs.sort()
        for name in sorted(files):
            path = Path(directory) / name
            try:
                stat = path.lstat()
            except OSError as exc:
                errors.append(exc)
                continue
            if path.is_symlink() or not path.is_file():
                continue
            entries.append(Entry(path=path.relative_to(root).as_posix(), size=stat.st_size,
                                 etag=f"{stat.st_size}-{stat.st_mtime_ns}", read=path.read_bytes,
                                 modified=stat.st_mtime))
    if errors:
        # A directory that cannot be read would look like deleted files: the whole listing fails instead.
        raise ListingError(f"{start}: {len(errors)} entries could not be read, first: {errors[0]}")
    return entries
