"""Git sources never run what a staff user writes (issue 47): the location, branch and sub-path reach git only as
data (after `--`), through the transport the location is allowed, with no hook, fsmonitor or symbolic link, and
with an environment that holds none of the server's secrets. Real repositories made with the `git` binary."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from kb.library.models import Document, Folder, Source
from kb.library.sources import git as source_git
from kb.library.sources.listing import ListingError
from kb.library.sources.sync import source_sync
from tests.kb.test_sources import EXPENSES, VACATION, commit, git, indexed

pytestmark = pytest.mark.django_db

OUTSIDE = "The vault combination outside the allowed root is 7391-QX."


@pytest.fixture
def root(tmp_path: Path, settings: Any) -> Path:
    """The one directory local repositories may be in (KB_SOURCE_FOLDER_ROOTS), with a secret file beside it."""
    allowed = tmp_path / "repos"
    allowed.mkdir()
    settings.KB_SOURCE_FOLDER_ROOTS = [str(allowed)]
    (tmp_path / "outside.md").write_text(f"# Vault\n\n{OUTSIDE}\n")
    return allowed


@pytest.fixture
def repo(root: Path) -> Path:
    path = root / "handbook"
    path.mkdir()
    git("init", "-q", "-b", "main", cwd=path)
    commit(path, {"docs/vacation.md": VACATION, "docs/expenses.md": EXPENSES}, "first")
    return path


@pytest.fixture
def handbook(db: None) -> Folder:
    return Folder.objects.create(name="Handbook", public=True)


def content_manager() -> Client:
    """Staff who may view, add and change sources, and read the public folder only."""
    user = User.objects.create_user("cm", password="cm", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(
        content_type__app_label="kb", codename__in=("view_source", "add_source", "change_source")))
    client = Client()
    client.force_login(user)
    return client


def send(client: Client, method: str, path: str, body: dict[str, Any]) -> Any:
    return getattr(client, method)(path, data=json.dumps(body), content_type="application/json")


def injection(marker: Path) -> list[str]:
    """Branch values that ran `sh -c` through git fetch/clone before issue 47 (the first is the reproduction)."""
    return [f"--upload-pack=env > {marker}; git-upload-pack", f"-u env>{marker};git-upload-pack",
            f"--upload-pack=touch {marker}", f"-c core.sshCommand=touch {marker}", f"--config=core.hooksPath={marker}"]


# --------------------------------------------------------------------------- the reproduction


def test_a_branch_that_is_an_option_is_refused_by_the_api_and_never_reaches_git(
    root: Path, repo: Path, handbook: Folder, tmp_path: Path
) -> None:
    client = content_manager()
    marker = tmp_path / "pwned"
    added = send(client, "post", "/api/sources", {"name": "handbook", "kind": "git", "location": f"file://{repo}",
                                                   "folder": handbook.pk, "branch": "main"})
    assert added.status_code == 201, added.content
    source = Source.objects.get(pk=added.json()["id"])
    assert source_sync(source).new == 2

    for bad in injection(marker):
        refused = send(client, "patch", f"/api/sources/{source.pk}", {"branch": bad})
        assert refused.status_code == 400 and "branch" in refused.json()["detail"], (bad, refused.content)
        created = send(client, "post", "/api/sources", {"name": "other", "kind": "git", "location": f"file://{repo}",
                                                         "folder": handbook.pk, "branch": bad})
        assert created.status_code == 400 and "branch" in created.json()["detail"], (bad, created.content)
        form = {"name": "other", "kind": "git", "location": f"file://{repo}", "branch": bad, "path": "", "include": "",
                "exclude": "", "shrink_guard": "0.5", "every_text": "", "credential": "", "folder": handbook.pk}
        page = client.post("/admin/kb/source/add/", form)  # the admin's add form: shown again, saying why
        assert page.status_code == 200 and "branch name" in page.content.decode(), (bad, page.status_code)
    assert Source.objects.get(pk=source.pk).branch == "main" and Source.objects.count() == 1

    # A bad value written past the API (an older version, the database by hand) fails the run, runs nothing and
    # deletes nothing.
    for bad in injection(marker):
        Source.objects.filter(pk=source.pk).update(branch=bad)
        source.refresh_from_db()
        result = source_sync(source)
        assert result.status == "failed" and "branch name" in result.reason, (bad, result.reason)
        assert not marker.exists(), bad
    assert Document.objects.filter(source=source).count() == 2
    # Positive control: the reproduction's value, given to git fetch as the code before issue 47 did, runs `env`
    # (and the fetch succeeds, as that run did).
    git("fetch", "--quiet", "--depth", "1", "origin", injection(marker)[0], cwd=source_git.cache_dir(source))
    assert "PATH=" in marker.read_text()


def test_branch_names_git_accepts_pass_and_others_are_refused_whatever_they_look_like() -> None:
    for good in ("main", "release/1.2", "feature/ünïcode", "−−upload-pack", "ｆｕｌｌｗｉｄｔｈ", "v1.0-rc.1"):
        assert source_git.branch_check(f" {good} ") == good
    assert source_git.branch_check("  ") == ""
    for bad in ("-x", "--upload-pack=x", "+main", "@", "@{-1}", "HEAD", "a..b", "x:y", "a b", "ma\nin", "a\x1bb",
                "\u202emain", "ma\u200bin", "main\u2028x", "x\x85y",
                "refs/heads/../x", "x.lock", "a~1", "a^", "a?", "a*", "a[", "a\\b", "/main", "main/", "a//b"):
        with pytest.raises(ListingError):
            source_git.branch_check(bad)


def test_locations_that_git_or_ssh_would_read_as_an_option_or_a_command_are_refused(root: Path, repo: Path,
                                                                                   tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    assert source_git.location_check("https://git.example.com/docs/handbook.git") == "https"
    assert source_git.location_check("http://git.example.com/handbook.git") == "http"
    assert source_git.location_check("ssh://git@git.example.com:2222/docs/handbook.git") == "ssh"
    assert source_git.location_check("git@git.example.com:docs/handbook.git") == "ssh"
    assert source_git.location_check(f"file://{repo}") == "file"
    assert source_git.location_check(str(repo)) == "file"
    refused = {
        f"--upload-pack=touch {marker}": "never starts with '-'",
        f"-u touch {marker}": "never starts with '-'",
        f"ext::sh -c touch% {marker}": "remote helpers",
        "fd::0": "remote helpers",
        f"ssh://-oProxyCommand=touch%20{marker}/x": "starting with '-'",
        "https://git.example.com/\u202etxt.git": "invisible",
        f"ssh://-oProxyCommand=touch%20{marker}@host/x": "starting with '-'",
        "-oProxyCommand=touch pwned:x": "never starts with '-'",
        "git@-oProxyCommand=touch pwned:x": "starting with '-'",
        "[-oProxyCommand=touch pwned]:x": "starting with '-'",
        f"ssh://host:-oProxyCommand=touch {marker}/x": "not a URL",
        "git://git.example.com/x.git": "not git://",
        "ftp://git.example.com/x.git": "not ftp://",
        "https://bot:s3cret@git.example.com/x.git": "password or token",
        "https:///x.git": "no host name",
        f"file://{root}/%2e%2e/outside": "without %-escapes",
        f"file://{tmp_path}": "KB_SOURCE_FOLDER_ROOTS",
        f"{root}/../outside.md": "KB_SOURCE_FOLDER_ROOTS",
        "file://localhost/srv/x": "file:///absolute/path",
        "relative/repo": "absolute path",
        "\u2212\u2212upload-pack=x": "absolute path",  # homoglyph dashes: a relative path, not an option
        f"file://{repo}\n--upload-pack=x": "control or invisible",
    }
    for location, reason in refused.items():
        with pytest.raises(ListingError, match=reason):
            source_git.location_check(location)
    assert not marker.exists()


def test_a_bad_location_written_to_the_database_fails_the_run_and_runs_nothing(handbook: Folder, root: Path,
                                                                               tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    source = Source.objects.create(name="x", kind="git", location="https://git.example.com/x.git", folder=handbook)
    for location in (f"ext::sh -c touch% {marker}", f"--upload-pack=touch {marker}",
                     f"ssh://-oProxyCommand=touch%20{marker}/x", f"file://{tmp_path}"):
        Source.objects.filter(pk=source.pk).update(location=location)
        source.refresh_from_db()
        result = source_sync(source)
        assert result.status == "failed" and result.reason, location
        assert not marker.exists(), location


# --------------------------------------------------------------------------- what git runs with


def test_git_runs_with_none_of_the_servers_secrets_in_its_environment(
    handbook: Folder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ssh is the one program a fetch runs on its own: a stand-in for it records the environment it got."""
    dump = tmp_path / "environment"
    ssh = tmp_path / "ssh"
    ssh.write_text(f"#!/bin/sh\nenv > {dump}\nexit 1\n")
    ssh.chmod(0o700)
    canaries = {"SECRET_KEY": "sk-canary-5512", "DATABASE_URL": "postgres://kb:pw-canary-5513@db/kb",
                "KB_SOURCE_HANDBOOK_TOKEN": "tok-canary-5514", "REDIS_URL": "redis://:pw-canary-5515@redis/0"}
    for name, value in canaries.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("GIT_SSH_COMMAND", str(ssh))  # the operator's setting, passed on
    source = Source.objects.create(name="handbook", kind="git", location="ssh://git.invalid/docs/handbook.git",
                                   folder=handbook, secret="stored-canary-5516")
    result = source_sync(source)
    assert result.status == "failed" and "git clone failed" in result.reason
    seen = dump.read_text()  # the stand-in ran: git did start ssh
    for value in [*canaries.values(), "stored-canary-5516"]:
        assert value not in seen
    names = {line.partition("=")[0] for line in seen.splitlines() if "=" in line}
    assert not names & {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "KB_GIT_PASSWORD", "DJANGO_SETTINGS_MODULE"}
    assert f"HOME={source_git._home()}" in seen and "GIT_CONFIG_GLOBAL=/dev/null" in seen


