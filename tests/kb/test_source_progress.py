"""A source run's live progress and its index lag (issue 27 items 3-4), and its credential that is never
shown back: against a real directory, a real worker, a Git repository served over HTTP with basic
auth by `git http-backend` under a real HTTP server, the real pipeline, API and admin."""

from __future__ import annotations

import base64
import logging
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
from django.test import Client
from django.utils import timezone

from kb import queues
from kb.library.events import document_indexed
from kb.library.models import Document, Folder, Source, SourceChange
from kb.library.sources.git import ASKPASS_USER, cache_dir
from kb.library.sources.secrets import secret_setting
from kb.library.sources.sync import source_sync
from tests.kb.test_sources import EXPENSES, VACATION, commit, found, git

TOKEN = "glpat-h4-Zq81vTq0cret"


def section(number: int) -> str:
    return (f"## Rule {number}\n\nDesk {number} of the quiet floor is booked through the facilities portal "
            f"no later than {number} days ahead, and released by noon when nobody checks in.\n\n")


def admin_client(people: dict[str, Any]) -> Client:
    client = Client()
    client.force_login(people["admin"])
    return client


@pytest.fixture(autouse=True)
def _folder_roots(settings: Any, tmp_path: Path) -> None:
    """The operator allows sources under the test's temporary directory (kb.library.sources.policy)."""
    settings.KB_SOURCE_FOLDER_ROOTS = [str(tmp_path)]


@pytest.fixture
def share(tmp_path: Path) -> Path:
    path = tmp_path / "share"
    path.mkdir()
    return path


@pytest.fixture
def handbook(db: None) -> Folder:
    return Folder.objects.create(name="Handbook", public=True)


# --------------------------------------------------------------------------- progress


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_run_on_a_worker_shows_its_progress_while_it_goes(people: dict[str, Any], share: Path,
                                                           celery_worker: Any) -> None:
    handbook = Folder.objects.create(name="Handbook", public=True)
    for n in range(8):
        (share / f"desks-{n}.md").write_text(f"# Desks {n}\n\n" + "".join(section(n * 10 + i) for i in range(12)))
    source = Source.objects.create(name="desks", kind="folder", location=str(share), folder=handbook)
    client = admin_client(people)
    seen = []
    assert queues.send("kb.sync_source", source.pk, False)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        body = client.get(f"/api/sources/{source.pk}").json()
        run, lag = body["last_run"], body["index_lag"]
        seen.append((run["status"], run["step"], run["listed"], run["planned"], run["to_index"], run["indexed"],
                     lag["pending"]))
        if run["status"] not in ("", "running"):
            break
        time.sleep(0.05)
    assert seen[-1][0] == "ok", seen[-1]
    midway = [s for s in seen if s[0] == "running" and s[1] == "indexing" and 0 < s[5] < s[4]]
    assert midway, f"no observation mid-indexing among {sorted(set(seen))}"
    status, step, listed, planned, to_index, indexed, pending = midway[0]
    assert (listed, planned, to_index) == (8, 8, 8)
    # What is indexed is searchable, no longer pending (read a moment after the counts: fewer still, maybe).
    assert pending <= 8 - indexed
    assert any(s[6] > 0 for s in seen if s[0] == "running")
    assert seen[-1][2:] == (8, 8, 8, 8, 0)
    # The admin and the library render the same figures, marked for sources.js to keep them current.
    page = client.get("/admin/kb/source/").content.decode()
    assert f'data-source-run="{source.pk}"' in page and f'data-source-lag="{source.pk}"' in page
    assert "pending 0" in page and "kb/sources.js" in page
    library = client.get("/library/").content.decode()
    assert f'data-source-run="{source.pk}"' in library and "kb/sources.js" in library and "desks" in library


