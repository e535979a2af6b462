"""Reads about sources: which a user may see, and each one's index lag from its pending and failed
changes (kb.library.models.SourceChange), as the admin, /api/sources, the library, /healthz and /metrics show them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, Min, Q, QuerySet
from django.utils import timezone

from kb.library.access import folders_readable, staff_may
from kb.library.models import Source, SourceChange

FAILURES_SHOWN = 20  # failed files listed per source; the count is always whole


def sources_viewable(user: Any) -> QuerySet[Source]:
    """The sources `user` may see by the staff rule: staff holding kb.view_source see those whose folder
    they may read (its documents take that folder's access); superusers all; anyone else none."""
    if not staff_may(user, "kb.view_source"):
        return Source.objects.none()
    if user.is_superuser:
        return Source.objects.all()
    return Source.objects.filter(folder__in=folders_readable(user))


@dataclass
class SourceLag:
    pending: int = 0  # changes seen at the source, not searchable yet
    failed: int = 0  # files that failed, each with its reason
    oldest_pending: datetime | None = None  # when the oldest pending change happened at the source
    failures: list[tuple[str, str]] = field(default_factory=list)  # (path, reason), the first FAILURES_SHOWN

    def lag_seconds(self, now: datetime | None = None) -> float:
        """The age of the oldest change not yet searchable; 0 when every change seen is searchable."""
        if self.oldest_pending is None:
            return 0.0
        return max(0.0, ((now or timezone.now()) - self.oldest_pending).total_seconds())


def with_lag(sources: QuerySet[Source]) -> QuerySet[Source]:
    """`sources` with their lag figures annotated (read them with `lag_of`), in the same query."""
    pending = Q(changes__failure_reason="")
    annotated = sources.annotate(lag_pending=Count("changes", filter=pending), lag_failed=Count("changes", filter=~pending),
                                 lag_oldest=Min("changes__since", filter=pending))
    # A grouped query drops the model's default ordering: keep sources by name unless asked otherwise.
    return annotated if annotated.ordered else annotated.order_by("name")


def lag_of(source: Any) -> SourceLag:
    """The lag figures of a source read through `with_lag`."""
    return SourceLag(pending=source.lag_pending, failed=source.lag_failed, oldest_pending=source.lag_oldest)


def sources_lag(source_ids: Iterable[int], *, failures: bool = False) -> dict[int, SourceLag]:
    """Each given source's lag figures; `failures` lists its failed files too (the first FAILURES_SHOWN)."""
    lags = {source.pk: lag_of(source) for source in with_lag(Source.objects.filter(pk__in=list(source_ids))).only("pk")}
    if failures:
        failed = SourceChange.objects.filter(source_id__in=list(lags)).exclude(failure_reason="").order_by("source_id", "path")
        for change in failed.only("source_id", "path", "failure_reason"):
            shown = lags[change.source_id].failures
            if len(shown) < FAILURES_SHOWN:
                shown.append((change.path, change.failure_reason))
    return lags
