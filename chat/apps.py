from django.apps import AppConfig


class ChatConfig(AppConfig):
    name = "chat"

    def ready(self) -> None:
        """Curated answers follow their cited passages: a new version of a document, or its deletion, makes an
        approved answer citing a changed passage stale (chat.review.curated). Answers a worker dies producing are
        failed by the worker upkeep (kb.upkeep)."""
        from django.db.models.signals import pre_delete

        from chat.review import curated
        from chat.services import ANSWER_LEASE
        from kb import upkeep
        from kb.library.events import document_indexed
        from kb.library.models import Document

        document_indexed.connect(curated.on_document_indexed, dispatch_uid="chat.review.curated")
        pre_delete.connect(curated.on_document_deleted, sender=Document, dispatch_uid="chat.review.curated.deleted")
        upkeep.lease_register(ANSWER_LEASE)
