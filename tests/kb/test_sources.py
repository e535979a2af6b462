"""Sources kept in sync (issue 27), against real things: a directory, a Git repository made with the
`git` binary and cloned over file://, the real pipeline and search, and a real worker for `manage.py sync`."""

from __future__ import annotations

import os
import subprocess
from io import StringIO
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from kb.library.models import Chunk, Document, Folder, Source
from kb.library.sources.sync import LOCK_CLASS, SourceBusy, SyncResult, source_sync
from search.retrieval import hybrid_search
from tests.conftest import manage, service_env

VACATION = """# Vacation policy

Every employee of Quillmark accrues twenty-seven vacation days per calendar year, booked in the leave
planner at least two weeks ahead; unused days carry over until the end of March of the next year.

## Sick leave

Sick leave is reported to the team lead before nine in the morning of the first day of absence.
"""
VACATION_EDITED = VACATION.replace(
    "Every employee of Quillmark accrues twenty-seven vacation days per calendar year",
    "Every employee of Quillmark accrues thirty-one vacation days per calendar year",
)
EXPENSES = """# Travel expenses

Meals on business trips abroad are reimbursed up to ninety-four euros per day against receipts filed in
the expense portal within one month of returning, and taxis only when no train runs after ten at night.
"""
ONCALL = """On-call rota
============

The platform on-call engineer answers a pager alert within fifteen minutes, around the clock, and
hands the pager over every Monday at ten with a written summary of the open incidents.
"""
LUNCH = """# Canteen

The canteen on the fourth floor serves a vegetarian lasagne every Thursday from half past eleven.
"""


def found(user: Any, query: str, phrase: str) -> bool:
    """Whether `user`'s search for `query` returns a passage holding `phrase`."""
    return any(phrase in hit.content for hit in hybrid_search(user=user, query=query).hits)


def indexed(phrase: str) -> bool:
    """Whether any chunk of the index holds `phrase`: what retrieval could ever return."""
    return Chunk.objects.filter(content__contains=phrase).exists()


def git(*args: str, cwd: Path) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.com", GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_SYSTEM="/dev/null")
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def commit(repo: Path, files: dict[str, str | None], message: str) -> None:
    """Write (or, for None, delete) files and commit them."""
    for name, text in files.items():
        path = repo / name
        if text is None:
            git("rm", "-q", name, cwd=repo)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        git("add", name, cwd=repo)
    git("commit", "-q", "-m", message, cwd=repo)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "handbook"
    path.mkdir()
    git("init", "-q", "-b", "main", cwd=path)
    commit(path, {"docs/vacation.md": VACATION, "docs/expenses.md": EXPENSES, "docs/oncall.rst": ONCALL,
                  "docs/logo.png": "not a document", ".github/notes.md": LUNCH, "docs/drafts/lunch.md": LUNCH,
                  "README.md": LUNCH}, "first")
    return path


@pytest.fixture(autouse=True)
def _folder_roots(settings: Any, tmp_path: Path) -> None:
    """The operator allows sources under the test's temporary directory (kb.library.sources.policy)."""
    settings.KB_SOURCE_FOLDER_ROOTS = [str(tmp_path)]


@pytest.fixture
def public_folder(db: None) -> Folder:
    return Folder.objects.create(name="Handbook", public=True)


def counts(result: SyncResult) -> tuple[int, ...]:
    return (result.listed, result.unchanged, result.changed, result.new, result.deleted, result.renamed, result.failed)


