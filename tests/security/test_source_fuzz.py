"""Hostile source settings through /api/sources as a content manager (issue 47): option-like, traversal, encoded,
control-character and Unicode look-alike values for each field a staff user writes (location, branch, path,
include, exclude) of a Git source, and the location and path of a folder source, on adding a source and on
changing one. Every answer is a success or a refusal (never a server error), a stored value is one the runs
accept, and after a run of every source that was accepted no command ran (no marker file) and nothing outside
the allowed root was indexed. A fixed table rather than a generator: each value stands for a class of attack."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from kb.library.models import Chunk, Folder, Source
from kb.library.sources import git as source_git
from kb.library.sources.listing import ListingError
from kb.library.sources.sync import source_sync
from tests.kb.test_sources import VACATION, commit, git

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

VAULT = "The outside vault code is 8843-ZK, never to be indexed."
FIELDS = ("location", "branch", "path", "include", "exclude")  # those of them in a kind's base below


def hostile(marker: Path, root: Path, outside: Path, repo: Path) -> list[str]:
    """Values tried in every field (and the locations below in `location`)."""
    run = f"touch {marker}"
    return [
        # options and commands
        f"--upload-pack={run}; git-upload-pack", f"-u {run}", "-x", f"--output={marker}", f"-oProxyCommand={run}",
        f"--config=core.hooksPath={marker.parent}", f"$({run})", f"`{run}`", f"main; {run}", f"main|{run}",
        # traversal
        "../", "../../../../etc/passwd", f"{root}/../{outside.name}", "docs/../../..", "....//....//", "..\\..\\",
        # encoded
        "%2e%2e/%2e%2e/", "..%2f..%2f", "%2d%2dupload-pack=x", "&#45;&#45;upload-pack", "\\x2d\\x2dupload-pack",
        # control characters (NUL-free)
        "\x1b[31mred", "a\tb", "a\rb", "main\x7f", "x\u0085y", "main\n--upload-pack=x",
        # Unicode look-alikes and marks
        "\uff0fetc\uff0fpasswd", "\u202emain", "\u200fmain", "\u2212\u2212upload-pack=x", "\u2010\u2010upload-pack",
        "\uff4d\uff41\uff49\uff4e", "\ufeffmain", "main\u2028", "\u2024\u2024/\u2024\u2024/etc",
        # locations
        f"file://{outside}", f"file://{root}/../{outside.name}", f"file://{root}/%2e%2e/{outside.name}",
        f"file://{root}/link", f"{root}/link", f"ext::sh -c {run.replace(' ', '% ')}", "fd::3",
        f"ssh://-oProxyCommand={run.replace(' ', '%20')}/x", f"file:\uff0f\uff0f{repo}", f"\uff46\uff49\uff4c\uff45://{repo}",
        "file:///etc", "file:///proc/self/environ", "/", f"file://{repo}", str(repo),
    ]


@pytest.fixture
def world(tmp_path: Path, settings: Any) -> dict[str, Any]:
    root = tmp_path / "allowed"
    root.mkdir()
    settings.KB_SOURCE_FOLDER_ROOTS = [str(root)]
    repo = root / "handbook"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    commit(repo, {"docs/vacation.md": VACATION}, "first")
    outside = tmp_path / "vault"
    outside.mkdir()
    git("init", "-q", "-b", "main", cwd=outside)
    commit(outside, {"docs/vault.md": f"# Vault\n\n{VAULT}\n"}, "first")
    (root / "link").symlink_to(outside)  # inside the root by name, outside by what it is
    share = root / "share"
    share.mkdir()
    (share / "parking.md").write_text("# Parking\n\nVisitors park in bay seventeen.\n")
    user = User.objects.create_user("content-manager", password="x", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(
        content_type__app_label="kb", codename__in=("view_source", "add_source", "change_source")))
    client = Client(raise_request_exception=False)
    client.force_login(user)
    handbook = Folder.objects.create(name="Handbook", public=True)
    bases = {
        "git": {"kind": "git", "location": f"file://{repo}", "branch": "main", "path": "docs", "include": ["*.md"],
                "exclude": ["drafts/*"]},
        "folder": {"kind": "folder", "location": str(share), "path": ""},  # the globs are the Git source's code
    }
    return {"root": root, "repo": repo, "outside": outside, "marker": tmp_path / "pwned", "client": client,
            "folder": handbook, "bases": bases}


def _send(client: Client, method: str, path: str, body: dict[str, Any]) -> Any:
    return getattr(client, method)(path, data=json.dumps(body), content_type="application/json")


def _body_value(field: str, value: str) -> Any:
    return [value] if field in ("include", "exclude") else value


def _run(source: Source, problems: list[str], what: str) -> None:
    """A run of an accepted source: it ends ok, failed or held with a reason, never with an exception, and
    what it stored passes the checks the runs make."""
    if source.kind == Source.Kind.GIT:
        try:
            source_git.branch_check(source.branch)
        except ListingError as exc:
            problems.append(f"{what}: stored a branch the runs refuse: {exc}")
    try:
        result = source_sync(source)
    except Exception as exc:  # recorded: every value is still tried
        problems.append(f"{what}: the run raised {type(exc).__name__}: {exc}")
        return
    if result.status not in ("ok", "failed", "held") or (result.status == "failed" and not result.reason):
        problems.append(f"{what}: the run ended {result.status!r} {result.reason!r}")


def test_hostile_source_settings_are_refused_or_harmless(world: dict[str, Any]) -> None:
    """Each value is added and changed; a source that took it is run. Adding and changing store a value alike,
    and only the location and branch decide what a first run (a clone) does otherwise than a later one (a
    fetch): for the other fields the changed source alone is run, and the globs, which only filter the listing,
    all together once per field."""
    client, marker = world["client"], world["marker"]
    values = hostile(marker, world["root"], world["outside"], world["repo"])
    problems: list[str] = []
    statuses: dict[int, int] = {}
    tried = runs = 0
    for kind, base in world["bases"].items():
        made = _send(client, "post", "/api/sources", {**base, "name": f"base-{kind}", "folder": world["folder"].pk})
        assert made.status_code == 201, made.content
        source = Source.objects.get(pk=made.json()["id"])
        assert source_sync(source).status == "ok"
        fields = [field for field in FIELDS if field in base]
        for field in fields:
            globs: list[str] = []
            for number, value in enumerate(values):
                what = f"{kind} {field}={value!r}"
                tried += 2
                added = _send(client, "post", "/api/sources", {**base, "name": f"{kind}-{field}-{number}",
                                                                "folder": world["folder"].pk,
                                                                field: _body_value(field, value)})
                changed = _send(client, "patch", f"/api/sources/{source.pk}", {field: _body_value(field, value)})
                for verb, response, ok in (("add", added, 201), ("change", changed, 200)):
                    statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
                    if response.status_code not in (ok, 400, 422):
                        problems.append(f"{verb} {what}: answered {response.status_code} {response.content[:200]!r}")
                if (added.status_code == 201) != (changed.status_code == 200):
                    problems.append(f"{what}: adding answered {added.status_code}, changing {changed.status_code}")
                    continue
                if added.status_code != 201:
                    continue
                stored = Source.objects.get(pk=added.json()["id"])
                source.refresh_from_db()
                if getattr(stored, field) != getattr(source, field):
                    problems.append(f"{what}: added as {getattr(stored, field)!r}, changed to {getattr(source, field)!r}")
                if field in ("include", "exclude"):
                    globs.append(value)
                    continue
                runs += 1 + (field in ("location", "branch"))
                _run(source, problems, f"change {what}")
                if field in ("location", "branch"):
                    _run(stored, problems, f"add {what}")
                Source.objects.filter(pk=source.pk).update(**{field: base[field]})
            if globs:
                runs += 1
                Source.objects.filter(pk=source.pk).update(**{field: globs})
                _run(Source.objects.get(pk=source.pk), problems, f"{kind} {field}: every glob accepted")
            Source.objects.filter(pk=source.pk).update(**{f: base[f] for f in fields})
    print(f"\nsource fuzz: {tried} requests, answers {dict(sorted(statuses.items()))}, {runs} runs")
    assert not problems, "\n".join(problems[:40])
    assert not marker.exists(), "a value ran a command"
    assert not Chunk.objects.filter(content__contains="8843-ZK").exists(), "a file outside the allowed root was indexed"
    assert not Chunk.objects.filter(content__contains="root:x:0:0").exists()
    assert statuses.get(400, 0) > 50 and statuses.get(201, 0) > 10  # both refusals and acceptances were exercised
