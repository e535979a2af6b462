from django.apps import AppConfig


class SearchConfig(AppConfig):
    name = "search"

    def ready(self) -> None:
        from kb.events import document_indexed
        from search.stats import on_document_indexed

        document_indexed.connect(on_document_indexed, dispatch_uid="search.lexeme_stats")
