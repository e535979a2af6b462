"""Tests start from corpus statistics of their own tables: never an earlier test's (tests/conftest.py)."""

from __future__ import annotations

import pytest
from django.db import connection

from tests.factories import ingested_document


def statistics_rows() -> int:
    """Rows of every statistics view: the corpus-wide one and the per-access-list ones search reads."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT (SELECT count(*) FROM search_lexeme_stats), (SELECT count(*) FROM search_acl_lexeme_stats),"
                       " (SELECT count(*) FROM search_acl_chunk_totals)")
        counts = cursor.fetchone()
    assert (counts[0] > 0) == (counts[1] > 0) == (counts[2] > 0), counts
    return int(sum(counts))


@pytest.mark.django_db(transaction=True)
def test_a_test_that_commits_leaves_statistics_behind() -> None:
    ingested_document("# Quarry\n\nThe quarry ships granite blocks to the harbour every Tuesday.", "quarry.md")
    assert statistics_rows() > 0  # committed, as a worker's refresh would be


@pytest.mark.django_db(transaction=True)  # pytest-django runs tests that commit after all others, in file order
def test_the_next_test_finds_them_emptied_with_the_tables() -> None:
    assert statistics_rows() == 0