def test_hooks_and_fsmonitor_planted_in_the_clone_never_run(handbook: Folder, repo: Path, tmp_path: Path) -> None:
    source = Source.objects.create(name="handbook", kind="git", location=f"file://{repo}", branch="main",
                                   folder=handbook)
    assert source_sync(source).new == 2
    cache = source_git.cache_dir(source)
    marker = tmp_path / "hooked"
    script = f"#!/bin/sh\nenv >> {marker}\n"
    for hook in ("post-checkout", "reference-transaction", "post-merge", "post-index-change", "pre-auto-gc"):
        (cache / ".git" / "hooks").mkdir(exist_ok=True)
        (cache / ".git" / "hooks" / hook).write_text(script)
        (cache / ".git" / "hooks" / hook).chmod(0o700)
    (tmp_path / "fsmonitor").write_text(script)
    (tmp_path / "fsmonitor").chmod(0o700)
    git("config", "core.fsmonitor", str(tmp_path / "fsmonitor"), cwd=cache)

    commit(repo, {"docs/vacation.md": VACATION.replace("twenty-seven", "thirty-one")}, "edit")
    result = source_sync(source)
    assert result.status == "ok" and result.changed == 1, result.summary()
    assert indexed("thirty-one vacation days")
    assert not marker.exists()
    git("reset", "-q", "--hard", "HEAD~0", cwd=cache)  # positive control: plain git does run them
    assert marker.exists()


