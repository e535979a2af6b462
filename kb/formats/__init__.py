"""Date formats, one per language (settings.FORMAT_MODULE_PATH): each is what the browser's Intl.DateTimeFormat
writes with {dateStyle: "medium"} and {dateStyle: "medium", timeStyle: "short"} in that language, so a date reads
the same from a template (|date:"DATE_FORMAT", the admin) and from a script (KB.formatDate, chat/static/chat/dom.js).
tests/web/test_accessibility.py compares the two in Chromium."""
