"""Company knowledge base: the project package (settings, URLs, ASGI, the Celery app, the dev runtime);
the documents app is kb.library."""

from kb.celery import app as celery_app

__all__ = ["celery_app"]
