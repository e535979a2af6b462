from django.apps import AppConfig


class LibraryConfig(AppConfig):
    """Documents, folders, chunks, sources and the ingestion pipeline. The label stays "kb": the tables,
    permissions (kb.view_document) and migrations are the ones the project had before the app moved."""

    name = "kb.library"
    label = "kb"
    verbose_name = "Knowledge base"
