"""Push webhooks of Git sources (issue 51 item 3): each forge's signature, replays and stale deliveries refused with
401 and nothing changed, other branches ignored, the operator's secret first; and against a real Git server
(`git http-backend`, pushed to with the `git` binary) and a real worker, a push followed by its signed webhook is
searchable at once, and a push during a run is followed by one more run."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any
from wsgiref.simple_server import make_server

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client

from kb.library.events import document_indexed
from kb.library.models import Folder, Source, SourcePush
from kb.library.sources.sync import LOCK_CLASS, source_sync
from kb.library.sources.webhooks import (
    FOLLOWING,
    WebhookRefused,
    delivery_time,
    delivery_verify,
    repository_matches,
    webhook_sign,
)
from kb.library.tasks import sync_source
from tests.kb.test_source_progress import TOKEN, Quiet, git_http_backend
from tests.kb.test_sources import EXPENSES, VACATION, VACATION_EDITED, commit, found, git

SECRET = "whsec-7Hq2-pLx9-Vt41"
URL = "https://git.example.com/docs/handbook.git"


def push_payload(url: str = URL, *, ref: str = "refs/heads/main", at: datetime | None = None, forge: str = "github",
                 after: str = "a" * 40) -> dict[str, Any]:
    """A push delivery's body as each forge writes it (the fields the app reads, and a few it does not)."""
    at = at or datetime.now(UTC)
    commits = [{"id": after, "message": "edit", "timestamp": (at - timedelta(seconds=5)).isoformat()}]
    if forge == "gitlab":
        project = {"git_http_url": url, "default_branch": "main", "path_with_namespace": "docs/handbook"}
        return {"object_kind": "push", "event_name": "push", "ref": ref, "after": after, "project": project,
                "repository": {"git_http_url": url}, "commits": commits, "total_commits_count": 1}
    repository: dict[str, Any] = {"clone_url": url, "default_branch": "main", "full_name": "docs/handbook"}
    if forge == "github":
        repository["pushed_at"] = int(at.timestamp())
    return {"ref": ref, "before": "0" * 40, "after": after, "repository": repository, "commits": commits,
            "head_commit": commits[-1]}


def encode(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload).encode()


