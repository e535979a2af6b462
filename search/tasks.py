"""Celery interface to search's upkeep; the work is in search.stats."""

from __future__ import annotations

from celery import shared_task

from search.stats import lexeme_stats_refresh


@shared_task(name="search.refresh_lexeme_stats", ignore_result=True)
def refresh_lexeme_stats() -> None:
    lexeme_stats_refresh()
