"""The Celery queues: ingestion and answers each have their own workers (docs/SCALING.md).

A plain module, so the launcher can name the queues without loading Django's settings.
"""

from __future__ import annotations

INGEST = "ingest"  # documents, and everything else not routed elsewhere
ANSWERS = "answers"  # chat answers: latency-bound, never behind a document
