"""What the documents app announces: a document's status changed (for `/ws/library/`), a document was
indexed (for search's statistics). Publishers import this module, never a consumer or another app."""

from __future__ import annotations

import logging
from typing import TypedDict

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.dispatch import Signal

log = logging.getLogger(__name__)

GROUP = "kb.documents"

# Sent once documents are READY, with document_ids: list[int] and sync: bool (True when they were
# indexed in this process by a caller that waits, e.g. `ingest --sync`; False from a Celery worker).
document_indexed = Signal()
# Sent after the transaction that changed who may read documents commits, with document_ids: list[int]:
# search's word statistics are kept per access list, so they must follow (docs/SECURITY.md, "Refusal signals").
access_changed = Signal()


class DocumentStatusEvent(TypedDict):
    type: str  # "document.status" -> DocumentStatusConsumer.document_status
    id: int


def publish_document_status(document_id: int) -> None:
    """Tell open library pages that a document's status changed. Never raises: a channel
    layer hiccup must not fail an ingestion (pages also poll what they watch)."""
    layer = get_channel_layer()
    if layer is None:
        return
    event: DocumentStatusEvent = {"type": "document.status", "id": int(document_id)}
    try:
        async_to_sync(layer.group_send)(GROUP, dict(event))
    except Exception:  # Redis down, channel full: the page's poll catches up
        log.warning("could not publish the status of document %s", document_id, exc_info=True)
