"""Which scheduled sources are due a run: Celery beat asks every minute (kb.library.tasks.sources_due)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection
from django.utils import timezone

from kb.library.models import Source
from kb.library.sources.sync import LOCK_CLASS

# Beat asks once a minute (kb/celery.py) and a run starts a little after the tick that queued it; without
# slack, a source every 60 s found 59.x s passed at the next tick and ran every other minute (bench/sync.py).
TICK_SLACK = timedelta(seconds=30)


def sources_running() -> set[int]:
    """Ids of the sources whose run lock is held now, by any session (kb.library.sources.sync.source_lock). The
    lock, not `last_status`, says a run is under way: a worker killed mid-run leaves `running` behind."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT objid FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND objsubid = 2 "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            [LOCK_CLASS],
        )
        return {int(row[0]) for row in cursor.fetchall()}


def sources_due(now: datetime | None = None) -> list[Source]:
    """Scheduled sources whose interval has passed since their last run started, give or take half a tick
    (never run: due at once), except those with a run under way."""
    now = now or timezone.now()
    running = sources_running()
    return [
        source for source in Source.objects.filter(every__isnull=False).exclude(pk__in=running)
        if source.every and (source.last_started_at is None or source.last_started_at + timedelta(seconds=source.every) <= now + TICK_SLACK)
    ]
