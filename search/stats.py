"""Corpus statistics for lexical ranking, refreshed after indexing (debounced on the workers).

`search_lexeme_stats` counts document frequencies over every chunk. Search reads the per-access-list
counts instead (`search_acl_lexeme_stats`, `search_acl_chunk_totals`), per access list and per text
search configuration (each chunk's language has its own: kb.text.language), summed over the access
lists a user's principals overlap (a word among the chunks of the configuration it is analysed with): the
statistics behind a user's ranking and answer/refuse signals are those of the chunks they may read, and do
not move when restricted documents come and go.
"""

from __future__ import annotations

from functools import partial

import redis
from django.conf import settings
from django.db import connection, transaction

from kb import queues
from kb.text.language import DEFAULT

# The chunk total, as an SQL expression: every row of the view carries it, so one row is read, not
# an aggregate over the whole vocabulary (hundreds of thousands of lexemes on a large corpus).
CHUNK_TOTAL_SQL = "(SELECT total FROM search_lexeme_stats LIMIT 1)"


def readable_total_sql(principals: str) -> str:
    """The number of chunks a user may read, as an SQL expression over `principals` (an SQL varchar[]):
    the sum over the access lists that overlap them, each chunk having exactly one."""
    return f"(SELECT sum(t.total) FROM search_acl_chunk_totals t WHERE t.acl && {principals})"  # noqa: S608 (SQL only)


def readable_ndoc_sql(*, word: str, principals: str, config: str | None = None) -> str:
    """In how many chunks a user may read lexeme `word` occurs (NULL: none), among those read with `config`
    where given (a lexeme of one language's stemmer means nothing in another's), as an SQL expression."""
    among = f" AND a.config = {config}" if config else ""
    return (f"(SELECT sum(a.ndoc) FROM search_acl_lexeme_stats a "  # noqa: S608 (SQL expressions, no values)
            f"WHERE a.word = {word} AND a.acl && {principals}{among})")


def readable_languages(principals: list[str] | None) -> set[str]:
    """The languages of the chunks `principals` may read (of every chunk for None), as ISO 639-1 codes; a
    chunk indexed before languages were detected counts as kb.text.language.DEFAULT, as it is read."""
    with connection.cursor() as cursor:
        if principals is None:
            cursor.execute("SELECT DISTINCT t.language FROM search_acl_chunk_totals t")
        else:
            cursor.execute("SELECT DISTINCT t.language FROM search_acl_chunk_totals t WHERE t.acl && %s::varchar[]",
                           [principals])
        return {language or DEFAULT for (language,) in cursor.fetchall()}


def idf_sql(*, ndoc: str, total: str) -> str:
    """BM25's inverse document frequency, ln(1 + (N - n + 0.5) / (n + 0.5)), as an SQL expression over
    a lexeme's chunk count `ndoc` and the chunk total `total` (both SQL expressions themselves)."""
    return f"ln(1 + ({total} - {ndoc} + 0.5) / ({ndoc} + 0.5))"


def gin_indexes() -> list[str]:
    """The GIN indexes searches read. Each takes new rows into a pending list that every search scans in
    full until autovacuum merges it: minutes after a burst of uploads, and a small batch may never trigger
    it (right after the development corpus is indexed, 242 pending pages made the candidate query ~25% slower)."""
    from django.contrib.postgres.indexes import GinIndex

    from kb.library.models import Chunk, Document

    return [index.name for model in (Chunk, Document) for index in model._meta.indexes if isinstance(index, GinIndex)]


def lexeme_stats_refresh() -> None:
    """After indexing: fresh statistics, and the chunks just written merged into the indexes searches read."""
    with connection.cursor() as cursor:
        # CONCURRENTLY keeps searches reading the old statistics while new ones are built;
        # it needs the view to have been populated once, which the migration did.
        cursor.execute("REFRESH MATERIALIZED VIEW CONCURRENTLY search_lexeme_stats")
        cursor.execute("REFRESH MATERIALIZED VIEW CONCURRENTLY search_acl_lexeme_stats")
        cursor.execute("REFRESH MATERIALIZED VIEW CONCURRENTLY search_acl_chunk_totals")
        for index in gin_indexes():
            cursor.execute("SELECT gin_clean_pending_list(%s::regclass)", [index])


def on_document_indexed(sender: object, *, sync: bool, **kwargs: object) -> None:
    """kb.library.events.document_indexed: a waiting caller gets fresh statistics now, workers a debounced refresh."""
    if sync:
        lexeme_stats_refresh()
    else:
        lexeme_stats_schedule()


def on_access_changed(sender: object, **kwargs: object) -> None:
    """kb.library.events.access_changed: chunks moved to other access lists, so the per-list statistics follow."""
    lexeme_stats_schedule()


def lexeme_stats_schedule() -> None:
    """Refresh soon, once for a burst of indexed documents."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    seconds = settings.KB_STATS_REFRESH_SECONDS
    if client.set("kb:lexeme-stats:pending", "1", nx=True, ex=seconds):
        transaction.on_commit(partial(queues.send, "search.refresh_lexeme_stats", countdown=seconds))
