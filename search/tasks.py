from __future__ import annotations

from celery import shared_task


@shared_task(name="search.refresh_lexeme_stats", ignore_result=True)
def refresh_lexeme_stats() -> None:
    from search.stats import lexeme_stats_refresh

    lexeme_stats_refresh()