def test_git_source_follows_commits_that_add_edit_rename_and_delete(people: dict[str, Any], repo: Path,
                                                                    public_folder: Folder) -> None:
    carol = people["carol"]
    source = Source.objects.create(name="handbook", kind="git", location=f"file://{repo}", branch="main",
                                   path="docs", exclude=["docs/drafts/*"], folder=public_folder)

    first = source_sync(source)
    # Only docs/ (the sub-path), only supported types, nothing hidden, drafts excluded.
    assert first.status == "ok" and counts(first) == (3, 0, 0, 3, 0, 0, 0), first.failures
    assert first.chunks_embedded == Chunk.objects.count() >= 3
    documents = {d.source_path: d for d in Document.objects.filter(source=source)}
    assert set(documents) == {"docs/vacation.md", "docs/expenses.md", "docs/oncall.rst"}
    assert all(d.status == "ready" and d.folder == public_folder for d in documents.values())
    assert found(carol, "How many vacation days do employees get?", "twenty-seven vacation days")
    assert not indexed("vegetarian lasagne")
    source.refresh_from_db()
    assert source.last_status == "ok" and source.last_new == 3 and source.last_success_at is not None

    again = source_sync(source)
    assert counts(again) == (3, 3, 0, 0, 0, 0, 0) and again.chunks_embedded == 0
    assert {d.pk: d.version for d in Document.objects.filter(source=source)} == {d.pk: d.version for d in documents.values()}

    commit(repo, {"docs/vacation.md": VACATION_EDITED}, "more vacation")
    edited = source_sync(source)
    assert counts(edited) == (3, 2, 1, 0, 0, 0, 0)
    vacation = Document.objects.get(source=source, source_path="docs/vacation.md")
    assert vacation.pk == documents["docs/vacation.md"].pk and vacation.version == 2 and vacation.status == "ready"
    assert found(carol, "How many vacation days do employees get?", "thirty-one vacation days")
    assert not indexed("twenty-seven vacation days")
    assert not found(carol, "twenty-seven vacation days per calendar year", "twenty-seven")

    (repo / "docs" / "travel").mkdir()
    git("mv", "docs/expenses.md", "docs/travel/expenses.md", cwd=repo)
    git("commit", "-q", "-m", "move", cwd=repo)
    moved = source_sync(source)
    assert counts(moved) == (3, 2, 0, 0, 0, 1, 0) and moved.chunks_embedded == 0
    expenses = Document.objects.get(source=source, source_path="docs/travel/expenses.md")
    assert expenses.pk == documents["docs/expenses.md"].pk and expenses.version == 1
    assert Document.objects.filter(source=source).count() == 3
    assert Chunk.objects.filter(content__contains="ninety-four euros").count() == 1

    commit(repo, {"docs/oncall.rst": None}, "no more on-call")
    gone = source_sync(source)
    assert counts(gone) == (2, 2, 0, 0, 1, 0, 0)
    assert not Document.objects.filter(pk=documents["docs/oncall.rst"].pk).exists()
    assert not indexed("pager alert") and not found(carol, "Who answers a pager alert?", "pager")


def test_folder_source_and_a_broken_file_that_fails_alone(people: dict[str, Any], tmp_path: Path,
                                                          public_folder: Folder) -> None:
    share = tmp_path / "share"
    (share / "policies").mkdir(parents=True)
    (share / "policies" / "vacation.md").write_text(VACATION)
    (share / "policies" / "expenses.md").write_text(EXPENSES)
    (share / "policies" / "broken.pdf").write_bytes(b"%PDF-1.4\n" + os.urandom(2000))  # fails in the pipeline
    (share / "policies" / "binary.md").write_bytes(b"# Binary\n\x00\x01 junk\n")  # refused at upload
    (share / "policies" / "notes.tmp.md").write_text(LUNCH)
    source = Source.objects.create(name="share", kind="folder", location=str(share), include=["policies/*"],
                                   exclude=["*.tmp.md"], folder=public_folder)

    result = source_sync(source)
    assert result.status == "ok" and counts(result) == (4, 0, 0, 3, 0, 0, 2)
    reasons = dict(result.failures)
    assert set(reasons) == {"policies/broken.pdf", "policies/binary.md"} and "NUL bytes" in reasons["policies/binary.md"]
    statuses = dict(Document.objects.filter(source=source).values_list("source_path", "status"))
    assert statuses == {"policies/vacation.md": "ready", "policies/expenses.md": "ready", "policies/broken.pdf": "failed"}
    assert Document.objects.get(source_path="policies/broken.pdf").failure_reason == reasons["policies/broken.pdf"] != ""
    assert found(people["carol"], "reimbursed meals abroad per day", "ninety-four euros")

    (share / "policies" / "vacation.md").write_text(VACATION_EDITED)
    (share / "policies" / "expenses.md").unlink()
    later = source_sync(source)
    # The broken PDF is unchanged: not read again, not failed again; the refused file has no document, so it is tried again.
    assert counts(later) == (3, 1, 1, 0, 1, 0, 1) and [path for path, _ in later.failures] == ["policies/binary.md"]
    assert not indexed("twenty-seven vacation days") and indexed("thirty-one vacation days")
    assert not indexed("ninety-four euros")


