"""Reads "2026年12月6日" and "2026年12月6日 03:18" (kb/formats/__init__.py)."""

DATE_FORMAT = "Y年n月j日"
DATETIME_FORMAT = "Y年n月j日 H:i"
SHORT_DATE_FORMAT = DATE_FORMAT  # one format per language: a short date is the same date
SHORT_DATETIME_FORMAT = DATETIME_FORMAT