def test_the_library_shows_sources_only_to_staff_who_may_see_them(people: dict[str, Any], share: Path,
                                                                  handbook: Folder) -> None:
    from django.contrib.auth.models import Permission

    Source.objects.create(name="desks", kind="folder", location=str(share), folder=handbook)
    hidden = Folder.objects.create(name="Ledger", public=False)
    Source.objects.create(name="ledger-share", kind="folder", location=str(share), folder=hidden)
    reader = Client()
    reader.force_login(people["alice"])
    assert "data-source-run" not in reader.get("/library/").content.decode()
    people["bob"].is_staff = True
    people["bob"].save()
    people["bob"].user_permissions.set(Permission.objects.filter(codename__in=["view_source", "add_document"]))
    staff = Client()
    staff.force_login(people["bob"])
    page = staff.get("/library/").content.decode()
    assert "desks" in page and "ledger-share" not in page


# --------------------------------------------------------------------------- index lag


def test_index_lag_counts_from_the_change_at_the_source_until_it_is_searchable(
    people: dict[str, Any], share: Path, handbook: Folder
) -> None:
    (share / "vacation.md").write_text(VACATION)
    (share / "expenses.md").write_text(EXPENSES)
    source = Source.objects.create(name="policies", kind="folder", location=str(share), folder=handbook)
    first = source_sync(source)
    assert first.status == "ok" and first.new == 2
    source.refresh_from_db()
    assert source.last_listed_at is not None and source.last_lag_seconds is not None
    assert SourceChange.objects.filter(source=source).count() == 0  # every change is searchable: none pending

    # The previous listing was two minutes ago; the file changed one minute ago.
    now = timezone.now()
    Source.objects.filter(pk=source.pk).update(last_listed_at=now - timedelta(seconds=120))
    edited = share / "vacation.md"
    edited.write_text(VACATION.replace("twenty-seven vacation days", "thirty-one vacation days"))
    os.utime(edited, (now.timestamp() - 60, now.timestamp() - 60))
    source.refresh_from_db()
    run = source_sync(source)
    assert run.changed == 1 and found(people["alice"], "how many vacation days", "thirty-one")
    source.refresh_from_db()
    took = (timezone.now() - now).total_seconds()
    assert source.last_lag_seconds is not None and 60 <= source.last_lag_seconds <= 60 + took + 1

    # A file whose mtime is older than the previous listing changed after it at the earliest (copied with its date).
    now = timezone.now()
    Source.objects.filter(pk=source.pk).update(last_listed_at=now - timedelta(seconds=120))
    old = share / "expenses.md"
    old.write_text(EXPENSES.replace("ninety-four euros", "eighty-one euros"))
    os.utime(old, (now.timestamp() - 86400, now.timestamp() - 86400))
    source.refresh_from_db()
    source_sync(source)
    source.refresh_from_db()
    took = (timezone.now() - now).total_seconds()
    assert source.last_lag_seconds is not None and 120 <= source.last_lag_seconds <= 120 + took + 1