def test_a_submodule_or_a_link_in_the_repository_reads_nothing_outside_it(handbook: Folder, repo: Path,
                                                                          tmp_path: Path) -> None:
    (repo / "docs" / "vault.md").symlink_to(tmp_path / "outside.md")
    (repo / "docs" / "elsewhere").symlink_to(tmp_path)
    git("add", "docs", cwd=repo)
    git("commit", "-q", "-m", "links", cwd=repo)
    source = Source.objects.create(name="handbook", kind="git", location=f"file://{repo}", branch="main",
                                   folder=handbook)
    entries = source_git.list_entries(source)
    assert sorted(e.path for e in entries) == ["docs/expenses.md", "docs/vacation.md"]
    cache = source_git.cache_dir(source)
    assert not any(p.is_symlink() for p in cache.rglob("*"))  # checked out as plain files naming their target

    # A link swapped in after the listing is not followed: not for the file, not for a directory on the way.
    vacation = cache / "docs" / "vacation.md"
    vacation.unlink()
    vacation.symlink_to(tmp_path / "outside.md")
    with pytest.raises(OSError, match="symbolic link"):
        next(e for e in entries if e.path == "docs/vacation.md").read()
    shutil.move(cache / "docs", tmp_path / "moved")
    (tmp_path / "moved" / "expenses.md").write_text(OUTSIDE)
    (cache / "docs").symlink_to(tmp_path / "moved")
    with pytest.raises(OSError, match="symbolic link"):
        next(e for e in entries if e.path == "docs/expenses.md").read()
    assert OUTSIDE not in json.dumps([e.path for e in entries])


def test_a_sub_path_or_glob_that_looks_like_an_option_is_only_a_path(handbook: Folder, repo: Path,
                                                                    tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    source = Source.objects.create(name="handbook", kind="git", location=f"file://{repo}", branch="main",
                                   folder=handbook, include=[f"--output={marker}"], exclude=["-x"])
    for path in (f"--output={marker}", "-r", ":(top)", ":/", ":(exclude)docs", "--", f"--upload-pack=touch {marker}"):
        Source.objects.filter(pk=source.pk).update(path=path)
        source.refresh_from_db()
        result = source_sync(source)
        assert result.status == "ok" and result.listed == 0, (path, result.summary())
    assert not marker.exists() and not Document.objects.exists()


def test_a_password_is_never_kept_in_the_clone_or_handed_to_ssh(handbook: Folder, repo: Path) -> None:
    source = Source.objects.create(name="handbook", kind="git", location=f"file://{repo}", branch="main",
                                   folder=handbook, secret="s3cret-canary-6620")
    assert source_sync(source).status == "ok"
    cache = source_git.cache_dir(source)
    kept = [p for p in cache.rglob("*") if p.is_file() and b"s3cret-canary-6620" in p.read_bytes()]
    assert kept == []
