"""Company knowledge base: project package (settings, URLs, ASGI, Celery) and the ingestion side."""

from kb.celery import app as celery_app

__all__ = ["celery_app"]