def test_pending_and_failed_files_with_their_reasons(people: dict[str, Any], share: Path, handbook: Folder) -> None:
    (share / "vacation.md").write_text(VACATION)
    (share / "expenses.md").write_text(EXPENSES)
    (share / "broken.md").write_bytes(b"\x00\x01binary, not Markdown")
    source = Source.objects.create(name="policies", kind="folder", location=str(share), folder=handbook)
    source_sync(source)
    client = admin_client(people)
    lag = client.get(f"/api/sources/{source.pk}").json()["index_lag"]
    assert (lag["pending"], lag["failed"], lag["seconds"]) == (0, 1, 0)
    assert [f["path"] for f in lag["failures"]] == ["broken.md"] and lag["failures"][0]["reason"]
    assert lag["last_change_seconds"] is not None and lag["listed_at"]
    change_page = client.get(f"/admin/kb/source/{source.pk}/change/").content.decode()
    assert "broken.md" in change_page and lag["failures"][0]["reason"].split(":")[0] in change_page

    # Tried again on the next run, the refused file stays failed (never a pending change as old as its first
    # failure); seen from inside the run, once its other change is indexed.
    (share / "vacation.md").write_text(VACATION.replace("twenty-seven", "twenty-eight"))
    during: list[tuple[str, str]] = []

    def record(**kwargs: Any) -> None:
        during.extend(SourceChange.objects.filter(source=source).values_list("path", "failure_reason"))

    document_indexed.connect(record, dispatch_uid="h4-during")
    try:
        assert source_sync(source).changed == 1
    finally:
        document_indexed.disconnect(dispatch_uid="h4-during")
    assert [path for path, _ in during] == ["broken.md"] and during[0][1]

    (share / "broken.md").unlink()  # the failed file is gone at the source: no longer failed
    source_sync(source)
    assert client.get(f"/api/sources/{source.pk}").json()["index_lag"]["failed"] == 0

    # Two of two files deleted: held. The deletions are seen and not carried out: pending, and the lag grows.
    (share / "vacation.md").unlink()
    (share / "expenses.md").unlink()
    held = source_sync(source)
    assert held.status == "held"
    time.sleep(1.1)
    lag = client.get(f"/api/sources/{source.pk}").json()["index_lag"]
    assert lag["pending"] == 2 and lag["seconds"] >= 1
    health = client.get("/healthz").json()["sources"]
    assert [(s["name"], s["files_pending"]) for s in health] == [("policies", 2)] and health[0]["lag_seconds"] >= 1
    done = source_sync(source, confirm=True)
    assert done.deleted == 2
    lag = client.get(f"/api/sources/{source.pk}").json()["index_lag"]
    assert (lag["pending"], lag["seconds"]) == (0, 0)
    assert not Document.objects.filter(source=source).exists()


# --------------------------------------------------------------------------- credentials


def git_http_backend(root: Path, token: str) -> Any:
    """A WSGI app serving the bare repositories under `root` through `git http-backend` (its CGI), to
    clients sending the token as the password of HTTP basic auth; everyone else gets 401."""
    expected = "Basic " + base64.b64encode(f"{ASKPASS_USER}:{token}".encode()).decode()

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        if environ.get("HTTP_AUTHORIZATION") != expected:
            start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="git"'), ("Content-Length", "0")])
            return [b""]
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        cgi = {"GIT_PROJECT_ROOT": str(root), "GIT_HTTP_EXPORT_ALL": "1", "PATH": os.environ["PATH"],
               "REMOTE_USER": ASKPASS_USER, "CONTENT_LENGTH": str(len(body))}
        for key in ("PATH_INFO", "QUERY_STRING", "REQUEST_METHOD", "CONTENT_TYPE", "HTTP_GIT_PROTOCOL",
                    "HTTP_CONTENT_ENCODING"):
            if environ.get(key):
                cgi[key] = environ[key]
        out = subprocess.run(["git", "http-backend"], input=body, env=cgi, capture_output=True, check=True).stdout
        head, _, payload = out.partition(b"\r\n\r\n") if b"\r\n\r\n" in out else out.partition(b"\n\n")
        status, headers = "200 OK", []
        for line in head.decode().splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = value.strip()
            else:
                headers.append((name, value.strip()))
        start_response(status, headers)
        return [payload]

    return app


class Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def served_repo(tmp_path: Path) -> Iterator[str]:
    """A repository with two policies, served over HTTP at the returned URL behind basic auth."""
    work = tmp_path / "work"
    work.mkdir()
    git("init", "-q", "-b", "main", cwd=work)
    commit(work, {"docs/vacation.md": VACATION, "docs/expenses.md": EXPENSES}, "first")
    root = tmp_path / "served"
    root.mkdir()
    git("clone", "-q", "--bare", str(work), str(root / "handbook.git"), cwd=tmp_path)
    server = make_server("127.0.0.1", 0, git_http_backend(root, TOKEN), handler_class=Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/handbook.git"
    finally:
        server.shutdown()
        server.server_close()


def test_a_git_token_reaches_git_and_is_never_shown_back(people: dict[str, Any], handbook: Folder, served_repo: str,
                                                         caplog: pytest.LogCaptureFixture,
                                                         monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    caplog.set_level(logging.DEBUG)
    client = admin_client(people)
    added = client.post("/api/sources", data={"name": "handbook", "kind": "git", "location": served_repo,
                                              "folder": handbook.pk, "branch": "main"}, content_type="application/json")
    assert added.status_code == 201, added.content
    source = Source.objects.get(name="handbook")
    refused = source_sync(source)  # no credential: the server says 401, git cannot ask anyone
    assert refused.status == "failed" and "git clone failed" in refused.reason
    assert not Document.objects.filter(source=source).exists()

    changed = client.patch(f"/api/sources/{source.pk}", data={"secret": TOKEN}, content_type="application/json")
    assert changed.status_code == 200 and changed.json()["credential"] == "set"
    source.refresh_from_db()
    run = source_sync(source)
    assert run.status == "ok" and run.new == 2, run.summary()
    assert found(people["alice"], "how many vacation days", "twenty-seven vacation days")

    shown = [client.get("/api/sources").content, client.get(f"/api/sources/{source.pk}").content,
             client.get("/admin/kb/source/").content, client.get(f"/admin/kb/source/{source.pk}/change/").content,
             client.get("/api/openapi.json").content, client.get("/healthz").content, client.get("/library/").content]
    assert not [page for page in shown if TOKEN.encode() in page]
    assert b"Credential" in shown[3] and b"<div class=\"readonly\">set</div>" in shown[3]
    assert TOKEN not in caplog.text and TOKEN not in source.last_reason
    assert TOKEN not in (cache_dir(source) / ".git" / "config").read_text()  # no credential helper kept it
    schema = client.get("/api/openapi.json").json()["components"]["schemas"]
    assert schema["SourceIn"]["properties"]["secret"]["writeOnly"] is True
    assert "secret" not in schema["SourceOut"]["properties"]

    # A new location drops the stored secret: it is never sent anywhere it was not given for.
    moved = client.patch(f"/api/sources/{source.pk}", data={"location": served_repo + "/"},
                         content_type="application/json")
    assert moved.json()["credential"] == "not set"
    source.refresh_from_db()
    assert source.secret == "" and source_sync(source).status == "failed"

    # The operator's setting (a Docker/Kubernetes secret file) serves as well, and says where it comes from.
    secret_file = tmp_path / "token"
    secret_file.write_text(TOKEN + "\n")
    monkeypatch.setenv(f"{secret_setting(source)}_FILE", str(secret_file))
    assert secret_setting(source) == "KB_SOURCE_HANDBOOK_TOKEN"
    assert client.get(f"/api/sources/{source.pk}").json()["credential"] == "set by KB_SOURCE_HANDBOOK_TOKEN"
    assert source_sync(source).status == "ok"
    assert TOKEN not in caplog.text

    # The setting's token is bound to the source the operator set it for: through the API, no new location
    # takes it elsewhere, no other source takes its name, and no new source is added under a name it names.
    elsewhere = client.patch(f"/api/sources/{source.pk}", data={"location": "http://127.0.0.1:9/x.git"},
                             content_type="application/json")
    assert elsewhere.status_code == 400 and "KB_SOURCE_HANDBOOK_TOKEN" in elsewhere.json()["detail"]
    other = Source.objects.create(name="other", kind="folder", location=str(tmp_path), folder=handbook)
    renamed = client.patch(f"/api/sources/{other.pk}", data={"name": "Handbook"}, content_type="application/json")
    assert renamed.status_code in (400, 409)
    monkeypatch.setenv("KB_SOURCE_WIKI_TOKEN", TOKEN)
    taken = client.post("/api/sources", data={"name": "wiki", "kind": "git", "location": "http://127.0.0.1:9/w.git",
                                              "folder": handbook.pk}, content_type="application/json")
    assert taken.status_code == 400 and "KB_SOURCE_WIKI_TOKEN" in taken.json()["detail"]
    assert client.patch(f"/api/sources/{other.pk}", data={"name": "wiki"},
                        content_type="application/json").status_code == 400
    source.refresh_from_db()
    assert source.location == served_repo + "/" and not Source.objects.filter(name="wiki").exists()
