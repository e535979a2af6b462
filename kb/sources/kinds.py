"""The kinds of source and their listers: adding a kind means one module and one line here."""

from __future__ import annotations

from collections.abc import Callable

from kb.models import Source
from kb.sources import folder, git, site
from kb.sources.listing import Entry, ListingError

KINDS: dict[str, Callable[[Source], list[Entry]]] = {
    Source.Kind.FOLDER: folder.list_entries,
    Source.Kind.GIT: git.list_entries,
    Source.Kind.SITE: site.list_entries,
}


def source_list_entries(source: Source) -> list[Entry]:
    """The source's entries, or ListingError with the reason (a kind not built yet is one)."""
    lister = KINDS.get(source.kind)
    if lister is None:
        raise ListingError(f"{source.kind}: this kind of source is not built yet (available: {', '.join(KINDS)})")
    return lister(source)
