"""/api/sources (issue 27): each endpoint, the staff rule (non-staff, staff without the permission, staff who
cannot read the source's folder), no credentials shown, and "sync now" running on a real worker."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from accounts.tokens import token_create
from kb.library.models import Document, Folder, Source
from kb.library.services import folder_set_access
from kb.library.sources.sync import source_sync

PERMS = ("view_source", "add_source", "change_source", "delete_source")


def as_user(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def staff(name: str, *perms: str, groups: tuple[Any, ...] = ()) -> User:
    user = User.objects.create_user(name, password=name, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="kb", codename__in=perms))
    user.groups.set(groups)
    return user


def send(client: Client, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    return getattr(client, method)(path, data=json.dumps(body) if body is not None else None,
                                   content_type="application/json")


@pytest.fixture(autouse=True)
def _folder_roots(settings: Any, tmp_path: Path) -> None:
    """The operator allows sources under the test's temporary directory (kb.library.sources.policy)."""
    settings.KB_SOURCE_FOLDER_ROOTS = [str(tmp_path)]


@pytest.fixture
def shelf(people: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """A public folder filled from a directory, a finance-only folder filled from another."""
    handbook = Folder.objects.create(name="Handbook")
    finance = Folder.objects.create(name="Finance")
    folder_set_access(folder=handbook, public=True)
    folder_set_access(folder=finance, public=False, groups=[people["groups"]["finance"]])
    share = tmp_path / "share"
    share.mkdir()
    (share / "parking.md").write_text("# Parking\n\nVisitors park in bay seventeen behind the loading dock.\n")
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    return {
        "handbook": handbook,
        "finance": finance,
        "share": share,
        "public": Source.objects.create(name="share", kind="folder", location=str(share), folder=handbook),
        "secret": Source.objects.create(name="ledger", kind="folder", location=str(ledger), folder=finance),
        "manager": staff("manager", *PERMS),  # may read Handbook, not Finance
        "viewer": staff("viewer", "view_source"),
    }


def endpoints(pk: int) -> list[tuple[str, str, dict[str, Any] | None]]:
    return [
        ("get", "/api/sources", None),
        ("post", "/api/sources", {"name": "x", "kind": "folder", "location": "/srv/x", "folder": 1}),
        ("get", f"/api/sources/{pk}", None),
        ("patch", f"/api/sources/{pk}", {"every": "1h"}),
        ("delete", f"/api/sources/{pk}", None),
        ("post", f"/api/sources/{pk}/sync", None),
    ]


# --------------------------------------------------------------------------- who may


def test_to_anyone_not_staff_there_are_no_source_endpoints(people: dict[str, Any], shelf: dict[str, Any]) -> None:
    for method, path, body in endpoints(shelf["public"].pk):
        assert send(as_user(people["alice"]), method, path, body).status_code == 404, (method, path)
        assert send(Client(), method, path, body).status_code == 401, (method, path)
    assert Source.objects.count() == 2 and Source.objects.get(pk=shelf["public"].pk).every is None


def test_staff_need_the_model_permission_for_each_action(shelf: dict[str, Any]) -> None:
    nothing = as_user(staff("nothing"))
    for method, path, body in endpoints(shelf["public"].pk):
        response = send(nothing, method, path, body)
        assert response.status_code == 403 and "permission" in response.json()["detail"], (method, path)
    viewer = as_user(shelf["viewer"])
    assert send(viewer, "get", f"/api/sources/{shelf['public'].pk}").status_code == 200
    for method, path, body in endpoints(shelf["public"].pk)[1:]:
        if method != "get":
            assert send(viewer, method, path, body).status_code == 403, (method, path)
    assert Source.objects.count() == 2 and Source.objects.get(pk=shelf["public"].pk).every is None


def test_a_source_whose_folder_staff_cannot_read_is_not_there_for_them(shelf: dict[str, Any]) -> None:
    manager = as_user(shelf["manager"])
    assert [s["name"] for s in manager.get("/api/sources").json()] == ["share"]
    secret = shelf["secret"].pk
    for method, path, body in endpoints(secret)[2:]:
        assert send(manager, method, path, body).status_code == 404, (method, path)
    refused = send(manager, "post", "/api/sources", {"name": "mine", "kind": "folder", "location": "/srv/mine",
                                                     "folder": shelf["finance"].pk})
    assert refused.status_code == 404
    assert set(Source.objects.values_list("name", flat=True)) == {"share", "ledger"}
    assert Source.objects.get(pk=secret).last_status == Source.RunStatus.NEVER  # no sync was queued either


def test_staff_in_the_folders_group_manage_its_source(people: dict[str, Any], shelf: dict[str, Any]) -> None:
    finance_manager = as_user(staff("fm", *PERMS, groups=(people["groups"]["finance"],)))
    assert {s["name"] for s in finance_manager.get("/api/sources").json()} == {"share", "ledger"}
    changed = send(finance_manager, "patch", f"/api/sources/{shelf['secret'].pk}", {"every": "2h"})
    assert changed.status_code == 200 and changed.json()["every_seconds"] == 7200


def test_a_token_needs_documents_write_to_change_a_source(people: dict[str, Any], shelf: dict[str, Any]) -> None:
    _, raw = token_create(user=people["admin"], scopes=["documents:read"])
    token = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    assert Client().get("/api/sources", **token).status_code == 200
    response = Client().patch(f"/api/sources/{shelf['public'].pk}", data='{"every": "1h"}',
                              content_type="application/json", **token)
    assert response.status_code == 403
    assert Source.objects.get(pk=shelf["public"].pk).every is None


# --------------------------------------------------------------------------- each endpoint


def test_add_a_source_checked_as_the_command_checks_it(shelf: dict[str, Any], tmp_path: Path) -> None:
    manager = as_user(shelf["manager"])
    body = {"name": "handbook", "kind": "git", "location": "https://git.example.com/docs/handbook.git",
            "folder": shelf["handbook"].pk, "branch": "main", "path": "docs", "include": ["*.md"],
            "exclude": ["docs/drafts/*"], "every": "15m"}
    created = send(manager, "post", "/api/sources", body)
    assert created.status_code == 201, created.content
    out = created.json()
    assert out["kind"] == "git" and out["folder_name"] == "Handbook" and out["every_seconds"] == 900
    assert out["path"] == "docs" and out["include"] == ["*.md"] and out["last_run"]["status"] == ""
    assert Source.objects.get(name="handbook").branch == "main"

    taken = send(manager, "post", "/api/sources", {**body, "name": "HANDBOOK"})
    assert taken.status_code == 409 and "already exists" in taken.json()["detail"]
    cases = [
        ({"location": "https://me:s3cret@git.example.com/x.git"}, "password or token"),
        ({"kind": "folder", "location": "relative/dir"}, "absolute path"),
        ({"kind": "site", "location": "https://bot:pw@intranet.example.com/docs/"}, "user name or password"),
        ({"path": "../etc"}, "inside the source"),
        ({"every": "5s"}, "shortest schedule"),
    ]
    for change, reason in cases:
        response = send(manager, "post", "/api/sources", {**body, "name": "other", **change})
        assert response.status_code == 400 and reason in response.json()["detail"], (change, response.content)
    unknown = send(manager, "post", "/api/sources", {**body, "name": "other", "token": "abc"})
    assert unknown.status_code == 422
    missing = send(manager, "post", "/api/sources", {**body, "name": "other", "folder": 999_999})
    assert missing.status_code == 404
    assert set(Source.objects.values_list("name", flat=True)) == {"share", "ledger", "handbook"}


def test_a_location_is_never_shown_with_a_credential(people: dict[str, Any], shelf: dict[str, Any]) -> None:
    admin = as_user(people["admin"])
    body = {"name": "tokened", "kind": "git", "location": "https://ghp_abc123@git.example.com/x.git",
            "folder": shelf["handbook"].pk}
    created = send(admin, "post", "/api/sources", body)
    assert created.status_code == 201
    pk = created.json()["id"]
    for response in (created, admin.get(f"/api/sources/{pk}"), admin.get("/api/sources")):
        assert "ghp_abc123" not in response.content.decode()
    assert created.json()["location"] == "https://…@git.example.com/x.git"


def test_detail_change_and_the_last_run(shelf: dict[str, Any]) -> None:
    manager = as_user(shelf["manager"])
    pk = shelf["public"].pk
    source_sync(shelf["public"])
    detail = manager.get(f"/api/sources/{pk}").json()
    assert detail["documents"] == 1 and detail["last_run"]["status"] == "ok" and detail["last_run"]["new"] == 1
    assert detail["last_success_at"] is not None

    changed = send(manager, "patch", f"/api/sources/{pk}", {"every": "1h", "exclude": ["drafts/*"], "shrink_guard": 0.2})
    assert changed.status_code == 200, changed.content
    assert (changed.json()["every_seconds"], changed.json()["exclude"]) == (3600, ["drafts/*"])
    source = Source.objects.get(pk=pk)
    assert (source.every, source.exclude, source.shrink_guard, source.kind) == (3600, ["drafts/*"], 0.2, "folder")
    assert send(manager, "patch", f"/api/sources/{pk}", {"every": None}).json()["every_seconds"] is None
    # A schedule is checked before anything else changes (the fuzzer's "0000000000000000000" was a 500).
    for body, status in [({"location": "not/absolute"}, 400), ({"name": "ledger"}, 409), ({"folder": 1}, 422),
                         ({"kind": "git"}, 422), ({"name": None}, 400), ({"shrink_guard": 2}, 422),
                         ({"every": "0000000000000000000", "name": "renamed"}, 400), ({"every": "10s"}, 400)]:
        assert send(manager, "patch", f"/api/sources/{pk}", body).status_code == status, body
    assert Source.objects.get(pk=pk).location == str(shelf["share"])


def test_delete_a_source_with_or_without_its_documents(people: dict[str, Any], shelf: dict[str, Any]) -> None:
    manager = as_user(shelf["manager"])
    source_sync(shelf["public"])
    kept = Source.objects.create(name="kept", kind="folder", location=str(shelf["share"]), folder=shelf["handbook"])
    assert manager.delete(f"/api/sources/{shelf['public'].pk}").status_code == 204
    assert not Source.objects.filter(pk=shelf["public"].pk).exists() and not Document.objects.exists()

    source_sync(kept)
    assert manager.delete(f"/api/sources/{kept.pk}?keep_documents=true").status_code == 204
    assert Document.objects.get().source is None
    assert manager.delete(f"/api/sources/{kept.pk}").status_code == 404


def test_the_openapi_schema_documents_the_source_endpoints(people: dict[str, Any], client: Client) -> None:
    schema = client.get("/api/openapi.json").json()
    ours = {p: ops for p, ops in schema["paths"].items() if p.startswith("/api/sources")}
    assert sum(len(ops) for ops in ours.values()) == 7
    for path, ops in ours.items():
        for method, op in ops.items():
            assert op.get("summary") and op.get("description") and "404" in op["responses"], (path, method)
    assert schema["components"]["schemas"]["SourceIn"]["properties"]["every"]["examples"] == ["15m"]
    assert "secret" not in json.dumps(schema["components"]["schemas"]["SourceOut"]).lower()


# --------------------------------------------------------------------------- sync now


@pytest.mark.slow
def test_sync_now_queues_a_run_that_a_real_worker_carries_out(celery_worker: Any, people: dict[str, Any],
                                                             shelf: dict[str, Any]) -> None:
    manager = as_user(shelf["manager"])
    pk = shelf["public"].pk
    accepted = manager.post(f"/api/sources/{pk}/sync")
    assert accepted.status_code == 202 and accepted.json()["name"] == "share"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        run = manager.get(f"/api/sources/{pk}").json()["last_run"]
        if run["status"] in ("ok", "failed"):
            break
        time.sleep(0.5)
    assert run["status"] == "ok" and run["new"] == 1 and run["listed"] == 1, run
    assert Document.objects.get(source_id=pk).status == Document.Status.READY
    assert manager.post(f"/api/sources/{shelf['secret'].pk}/sync").status_code == 404


def test_the_source_admin_shows_runs_and_queues_sync_now_for_readable_sources(shelf: dict[str, Any]) -> None:
    """The admin lists each source's last run; "Sync now" puts a run on the ingest queue (the real broker);
    staff see only the sources whose folder they may read, and removing one needs delete_document too."""
    import redis
    from django.conf import settings

    from kb import queues

    source_sync(shelf["public"])
    manager = as_user(shelf["manager"])
    page = manager.get("/admin/kb/source/").content.decode()
    assert "share" in page and "listed 1" in page and "new 1" in page
    assert "ledger" not in page  # its folder is finance-only
    assert manager.get(f"/admin/kb/source/{shelf['secret'].pk}/change/").status_code in (302, 403, 404)

    broker = redis.Redis.from_url(settings.REDIS_URL)
    before = broker.llen(queues.INGEST)
    done = manager.post("/admin/kb/source/", {"action": "sync_now", "_selected_action": [shelf["public"].pk]})
    assert done.status_code == 302 and broker.llen(queues.INGEST) == before + 1
    broker.delete(queues.INGEST)  # nobody consumes it here

    assert manager.post(f"/admin/kb/source/{shelf['public'].pk}/delete/", {"post": "yes"}).status_code == 403
    assert Source.objects.filter(pk=shelf["public"].pk).exists() and Document.objects.filter(source=shelf["public"]).exists()


def test_watch_a_folder_source_on_create_and_change_and_never_a_git_one(shelf: dict[str, Any], tmp_path: Path) -> None:
    """`watch` (issue 51): set when added, switched on and off, shown back; refused on a Git source with why."""
    manager = as_user(shelf["manager"])
    docs = tmp_path / "docs"
    docs.mkdir()
    created = send(manager, "post", "/api/sources", {"name": "docs", "kind": "folder", "location": str(docs),
                                                     "folder": shelf["handbook"].pk, "watch": True})
    assert created.status_code == 201, created.content
    assert created.json()["watch"] is True and Source.objects.get(name="docs").watch is True
    assert manager.get(f"/api/sources/{shelf['public'].pk}").json()["watch"] is False

    pk = shelf["public"].pk
    on = send(manager, "patch", f"/api/sources/{pk}", {"watch": True})
    assert on.status_code == 200 and on.json()["watch"] is True and Source.objects.get(pk=pk).watch is True
    untouched = send(manager, "patch", f"/api/sources/{pk}", {"every": "1h"})  # left out: it stays
    assert untouched.json()["watch"] is True
    assert send(manager, "patch", f"/api/sources/{pk}", {"watch": None}).status_code == 400
    off = send(manager, "patch", f"/api/sources/{pk}", {"watch": False})
    assert off.status_code == 200 and off.json()["watch"] is False and Source.objects.get(pk=pk).watch is False

    git = {"name": "handbook", "kind": "git", "location": "https://git.example.com/docs/handbook.git",
           "folder": shelf["handbook"].pk}
    refused = send(manager, "post", "/api/sources", {**git, "watch": True})
    assert refused.status_code == 400 and "only a folder source" in refused.json()["detail"]
    assert "push webhook" in refused.json()["detail"] and not Source.objects.filter(name="handbook").exists()
    repo = send(manager, "post", "/api/sources", git).json()
    changed = send(manager, "patch", f"/api/sources/{repo['id']}", {"watch": True, "every": "1h"})
    assert changed.status_code == 400 and "only a folder source" in changed.json()["detail"]
    assert (Source.objects.get(name="handbook").watch, Source.objects.get(name="handbook").every) == (False, None)
