"""A directory on the server (a mounted share) as a source, under one of the roots the operator allows
(kb.library.sources.policy)."""

from __future__ import annotations

import os
import stat
from functools import partial
from pathlib import Path

from kb.library.models import Source
from kb.library.sources.listing import Entry, ListingError, sub_path
from kb.library.sources.policy import local_root_check, read_listed


def list_entries(source: Source) -> list[Entry]:
    """Every regular file under the directory (or its sub-path). Symbolic links are not followed, neither when
    listing nor when reading (`read_listed`), so a link on the share, even one swapped in after the listing,
    cannot pull in files from elsewhere on the server. The etag is size and mtime."""
    root = local_root_check(source.location)  # again at each run: the allowed roots may have changed
    under = sub_path(source.path)
    start = root / under
    if not start.is_dir():
        raise ListingError(f"{start}: no such directory (is the share mounted?)")
    if Path(os.path.realpath(start)) != start:
        raise ListingError(f"{source.path!r}: the sub-path passes through a symbolic link; give the directory itself")
    errors: list[OSError] = []
    entries = []
    for directory, dirs, files in os.walk(start, onerror=errors.append):
        dirs.sort()
        for name in sorted(files):
            path = Path(directory) / name
            try:
                found = path.lstat()
            except OSError as exc:
                errors.append(exc)
                continue
            if not stat.S_ISREG(found.st_mode):  # a symbolic link, a FIFO, a device
                continue
            relative = path.relative_to(root).as_posix()
            entries.append(Entry(path=relative, size=found.st_size, etag=f"{found.st_size}-{found.st_mtime_ns}",
                                 read=partial(read_listed, root, relative, found), modified=found.st_mtime))
    if errors:
        # A directory that cannot be read would look like deleted files: the whole listing fails instead.
        raise ListingError(f"{start}: {len(errors)} entries could not be read, first: {errors[0]}")
    return entries
