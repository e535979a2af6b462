"""The Celery app; tasks live in each app's tasks.py and stay thin wrappers over services."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.settings")

app = Celery("kb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.task(name="kb.ping")
def ping(value: str) -> str:
    """Round trip through the broker and result backend; used by health checks and tests."""
    return f"pong:{value}"