def test_an_unreachable_source_deletes_nothing_and_says_why(people: dict[str, Any], repo: Path, tmp_path: Path,
                                                            public_folder: Folder) -> None:
    share = tmp_path / "share"
    share.mkdir()
    (share / "expenses.md").write_text(EXPENSES)
    folder_source = Source.objects.create(name="share", kind="folder", location=str(share), folder=public_folder)
    git_source = Source.objects.create(name="repo", kind="git", location=f"file://{repo}", path="docs",
                                       folder=public_folder)
    assert source_sync(folder_source).new == 1 and source_sync(git_source).new == 3
    before = set(Document.objects.values_list("pk", "version"))

    share.rename(tmp_path / "unmounted")
    Source.objects.filter(pk=git_source.pk).update(location=f"file://{tmp_path}/gone.git")
    git_source.refresh_from_db()
    for source, why in ((folder_source, "no such directory"), (git_source, "git clone failed")):
        result = source_sync(source)
        assert result.status == "failed" and why in result.reason and counts(result) == (0,) * 7
        source.refresh_from_db()
        assert source.last_status == "failed" and why in source.last_reason and source.last_success_at is not None
    assert set(Document.objects.values_list("pk", "version")) == before
    assert found(people["carol"], "reimbursed meals abroad per day", "ninety-four euros")


def test_credentials_in_a_location_and_a_missing_folder_are_refused(public_folder: Folder, tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="password or token") as refused:
        call_command("source", "add", "secret", "--kind", "git", "--location", "https://bot:s3cr3t@git.example/x.git",
                     "--folder", "Handbook")
    assert "s3cr3t" not in str(refused.value)
    with pytest.raises(CommandError, match="no KB folder named 'Nowhere'"):
        call_command("source", "add", "x", "--kind", "folder", "--location", str(tmp_path), "--folder", "Nowhere")
    assert not Source.objects.exists()


def test_a_listing_that_shrinks_past_the_guard_is_held_until_confirmed(tmp_path: Path, public_folder: Folder) -> None:
    share = tmp_path / "share"
    share.mkdir()
    for name, text in {"a.md": VACATION, "b.md": EXPENSES, "c.rst": ONCALL, "d.md": LUNCH}.items():
        (share / name).write_text(text)
    source = Source.objects.create(name="share", kind="folder", location=str(share), folder=public_folder)
    assert source_sync(source).new == 4
    for name in ("a.md", "b.md", "c.rst"):
        (share / name).unlink()

    held = source_sync(source)
    assert held.status == "held" and "3 of 4 documents would be deleted" in held.reason and held.deleted == 0
    assert Document.objects.filter(source=source).count() == 4 and indexed("pager alert")
    source.refresh_from_db()
    assert source.last_status == "held"

    confirmed = source_sync(source, confirm=True)
    assert confirmed.status == "ok" and confirmed.deleted == 3
    assert list(Document.objects.filter(source=source).values_list("source_path", flat=True)) == ["d.md"]
    assert not indexed("pager alert")


def test_a_sources_documents_take_its_folders_access(people: dict[str, Any], tmp_path: Path) -> None:
    finance = Folder.objects.create(name="Finance", public=False)
    finance.groups.set([people["groups"]["finance"]])
    share = tmp_path / "finance"
    share.mkdir()
    (share / "expenses.md").write_text(EXPENSES)
    source = Source.objects.create(name="finance", kind="folder", location=str(share), folder=finance)
    assert source_sync(source).new == 1
    query = "reimbursed meals abroad per day"
    assert found(people["bob"], query, "ninety-four euros")
    for outsider in ("alice", "carol", "sam"):
        assert hybrid_search(user=people[outsider], query=query).hits == []


