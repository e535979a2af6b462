"""Reads over documents that more than one surface needs."""

from __future__ import annotations

from dataclasses import asdict

from django.db.models import Q, QuerySet

from kb.ingest.version import IndexVersion, current_index_version
from kb.models import Document


def document_index_version(document: Document) -> IndexVersion:
    return IndexVersion(
        embedding_model=document.embedding_model,
        embedding_dimensions=document.embedding_dimensions or 0,
        pipeline_version=document.pipeline_version or 0,
        extractor_version=document.extractor_version or 0,
    )


def documents_stale(queryset: QuerySet[Document] | None = None) -> QuerySet[Document]:
    """Ready documents indexed under another model, dimension, pipeline or extractor version."""
    base = Document.objects.all() if queryset is None else queryset
    return base.filter(status=Document.Status.READY).exclude(Q(**asdict(current_index_version())))


def document_is_stale(document: Document) -> bool:
    return document.status == Document.Status.READY and document_index_version(document) != current_index_version()
