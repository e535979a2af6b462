"""Swap a document's chunks for a new set in one transaction and stamp the index version."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from django.db import transaction
from django.db.models import Count, Max, Sum
from django.utils import timezone

from kb.library.ingest import headings as located_headings
from kb.library.ingest.chunking import Draft
from kb.library.ingest.extract import Extracted, Heading
from kb.library.ingest.version import current_index_version
from kb.library.models import Chunk, Document
from kb.text import identifiers, language


class Superseded(Exception):
    """The document changed version while this run worked on an older one."""


@transaction.atomic
def replace_chunks(
    *,
    document: Document,
    title: str,
    extracted: Extracted,
    headings: Sequence[Heading],
    drafts: Sequence[Draft],
    audiences: Sequence[str],
    vectors: np.ndarray,
    version: int,
    late: Sequence[bytes],
    multilingual: Sequence[np.ndarray | None],
    detected: str,
    chunks_detected: Sequence[str],
) -> None:
    """Readers see either all the old chunks or all the new ones, never a mix or neither.

    `multilingual` holds each chunk's vector in the multilingual space (None: the space is off); `detected` and
    `chunks_detected` are the languages detection found for the text and for each chunk (kb.text.language).
    `headings` are the viewer's (kb.library.ingest.headings.locate), stored with the text they point into.
    The new chunks bring their version's audience (`pending_acl`) with them, in the same
    transaction. Raises Superseded, writing nothing, when the document was uploaded again
    after `version` was read: the newer upload's own run indexes it.
    """
    locked = Document.objects.select_for_update().get(pk=document.pk)
    if locked.version != version:
        raise Superseded(f"document {locked.pk} is at version {locked.version}, this run read {version}")
    acl = locked.acl if locked.pending_acl is None else locked.pending_acl
    # An admin's language (`language_fixed`) is every chunk's: they corrected what detection found.
    fixed = locked.language if locked.language_fixed and locked.language else ""
    document_language = fixed or detected
    languages = [fixed] * len(drafts) if fixed else list(chunks_detected)
    configs = [language.config_for(lang) for lang in languages]
    Chunk.objects.filter(document=locked).delete()
    Chunk.objects.bulk_create(
        [
            Chunk(
                document=locked,
                ordinal=draft.ordinal,
                stable_id=draft.stable_id,
                kind=draft.kind,
                audience=audience,
                breadcrumb=" > ".join(draft.breadcrumb)[:1000],
                text=draft.text,
                content=draft.content,
                start=draft.start,
                end=draft.end,
                page=draft.page,
                part=draft.part,
                parts=draft.parts,
                split_group=draft.group or "",
                tokens=draft.tokens,
                embedding=vector,
                multilingual_embedding=other,
                late_vectors=coarse,
                identifiers=identifiers.searchable(draft.text),
                acl=acl,
                language=chunk_language,
                search_config=config,
                search_text=language.search_text(draft.text, config),
            )
            for draft, audience, vector, coarse, other, chunk_language, config in zip(
                drafts, audiences, vectors, late, multilingual, languages, configs, strict=True
            )
        ],
        batch_size=500,
    )
    # Counts come from what was stored, not from what the pipeline meant to store.
    stored = Chunk.objects.filter(document=locked).aggregate(n=Count("pk"), total=Sum("tokens"), top=Max("tokens"))
    stamp = current_index_version()
    Document.objects.filter(pk=locked.pk).update(
        status=Document.Status.READY,
        acl=acl,
        pending_acl=None,
        canonical_text=extracted.text,
        pages=[[page.start, page.end] for page in extracted.pages],
        headings=located_headings.stored(headings),
        warnings=list(extracted.warnings),
        title=title,
        language=document_language,
        language_detected=detected,
        chunk_count=stored["n"] or 0,
        token_total=stored["total"] or 0,
        token_max=stored["top"] or 0,
        embedding_model=stamp.embedding_model,
        embedding_dimensions=stamp.embedding_dimensions,
        pipeline_version=stamp.pipeline_version,
        extractor_version=stamp.extractor_version,
        late_version=stamp.late_version,
        multilingual_model=stamp.multilingual_model,
        indexed_at=timezone.now(),
        updated_at=timezone.now(),
    )
