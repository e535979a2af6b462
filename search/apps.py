from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured


class SearchConfig(AppConfig):
    name = "search"

    def ready(self) -> None:
        from kb.library.events import access_changed, document_indexed
        from search import memory
        from search.answerability import AnswerabilityError, settings_model
        from search.stats import on_access_changed, on_document_indexed

        document_indexed.connect(on_document_indexed, dispatch_uid="search.lexeme_stats")
        document_indexed.connect(memory.on_document_indexed, dispatch_uid="search.memory")
        access_changed.connect(on_access_changed, dispatch_uid="search.acl_lexeme_stats")
        try:  # a broken model fails at start-up, not on the first question
            settings_model()
        except AnswerabilityError as exc:
            raise ImproperlyConfigured(f"KB_ANSWERABILITY: {exc}") from None
