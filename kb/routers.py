"""Every query goes to the primary unless a caller names the replica.

The replica is for retrieval only, and only through `search.replica`, which checks before each read that
the replica has replayed every access change: a router choosing by model could not know whether a
lagging replica still shows a chunk whose audience was narrowed a moment ago.
"""

from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS

PRIMARY = DEFAULT_DB_ALIAS


class PrimaryRouter:
    def db_for_read(self, model: type, **hints: Any) -> str:
        return PRIMARY

    def db_for_write(self, model: type, **hints: Any) -> str:
        return PRIMARY

    def allow_relation(self, first: Any, second: Any, **hints: Any) -> bool:
        return True

    def allow_migrate(self, db: str, app_label: str, model_name: str | None = None, **hints: Any) -> bool:
        return db == PRIMARY  # the replica replays the primary's schema
