"""The one way tests create documents: upload through the service, then (mostly) index in this process."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from kb.library.ingest.pipeline import ingest
from kb.library.models import Document
from kb.library.services import document_upload
from search.stats import lexeme_stats_refresh


def uploaded_document(text: str | bytes, name: str = "guide.md", **access: Any) -> Document:
    """Stored and queued as an admin upload leaves it, not indexed (no Celery job is enqueued)."""
    data = text.encode() if isinstance(text, str) else text
    return document_upload(name=name, stream=io.BytesIO(data), size=len(data), enqueue=False, **access).document


def ingested_document(text: str | bytes, name: str = "guide.md", **access: Any) -> Document:
    """Uploaded and indexed by the real pipeline, then the corpus statistics refreshed as a worker refreshes them
    after indexing (otherwise ranking would weigh words by whatever an earlier test left committed); fails the
    test unless it ends READY."""
    document = uploaded_document(text, name, **access)
    assert ingest(document.pk) == Document.Status.READY, Document.objects.get(pk=document.pk).failure_reason
    lexeme_stats_refresh()
    document.refresh_from_db()  # ingestion sets the title, canonical text and counts
    return document


def ingested_folder(folder: Path) -> list[Document]:
    """Every Markdown file of a demo corpus folder, indexed: a test's corpus that is more than one document,
    so the statistics weigh a question's words as the demo's would."""
    return [ingested_document(path.read_bytes(), path.name) for path in sorted(folder.glob("*.md"))]
