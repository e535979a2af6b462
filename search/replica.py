"""Retrieval reads on a streaming replica, never from a replica that has not seen the last revocation.

A replica replays the primary's commits some time after they happen. Retrieval filters chunks by their
ACL inside the query, so a replica that has not replayed a revocation yet would still rank the chunk for
the people who just lost it. The rule: before each read, compare the one row of `kb_access_change`
(kb migration 0011: the primary's WAL position at the last commit that changed or deleted a chunk's
ACL) on the primary with the replica's copy. The replica serves the read only when its copy is at
least the primary's, which means it has replayed every access change committed before this request
began; otherwise the read goes to the primary. The replica only moves forward, so the retrieval
query that follows on the same connection sees at least that much.

A replica that is down, refuses, or cancels a query (a recovery conflict) sends retrieval to the
primary for KB_REPLICA_RETRY_SECONDS, so a dead replica costs one connect timeout, not one per request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS as PRIMARY
from django.db import DatabaseError, connections

log = logging.getLogger(__name__)

REPLICA = "replica"
T = TypeVar("T")

_LSN = "SELECT coalesce((SELECT lsn FROM kb_access_change WHERE id = 1), '0/0'::pg_lsn)"
_lock = threading.Lock()
_resting_until = 0.0


def configured() -> bool:
    return REPLICA in settings.DATABASES


def _resting() -> bool:
    return time.monotonic() < _resting_until


def rest(reason: BaseException) -> None:
    """Keep reads off the replica for KB_REPLICA_RETRY_SECONDS, and drop this thread's connection to it: the
    next try opens a new one (a worker may go on for hours without a request's end to close a broken one)."""
    global _resting_until
    with _lock:
        _resting_until = time.monotonic() + settings.KB_REPLICA_RETRY_SECONDS
    try:
        connections[REPLICA].close()
    except DatabaseError:
        pass  # already broken: closing it is all that was wanted
    log.warning("retrieval reads the primary for %.0f s: the replica failed (%s)", settings.KB_REPLICA_RETRY_SECONDS,
                str(reason).strip().splitlines()[0] if str(reason).strip() else type(reason).__name__)


def access_lsn(alias: str) -> str:
    """The WAL position of the last access change, as the server at `alias` has it (the primary's own, or
    how far a replica has replayed it)."""
    with connections[alias].cursor() as cursor:
        cursor.execute(_LSN)
        row = cursor.fetchone()
    return str(row[0])


def caught_up(primary: str | None = None) -> bool:
    """Whether the replica has replayed every access change the primary has committed (`primary`: the
    primary's `access_lsn`, read by the caller)."""
    primary = primary or access_lsn(PRIMARY)
    with connections[REPLICA].cursor() as cursor:
        cursor.execute(f"SELECT ({_LSN}) >= %s::pg_lsn", [primary])
        row = cursor.fetchone()
    return bool(row and row[0])


def read_alias() -> str:
    """Where retrieval may read now: the replica when it is configured, answering and caught up, else the primary."""
    if not configured() or _resting():
        return PRIMARY
    primary = access_lsn(PRIMARY)  # outside the try: a failing primary is not the replica's fault
    try:
        return REPLICA if caught_up(primary) else PRIMARY
    except DatabaseError as exc:
        rest(exc)
        return PRIMARY


def on_read_alias(read: Callable[[str], T]) -> T:
    """`read(alias)` where `read_alias` says, again on the primary when the replica fails part way."""
    alias = read_alias()
    if alias == PRIMARY:
        return read(PRIMARY)
    try:
        return read(alias)
    except DatabaseError as exc:
        rest(exc)
        return read(PRIMARY)


def state() -> dict[str, Any]:
    """For the health report: where retrieval reads now, and why. A replica down or behind is not the service
    down (reads go to the primary), so this never fails the check."""
    if not configured():
        return {"replica": "none", "reads": PRIMARY}
    primary = access_lsn(PRIMARY)
    try:
        behind = not caught_up(primary)
        with connections[REPLICA].cursor() as cursor:
            # Since the last replayed commit, unless everything received is replayed: an idle primary is no lag.
            cursor.execute("SELECT CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0 "
                           "ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp()) END")
            row = cursor.fetchone()
    except DatabaseError as exc:
        return {"replica": f"unreachable ({type(exc).__name__})", "reads": PRIMARY}
    lag = round(float(row[0]), 3) if row and row[0] is not None else None
    status = "behind the last access change" if behind else "caught up"
    return {"replica": status, "replay_lag_seconds": lag, "reads": PRIMARY if behind or _resting() else REPLICA}
