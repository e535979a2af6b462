from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client

from kb import health
from kb.health import health_report
from kb.library.models import Folder, Source
from kb.library.services import folder_set_access
from kb.library.sources.sync import source_sync


@pytest.fixture(autouse=True)
def _no_ping_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no worker ping kept from another: /healthz reuses one for a few seconds."""
    monkeypatch.setattr(health.check_celery, "_last", None)


def test_report_names_the_failed_check() -> None:
    def broken() -> dict[str, Any]:
        raise RuntimeError("disk on fire")

    report = health_report({"fine": lambda: {"x": 1}, "broken": broken})
    assert report["ok"] is False
    assert report["failed"] == ["broken"]
    assert report["checks"]["broken"]["error"] == "RuntimeError: disk on fire"
    assert report["checks"]["fine"] == {"ok": True, "x": 1}


def test_a_check_is_not_run_when_the_service_it_needs_failed() -> None:
    pinged: list[str] = []

    def down() -> dict[str, Any]:
        raise RuntimeError("REDIS_URL: cannot connect")

    def ping() -> dict[str, Any]:
        pinged.append("celery")
        return {}

    report = health_report({"redis": down, "celery": ping, "database": lambda: {}})
    assert report["failed"] == ["redis", "celery"] and not pinged
    assert report["checks"]["celery"] == {"ok": False, "error": "not checked: redis is unreachable"}
    report = health_report({"redis": lambda: {}, "celery": ping})
    assert report["ok"] and pinged == ["celery"]


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
    assert checks["replica"] == {"ok": True, "replica": "none", "reads": "default"}


@pytest.mark.django_db
def test_healthz_is_503_naming_celery_when_no_worker_runs(client: Client, settings: Any) -> None:
    settings.KB_HEALTH_CELERY_TIMEOUT = 0.5
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json() == {"ok": False, "failed": ["celery"]}  # no host names or errors for anonymous callers


@pytest.mark.django_db(transaction=True)
def test_rapid_and_concurrent_healthz_calls_share_one_worker_ping(
    client: Client, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28, item 12: anyone may call /healthz, and a ping is a broadcast all workers answer (or a wait of
    KB_HEALTH_CELERY_TIMEOUT when none does): one ping serves every call for KB_HEALTH_CELERY_CACHE_SECONDS."""
    from kb.celery import app

    settings.KB_HEALTH_CELERY_TIMEOUT = 0.5
    settings.KB_HEALTH_CELERY_CACHE_SECONDS = 60.0
    pings: list[float] = []
    ping = app.control.ping

    def counted(*args: Any, **kwargs: Any) -> Any:
        pings.append(time.monotonic())
        return ping(*args, **kwargs)

    monkeypatch.setattr(app.control, "ping", counted)
    answers: list[tuple[int, Any]] = []

    def call() -> None:
        try:
            response = Client().get("/healthz")
            answers.append((response.status_code, response.json()))
        finally:
            connection.close()

    threads = [threading.Thread(target=call) for _ in range(6)]  # and this thread: within the pool's 8 connections
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    answers += [(r.status_code, r.json()) for r in (client.get("/healthz") for _ in range(10))]
    assert answers == [(503, {"ok": False, "failed": ["celery"]})] * 16  # no worker runs: the failure is reused too
    assert len(pings) == 1

    settings.KB_HEALTH_CELERY_CACHE_SECONDS = 0.2  # once the period has passed, the next call pings again
    time.sleep(0.3)
    assert client.get("/healthz").status_code == 503 and len(pings) == 2


@pytest.mark.django_db
def test_source_detail_is_for_staff_who_may_read_the_sources_folder(
    client: Client, settings: Any, people: dict[str, Any], tmp_path: Path
) -> None:
    settings.KB_HEALTH_CELERY_TIMEOUT = 0.1  # no worker here: the checks' outcome does not matter
    engineering = Folder.objects.create(name="Engineering", public=False)
    folder_set_access(folder=engineering, public=False, groups=[people["groups"]["engineering"]])
    share = tmp_path / "runbooks"
    share.mkdir()
    (share / "pager.md").write_text("# Pager\n\nThe on-call engineer acknowledges a page within five minutes.\n")
    source = Source.objects.create(name="runbooks", kind="folder", location=str(share), folder=engineering)
    assert source_sync(source).status == "ok"
    view_source = Permission.objects.filter(content_type__app_label="kb", codename="view_source")

    def detail(user: Any) -> Any:
        if user is not None:
            client.force_login(user)
        body = client.get("/healthz").json()
        client.logout()
        return body

    assert set(detail(None)) == {"ok", "failed"}  # anonymous: the status only
    assert set(detail(people["alice"])) == {"ok", "failed"}  # in the folder's group, not staff
    outsider = User.objects.create_user("ops-finance", is_staff=True)
    outsider.groups.set([people["groups"]["finance"]])
    outsider.user_permissions.set(view_source)
    assert detail(outsider)["sources"] == []  # staff, the permission, but not the folder
    insider = User.objects.create_user("ops-eng", is_staff=True)
    insider.groups.set([people["groups"]["engineering"]])
    assert detail(insider)["sources"] == []  # the folder, not the permission
    insider.user_permissions.set(view_source)
    (shown,) = detail(insider)["sources"]
    source.refresh_from_db()
    assert shown["name"] == "runbooks" and shown["last_status"] == "ok"
    assert shown["last_success_at"] == source.last_success_at.isoformat()
    assert (shown["lag_seconds"], shown["files_pending"], shown["files_failed"]) == (0, 0, 0)
    assert shown["last_change_lag_seconds"] == source.last_lag_seconds is not None
    assert [s["name"] for s in detail(people["admin"])["sources"]] == ["runbooks"]
