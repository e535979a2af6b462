"""The index version: what a document's chunks were built with.

A document is stale when any part differs from the running code and settings; its
chunks then need re-indexing (and retrieval refuses an index built by another model).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from kb.library.ingest.chunking import PIPELINE_VERSION
from kb.library.ingest.extract import EXTRACTOR_VERSION
from kb.text.multilingual import model_name as multilingual_model_name
from kb.text.pieces import LATE_VERSION


@dataclass(frozen=True)
class IndexVersion:
    embedding_model: str
    embedding_dimensions: int
    pipeline_version: int
    extractor_version: int
    late_version: int
    multilingual_model: str  # empty: the multilingual space is off (KB_MULTILINGUAL)

    def label(self) -> str:
        return (
            f"{self.embedding_model}/{self.embedding_dimensions}d · "
            f"pipeline v{self.pipeline_version} · extractor v{self.extractor_version} · late v{self.late_version}"
            + (f" · {self.multilingual_model}" if self.multilingual_model else "")
        )


def current_index_version() -> IndexVersion:
    return IndexVersion(
        embedding_model=settings.KB_EMBEDDING_MODEL,
        embedding_dimensions=settings.KB_EMBEDDING_DIMENSIONS,
        pipeline_version=PIPELINE_VERSION,
        extractor_version=EXTRACTOR_VERSION,
        late_version=LATE_VERSION,
        multilingual_model=multilingual_model_name(),
    )
