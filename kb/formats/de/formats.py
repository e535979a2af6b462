"""Reads "06.12.2026" and "06.12.2026, 03:18" (kb/formats/__init__.py)."""

DATE_FORMAT = "d.m.Y"
DATETIME_FORMAT = "d.m.Y, H:i"
SHORT_DATE_FORMAT = DATE_FORMAT  # one format per language: a short date is the same date
SHORT_DATETIME_FORMAT = DATETIME_FORMAT