def test_two_runs_of_one_source_never_overlap(tmp_path: Path, public_folder: Folder) -> None:
    source = Source.objects.create(name="share", kind="folder", location=str(tmp_path), folder=public_folder)
    db = connection.settings_dict
    with psycopg.connect(host=db["HOST"], port=db["PORT"], user=db["USER"], dbname=db["NAME"], autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s, %s)", [LOCK_CLASS, source.pk])
        with pytest.raises(SourceBusy, match="another run"):
            source_sync(source)
        other.execute("SELECT pg_advisory_unlock(%s, %s)", [LOCK_CLASS, source.pk])
    assert source_sync(source).status == "ok"


def test_source_commands_add_list_and_remove(tmp_path: Path, public_folder: Folder) -> None:
    (tmp_path / "expenses.md").write_text(EXPENSES)
    out = StringIO()
    call_command("source", "add", "share", "--kind", "folder", "--location", str(tmp_path), "--folder", "Handbook",
                 "--include", "*.md", "*.rst", "--exclude", "drafts/*", "--every", "15m", stdout=out)
    source = Source.objects.get(name="share")
    assert (source.include, source.exclude, source.every, source.folder) == (["*.md", "*.rst"], ["drafts/*"], 900,
                                                                             public_folder)
    with pytest.raises(CommandError, match="already exists"):
        call_command("source", "add", "share", "--kind", "folder", "--location", str(tmp_path), "--folder", "Handbook")
    source_sync(source)
    out = StringIO()
    call_command("source", "list", stdout=out)
    assert "share\tfolder" in out.getvalue() and "last=ok" in out.getvalue() and "documents=1" in out.getvalue()

    call_command("source", "remove", "share", "--keep-documents", stdout=StringIO())
    kept = Document.objects.get()
    assert kept.source is None and kept.folder == public_folder and indexed("ninety-four euros")

    other = Source.objects.create(name="again", kind="folder", location=str(tmp_path), folder=public_folder)
    Document.objects.all().delete()
    source_sync(other)
    call_command("source", "remove", "again", stdout=StringIO())
    assert not Source.objects.exists() and not Document.objects.exists() and not indexed("ninety-four euros")


def test_source_commands_watch_a_folder_and_refuse_to_watch_a_repository(tmp_path: Path, public_folder: Folder) -> None:
    """`source add --watch`, `source change --watch/--no-watch` (issue 51) and `source list` showing it."""
    out = StringIO()
    call_command("source", "add", "share", "--kind", "folder", "--location", str(tmp_path), "--folder", "Handbook",
                 "--every", "15m", "--watch", stdout=out)
    assert Source.objects.get(name="share").watch is True and "watched" in out.getvalue()
    out = StringIO()
    call_command("source", "list", stdout=out)
    assert "\tevery 900s, watched\t" in out.getvalue()

    call_command("source", "change", "share", "--no-watch", stdout=StringIO())
    assert Source.objects.get(name="share").watch is False
    out = StringIO()
    call_command("source", "list", stdout=out)
    assert "\tevery 900s\t" in out.getvalue() and "watched" not in out.getvalue()
    call_command("source", "change", "share", "--watch", stdout=StringIO())
    assert Source.objects.get(name="share").watch is True
    with pytest.raises(CommandError, match="--watch or --no-watch"):
        call_command("source", "change", "share")
    with pytest.raises(CommandError, match="no source named"):
        call_command("source", "change", "nowhere", "--watch")

    with pytest.raises(CommandError, match="only a folder source .* push webhook"):
        call_command("source", "add", "repo", "--kind", "git", "--location", "https://git.example.com/x.git",
                     "--folder", "Handbook", "--watch")
    assert not Source.objects.filter(name="repo").exists()
    call_command("source", "add", "repo", "--kind", "git", "--location", "https://git.example.com/x.git",
                 "--folder", "Handbook", stdout=StringIO())
    with pytest.raises(CommandError, match="only a folder source"):
        call_command("source", "change", "repo", "--watch")
    assert Source.objects.get(name="repo").watch is False


