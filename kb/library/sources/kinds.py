"""The kinds of source and their listers: adding a kind means one module and one line here."""

from __future__ import annotations

from collections.abc import Callable

from kb.library.models import Source
from kb.library.sources import folder, git, site
from kb.library.sources.listing import Entry, ListingError

KINDS: dict[str, Callable[[Source], list[Entry]]] = {
    Source.Kind.FOLDER: folder.list_entries,
    Source.Kind.GIT: git.list_entries,
    Source.Kind.SITE: site.list_entries,
}


def source_list_entries(source: Source) -> list[Entry]:
    """The source's entries, or ListingError with the reason."""
    lister = KINDS.get(source.kind)
    if lister is None:  # a row of a kind this version does not have (written by a newer one, or by hand)
        raise ListingError(f"{source.kind!r}: not a kind of source this version knows (the kinds: {', '.join(KINDS)})")
    return lister(source)
