"""Reads "Dec 6, 2026" and "Dec 6, 2026, 3:18 AM" (kb/formats/__init__.py)."""

DATE_FORMAT = "M j, Y"
DATETIME_FORMAT = "M j, Y, g:i A"
SHORT_DATE_FORMAT = DATE_FORMAT  # one format per language: a short date is the same date
SHORT_DATETIME_FORMAT = DATETIME_FORMAT
