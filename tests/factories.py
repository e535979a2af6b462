"""The one way tests create documents: upload through the service, then (mostly) index in this process."""

from __future__ import annotations

import io
from typing import Any

from kb.library.ingest.pipeline import ingest
from kb.library.models import Document
from kb.library.services import document_upload


def uploaded_document(text: str | bytes, name: str = "guide.md", **access: Any) -> Document:
    """Stored and queued as an admin upload leaves it, not indexed (no Celery job is enqueued)."""
    data = text.encode() if isinstance(text, str) else text
    return document_upload(name=name, stream=io.BytesIO(data), size=len(data), enqueue=False, **access).document


def ingested_document(text: str | bytes, name: str = "guide.md", **access: Any) -> Document:
    """Uploaded and indexed by the real pipeline; fails the test unless it ends READY."""
    document = uploaded_document(text, name, **access)
    assert ingest(document.pk) == Document.Status.READY, Document.objects.get(pk=document.pk).failure_reason
    document.refresh_from_db()  # ingestion sets the title, canonical text and counts
    return document
