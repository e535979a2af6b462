from __future__ import annotations

import subprocess
from typing import Any

import pytest
from django.test import Client

from kb.health import health_report


def test_report_names_the_failed_check() -> None:
    def broken() -> dict[str, Any]:
        raise RuntimeError("disk on fire")

    report = health_report({"fine": lambda: {"x": 1}, "broken": broken})
    assert report["ok"] is False
    assert report["failed"] == ["broken"]
    assert report["checks"]["broken"]["error"] == "RuntimeError: disk on fire"
    assert report["checks"]["fine"] == {"ok": True, "x": 1}


@pytest.mark.django_db(transaction=True)
def test_healthz_is_200_with_every_service_up(
    client: Client, celery_worker: subprocess.Popen[str], people: dict[str, Any]
) -> None:
    assert client.get("/healthz").json() == {"ok": True, "failed": []}  # anonymous: the status only
    client.force_login(people["admin"])
    response = client.get("/healthz")
    body = response.json()
    assert response.status_code == 200, body
    checks = body["checks"]
    assert checks["pgvector"]["version"].startswith("0.8")
    assert checks["embedding"]["dimensions"] == 384
    assert checks["celery"]["workers"]
    assert checks["redis"]["ok"] and checks["database"]["ok"]
    assert checks["reranker"] == {"ok": True, "status": "off", "late_interaction": "on (top 20)"}


@pytest.mark.django_db
def test_healthz_is_503_naming_celery_when_no_worker_runs(client: Client, settings: Any) -> None:
    settings.KB_HEALTH_CELERY_TIMEOUT = 0.5
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json() == {"ok": False, "failed": ["celery"]}  # no host names or errors for anonymous callers