def test_a_folder_a_source_fills_is_not_deleted_from_under_it(people: dict[str, Any], tmp_path: Path,
                                                               public_folder: Folder) -> None:
    """The source would have nowhere to put its documents: refused with the source's name (was a 500)."""
    from django.test import Client

    Source.objects.create(name="share", kind="folder", location=str(tmp_path), folder=public_folder)
    admin = Client()
    admin.force_login(people["admin"])
    refused = admin.delete(f"/api/folders/{public_folder.pk}")
    assert refused.status_code == 409 and "filled by the source(s) share" in refused.json()["detail"]
    assert Folder.objects.filter(pk=public_folder.pk).exists()


@pytest.mark.slow
def test_sync_command_runs_on_the_worker_and_waits(celery_worker: Any, repo: Path, tmp_path: Path) -> None:
    Folder.objects.create(name="Handbook", public=True)
    env = service_env(KB_SOURCE_FOLDER_ROOTS=str(tmp_path))  # the operator allows local repositories there
    added = manage("source", "add", "handbook", "--kind", "git", "--location", f"file://{repo}", "--folder",
                   "Handbook", "--path", "docs", "--exclude", "docs/drafts/*", env=env)
    assert added.returncode == 0, added.stderr
    run = manage("sync", "handbook", "--wait", env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "listed=3 unchanged=0 changed=0 new=3 deleted=0 renamed=0 failed=0 chunks_embedded=" in run.stdout
    assert Document.objects.filter(source__name="handbook", status="ready").count() == 3

    Source.objects.filter(name="handbook").update(location=f"file://{repo}-missing")
    failed = manage("sync", "handbook", "--wait", env=env, timeout=300)
    assert failed.returncode != 0 and "git clone failed" in failed.stderr
    assert Document.objects.filter(source__name="handbook", status="ready").count() == 3


def _section(number: int, fact: str) -> str:
    words = " ".join(f"step{number}x{i}" for i in range(90))
    return f"## Procedure {number}\n\n{fact} The operator then follows the checklist: {words}.\n"


def test_editing_one_section_of_a_manual_re_embeds_only_its_chunks(people: dict[str, Any], tmp_path: Path,
                                                                   public_folder: Folder) -> None:
    facts = [f"Valve {n} of the cooling loop is opened with the brass key number {n}0{n}." for n in range(1, 9)]
    manual = tmp_path / "manual.md"
    manual.write_text("# Plant manual\n\n" + "\n".join(_section(n, fact) for n, fact in enumerate(facts, 1)))
    source = Source.objects.create(name="plant", kind="folder", location=str(tmp_path), folder=public_folder)
    first = source_sync(source)
    document = Document.objects.get(source=source)
    assert first.chunks_embedded == document.chunk_count >= 8 and document.chunks_reused == 0
    before = {c.text: (list(c.embedding), bytes(c.late_vectors)) for c in Chunk.objects.filter(document=document)}

    new_fact = "Valve 5 of the cooling loop is opened with the red lever beside the pump."
    manual.write_text(manual.read_text().replace(facts[4], new_fact))
    edited = source_sync(source)
    document.refresh_from_db()
    assert edited.changed == 1 and document.version == 2 and document.chunk_count == len(before)
    assert edited.chunks_embedded == 1 and document.chunks_reused == document.chunk_count - 1
    after = list(Chunk.objects.filter(document=document))
    kept = [c for c in after if c.text in before]
    assert len(kept) == len(after) - 1
    assert all((list(c.embedding), bytes(c.late_vectors)) == before[c.text] for c in kept)
    assert found(people["carol"], "How is valve 5 of the cooling loop opened?", "red lever")
    assert not indexed("brass key number 505")