def signed(forge: str, body: bytes, secret: str = SECRET) -> dict[str, str]:
    """The headers `forge` sends with `body` under `secret`."""
    mac = webhook_sign(secret, body)
    if forge == "github":
        return {"X-GitHub-Event": "push", "X-Hub-Signature-256": f"sha256={mac}"}
    if forge == "gitea":  # Gitea sends GitHub's headers as well as its own
        return {"X-Gitea-Event": "push", "X-Gitea-Signature": mac, "X-GitHub-Event": "push",
                "X-Hub-Signature-256": f"sha256={mac}"}
    return {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": secret}


def deliver(client: Client, source: Source, body: bytes, headers: dict[str, str]) -> Any:
    return client.post(f"/api/sources/{source.pk}/webhook", data=body, content_type="application/json", headers=headers)


@contextmanager
def run_under_way(source: Source) -> Iterator[None]:
    """The source's run lock held by another session, as a worker's run holds it: a push then follows that run."""
    db = connection.settings_dict
    with psycopg.connect(host=db["HOST"], port=db["PORT"], user=db["USER"], dbname=db["NAME"], autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s, %s)", [LOCK_CLASS, source.pk])
        yield
        other.execute("SELECT pg_advisory_unlock(%s, %s)", [LOCK_CLASS, source.pk])


@pytest.fixture
def handbook(db: None) -> Source:
    folder = Folder.objects.create(name="Handbook", public=True)
    return Source.objects.create(name="handbook", kind="git", location=URL, branch="main", folder=folder,
                                 webhook_secret=SECRET)


def state(source: Source) -> tuple[int, Any, str, Any]:
    """What a delivery may change: the pushes kept, the last push, and the last run."""
    source.refresh_from_db()
    return (SourcePush.objects.filter(source=source).count(), source.last_push_at, source.last_push_origin,
            source.last_started_at)


# --------------------------------------------------------------------------- signatures


def test_each_forge_is_verified_the_way_it_signs() -> None:
    body = encode(push_payload())
    mac = webhook_sign(SECRET, body)
    assert delivery_verify(secret=SECRET, headers={"x-hub-signature-256": f"sha256={mac}"}, body=body) == "github"
    assert delivery_verify(secret=SECRET, headers={"x-gitea-signature": mac}, body=body) == "gitea"
    # Gitea's GitHub-style headers come with its own: it is checked, and recorded, as Gitea.
    both = {"x-gitea-event": "push", "x-github-event": "push", "x-hub-signature-256": f"sha256={mac}"}
    assert delivery_verify(secret=SECRET, headers=both, body=body) == "gitea"
    assert delivery_verify(secret=SECRET, headers={"x-forgejo-signature": mac}, body=body) == "gitea"
    assert delivery_verify(secret=SECRET, headers={"x-gitlab-token": SECRET}, body=body) == "gitlab"

    forged = webhook_sign("another secret", body)
    refusals = {
        "does not match": {"x-hub-signature-256": f"sha256={forged}"},
        "not a hex HMAC-SHA256": {"x-gitea-signature": "sha256=" + mac},  # GitHub's form in Gitea's header
        "must read sha256=": {"x-hub-signature-256": mac},
        "SHA-1": {"x-hub-signature": "sha1=" + "0" * 40},
        "no signature": {"x-github-event": "push"},
        "not this source's webhook secret": {"x-gitlab-token": mac},  # GitLab sends the secret, not an HMAC
        "carries no X-Gitlab-Token": {"x-gitlab-event": "Push Hook"},
        "Gitea delivery carries no signature": {"x-gitea-event": "push"},
    }
    for reason, headers in refusals.items():
        with pytest.raises(WebhookRefused, match=reason):
            delivery_verify(secret=SECRET, headers=headers, body=body)
    # The signature covers the body: one byte changed and it no longer holds.
    with pytest.raises(WebhookRefused, match="does not match"):
        delivery_verify(secret=SECRET, headers={"x-hub-signature-256": f"sha256={mac}"}, body=body + b" ")


def test_a_delivery_time_is_the_newest_the_body_carries_and_the_repository_is_compared_loosely(handbook: Source) -> None:
    pushed = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
    github = push_payload(at=pushed)
    assert delivery_time(github) == pushed  # repository.pushed_at, newer than its commit
    gitlab = push_payload(at=pushed, forge="gitlab")
    assert delivery_time(gitlab) == pushed - timedelta(seconds=5)  # GitLab carries only its commits' times
    assert delivery_time({"ref": "refs/heads/main", "commits": []}) is None

    for url in ("git@git.example.com:docs/handbook.git", "https://mirror.internal/Docs/Handbook",
                "ssh://git@git.example.com:2222/docs/handbook.git"):
        assert repository_matches(handbook, push_payload(url)), url
    for url in ("https://git.example.com/docs/other.git", "https://git.example.com/evil/handbook.git"):
        assert not repository_matches(handbook, push_payload(url)), url
    assert not repository_matches(handbook, {"ref": "refs/heads/main"})  # names no repository


# --------------------------------------------------------------------------- the endpoint


@pytest.mark.parametrize("forge", ["github", "gitea", "gitlab"])
def test_a_verified_push_is_recorded_and_starts_a_run(forge: str, handbook: Source, people: dict[str, Any]) -> None:
    client = Client()
    body = encode(push_payload(forge=forge))
    with run_under_way(handbook):  # a worker's run holds the lock: this push must follow it, not be lost
        answer = deliver(client, handbook, body, signed(forge, body))
    assert answer.status_code == 202, answer.content
    assert answer.json()["status"] == FOLLOWING
    pushes, pushed_at, origin, started = state(handbook)
    assert (pushes, origin, started) == (1, forge, None) and pushed_at is not None
    assert SourcePush.objects.get(source=handbook).origin == forge

    # The same delivery again is a replay: 401, and nothing more is recorded.
    again = deliver(client, handbook, body, signed(forge, body))
    assert again.status_code == 401 and "received already" in again.json()["detail"]
    assert state(handbook) == (1, pushed_at, forge, None)

    # The admin's API and `manage.py source list` show the last push; never the secret.
    admin = Client()
    admin.force_login(people["admin"])
    shown = admin.get(f"/api/sources/{handbook.pk}")
    webhook = shown.json()["webhook"]
    assert webhook["path"] == f"/api/sources/{handbook.pk}/webhook" and webhook["state"] == "set"
    assert webhook["last_push_origin"] == forge and webhook["last_push_at"]
    listed = StringIO()
    call_command("source", "list", stdout=listed)
    assert f"last_push={pushed_at.isoformat(timespec='seconds')} ({forge})" in listed.getvalue()
    assert "lag=0s pending=0" in listed.getvalue()
    page = admin.get(f"/admin/kb/source/{handbook.pk}/change/")
    assert page.status_code == 200 and b"Webhook secret" in page.content
    assert f"/api/sources/{handbook.pk}/webhook".encode() in page.content
    for content in (shown.content, listed.getvalue().encode(), page.content, admin.get("/admin/kb/source/").content):
        assert SECRET.encode() not in content


REFUSALS: dict[str, Callable[[bytes], tuple[bytes, dict[str, str]]]] = {
    "forged": lambda body: (body, signed("github", body, "a guess")),
    "tampered": lambda body: (body.replace(b"refs/heads/main", b"refs/heads/main "), signed("github", body)),
    "missing": lambda body: (body, {"X-GitHub-Event": "push"}),
    "wrong forge header": lambda body: (body, {"X-Gitlab-Token": webhook_sign(SECRET, body)}),
    "stale": lambda _: (lambda old: (old, signed("gitea", old)))(encode(push_payload(
        at=datetime.now(UTC) - timedelta(days=2), forge="gitea"))),
    "another repository": lambda _: (lambda other: (other, signed("github", other)))(encode(push_payload(
        "https://git.example.com/docs/other.git"))),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_a_forged_stale_or_misdirected_delivery_is_refused_and_changes_nothing(case: str, handbook: Source) -> None:
    body, headers = REFUSALS[case](encode(push_payload()))
    before = state(handbook)
    answer = deliver(Client(), handbook, body, headers)
    assert answer.status_code == 401, answer.content
    assert answer.json()["detail"] and SECRET not in answer.content.decode()
    assert state(handbook) == before and before[0] == 0


def test_no_secret_no_push_and_the_operators_setting_comes_first(handbook: Source, monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    client = Client()
    body = encode(push_payload())
    Source.objects.filter(pk=handbook.pk).update(webhook_secret="")
    refused = deliver(client, handbook, body, signed("github", body))
    assert refused.status_code == 401 and "no webhook secret" in refused.json()["detail"]

    # The setting (here its _FILE, a Docker secret) wins over the stored field, which no longer verifies anything.
    Source.objects.filter(pk=handbook.pk).update(webhook_secret=SECRET)
    secret_file = tmp_path / "webhook"
    secret_file.write_text("operator-secret-55\n")
    monkeypatch.setenv("KB_SOURCE_HANDBOOK_WEBHOOK_SECRET_FILE", str(secret_file))
    stored = deliver(client, handbook, body, signed("github", body))
    assert stored.status_code == 401 and "does not match" in stored.json()["detail"]
    assert state(handbook)[0] == 0
    with run_under_way(handbook):
        operator = deliver(client, handbook, body, signed("github", body, "operator-secret-55"))
    assert operator.status_code == 202 and state(handbook)[0] == 1

    # A setting that cannot be read refuses every delivery, naming neither the secret nor the file.
    monkeypatch.setenv("KB_SOURCE_HANDBOOK_WEBHOOK_SECRET_FILE", str(tmp_path / "gone"))
    other = encode(push_payload(after="b" * 40))
    unreadable = deliver(client, handbook, other, signed("github", other, "operator-secret-55"))
    assert unreadable.status_code == 401 and "cannot be read" in unreadable.json()["detail"]
    assert str(tmp_path) not in unreadable.json()["detail"] and state(handbook)[0] == 1


def test_another_branch_a_ping_or_another_event_is_accepted_and_starts_nothing(handbook: Source) -> None:
    client = Client()
    feature = encode(push_payload(ref="refs/heads/feature"))
    answer = deliver(client, handbook, feature, signed("github", feature))
    assert answer.status_code == 202 and answer.json()["status"] == "ignored"
    assert "refs/heads/main" in answer.json()["detail"]
    tag = encode(push_payload(ref="refs/tags/v1", forge="gitlab"))
    assert deliver(client, handbook, tag, signed("gitlab", tag)).json()["status"] == "ignored"
    # A source with no branch follows the repository's default branch, as the delivery names it.
    Source.objects.filter(pk=handbook.pk).update(branch="")
    handbook.refresh_from_db()
    develop = push_payload(ref="refs/heads/develop", forge="gitea")
    develop["repository"]["default_branch"] = "develop"
    with run_under_way(handbook):
        assert deliver(client, handbook, encode(develop), signed("gitea", encode(develop))).json()["status"] == FOLLOWING
    assert state(handbook)[0] == 1

    ping = b'{"zen": "Keep it logically awesome.", "hook_id": 1}'
    pong = deliver(client, handbook, ping, {**signed("github", ping), "X-GitHub-Event": "ping"})
    assert pong.status_code == 200 and pong.json()["status"] == "pong"
    issue = encode({"action": "opened", "repository": {"clone_url": URL}})
    other = deliver(client, handbook, issue, {**signed("github", issue), "X-GitHub-Event": "issues"})
    assert other.status_code == 202 and other.json()["status"] == "ignored"
    assert state(handbook)[0] == 1
    # A signed body that is no JSON object is a 400, one of the wrong shape names no repository (401, never a 500);
    # a folder source takes no webhook (404).
    assert deliver(client, handbook, b"[1]", signed("github", b"[1]")).status_code == 400
    odd = encode({"ref": "refs/heads/main", "repository": "handbook", "commits": 5, "head_commit": None})
    assert deliver(client, handbook, odd, signed("github", odd)).status_code == 401
    assert state(handbook)[0] == 1
    Source.objects.filter(pk=handbook.pk).update(kind="folder")
    assert deliver(client, handbook, feature, signed("github", feature)).status_code == 404


def test_the_webhook_secret_is_set_by_the_api_and_the_command_and_never_shown(handbook: Source,
                                                                              people: dict[str, Any]) -> None:
    admin = Client()
    admin.force_login(people["admin"])
    changed = admin.patch(f"/api/sources/{handbook.pk}", data={"webhook_secret": "from-the-api-9"},
                          content_type="application/json")
    assert changed.status_code == 200 and "from-the-api-9" not in changed.content.decode()
    handbook.refresh_from_db()
    assert handbook.webhook_secret == "from-the-api-9"
    schema = admin.get("/api/openapi.json").json()["components"]["schemas"]
    assert schema["SourceChangeIn"]["properties"]["webhook_secret"]["writeOnly"] is True
    assert "webhook_secret" not in schema["SourceOut"]["properties"]

    # The admin's add form takes one, write-only like the credential.
    folder = Folder.objects.get(name="Handbook")
    added = admin.post("/admin/kb/source/add/", {
        "name": "manual", "kind": "git", "location": "https://git.example.com/docs/manual.git", "branch": "main",
        "folder": folder.pk, "shrink_guard": "0.5", "include": "", "exclude": "", "hook_secret": "from-the-admin-3"})
    assert added.status_code == 302, added.content.decode()[:2000]
    manual = Source.objects.get(name="manual")
    assert manual.webhook_secret == "from-the-admin-3"
    change = admin.get(f"/admin/kb/source/{manual.pk}/change/").content.decode()
    assert "from-the-admin-3" not in change and '<div class="readonly">set</div>' in change

    out = StringIO()
    call_command("source", "webhook-secret", "handbook", stdout=out)
    handbook.refresh_from_db()
    assert len(handbook.webhook_secret) >= 40 and handbook.webhook_secret in out.getvalue()
    call_command("source", "webhook-secret", "handbook", "--clear", stdout=StringIO())
    handbook.refresh_from_db()
    assert handbook.webhook_secret == ""


# --------------------------------------------------------------------------- a real Git server and a real worker


@dataclass
class Served:
    work: Path  # the clone pushed from
    url: str  # the bare repository, served by git http-backend


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """A repository served over HTTP by `git http-backend` (behind basic auth with TOKEN), and a clone of it."""
    root = tmp_path / "served"
    root.mkdir()
    seed = tmp_path / "seed"
    seed.mkdir()
    git("init", "-q", "-b", "main", cwd=seed)
    commit(seed, {"docs/vacation.md": VACATION, "docs/expenses.md": EXPENSES}, "first")
    git("clone", "-q", "--bare", str(seed), str(root / "handbook.git"), cwd=tmp_path)
    server = make_server("127.0.0.1", 0, git_http_backend(root, TOKEN), handler_class=Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}/handbook.git"
    git("remote", "add", "served", url.replace("http://", f"http://x-access-token:{TOKEN}@"), cwd=seed)
    try:
        yield Served(seed, url)
    finally:
        server.shutdown()
        server.server_close()


def push(served: Served, files: dict[str, str | None], message: str) -> None:
    commit(served.work, files, message)
    git("push", "-q", "served", "main", cwd=served.work)


def push_webhook(client: Client, source: Source, served: Served, forge: str = "github") -> Any:
    after = git("rev-parse", "HEAD", cwd=served.work).strip()
    body = encode(push_payload(served.url, forge=forge, after=after))
    return deliver(client, source, body, signed(forge, body))


def searchable_within(reader: Any, query: str, phrase: str, seconds: float) -> float | None:
    """Seconds until `reader`'s search returns `phrase`, or None when it did not within `seconds`."""
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        if found(reader, query, phrase):
            return time.monotonic() - began
        time.sleep(0.5)
    return None


@pytest.fixture
def git_source(transactional_db: None, served: Served) -> Source:
    folder = Folder.objects.create(name="Handbook", public=True)
    source = Source.objects.create(name="handbook", kind="git", location=served.url, branch="main", folder=folder,
                                   secret=TOKEN, webhook_secret=SECRET)
    first = source_sync(source)
    assert first.status == "ok" and first.new == 2, first.summary()
    return source


@pytest.mark.slow
def test_a_push_to_a_real_git_server_is_searchable_seconds_after_its_webhook(
        git_source: Source, served: Served, people: dict[str, Any], celery_worker: Any) -> None:
    alice, client = people["alice"], Client()
    push(served, {"docs/vacation.md": VACATION_EDITED}, "thirty-one days")
    forged = encode(push_payload(served.url))
    refused = deliver(client, git_source, forged, signed("github", forged, "not the secret"))
    assert refused.status_code == 401
    time.sleep(3)  # a forged push starts nothing: the old text is all there is
    assert not found(alice, "how many vacation days", "thirty-one vacation days")

    answer = push_webhook(client, git_source, served)
    assert answer.status_code == 202 and answer.json()["status"] == "queued", answer.content
    lag = searchable_within(alice, "how many vacation days", "thirty-one vacation days", 30)
    assert lag is not None, "the pushed change was not searchable within 30 s"
    git_source.refresh_from_db()
    assert git_source.last_status == "ok" and git_source.last_changed == 1 and git_source.last_push_origin == "github"
    assert git_source.last_lag_seconds is not None


@pytest.mark.slow
def test_a_push_during_a_run_is_followed_by_one_more_run(git_source: Source, served: Served, people: dict[str, Any],
                                                         celery_worker: Any) -> None:
    alice, client = people["alice"], Client()
    answers: list[Any] = []

    def pushed_while_indexing(**_: Any) -> None:
        """The run has listed and indexed the first change; this second one comes too late for its listing."""
        if not answers:
            push(served, {"docs/expenses.md": EXPENSES.replace("ninety-four euros", "eighty-eight euros")}, "meals")
            answers.append(push_webhook(client, git_source, served, forge="gitlab"))

    push(served, {"docs/vacation.md": VACATION_EDITED}, "thirty-one days")
    document_indexed.connect(pushed_while_indexing, weak=False)
    try:
        result = sync_source(git_source.pk)  # the task's body, in this process: the run, then its follow-up
    finally:
        document_indexed.disconnect(pushed_while_indexing)
    assert answers and answers[0].status_code == 202 and answers[0].json()["status"] == FOLLOWING
    assert result["status"] == "ok" and result["changed"] == 1  # the run saw only the first change
    lag = searchable_within(alice, "meals abroad reimbursed per day", "eighty-eight euros", 30)
    assert lag is not None, "the push made during the run was lost"
    assert found(alice, "how many vacation days", "thirty-one vacation days")
