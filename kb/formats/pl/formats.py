"""Reads "6 gru 2026" and "6 gru 2026, 03:18" (kb/formats/__init__.py)."""

DATE_FORMAT = "j b Y"
DATETIME_FORMAT = "j b Y, H:i"
SHORT_DATE_FORMAT = DATE_FORMAT  # one format per language: a short date is the same date
SHORT_DATETIME_FORMAT = DATETIME_FORMAT
