from django.apps import AppConfig


class LibraryConfig(AppConfig):
    """Documents, folders, chunks, sources and the ingestion pipeline. The label stays "kb": the tables,
    permissions (kb.view_document) and migrations are the ones the project had before the app moved."""

    name = "kb.library"
    label = "kb"
    verbose_name = "Knowledge base"

    def ready(self) -> None:
        """Documents a worker dies indexing are queued again by the worker upkeep (kb.upkeep)."""
        from kb import upkeep
        from kb.library.services import DOCUMENT_LEASE

        upkeep.lease_register(DOCUMENT_LEASE)
