"""Where a folder source may point is the operator's setting (issue 47): a content manager (view, add and
change sources, read access to one public folder) can no longer make the server read its own files into a
public folder, and no link swapped in after a listing redirects a read."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command
from django.test import Client

from kb.library.models import Document, Folder, Source
from kb.library.services import document_upload, folder_set_access
from kb.library.sources.folder import list_entries
from kb.library.sources.policy import local_root_check, read_listed
from kb.library.sources.services import SourceRejected, source_check
from kb.library.sources.sync import source_sync
from tests.kb.test_sources_api import send, staff

HR_SHEET = b"# Salary review\n\nThe salary review ceiling for grade seven is 61,300 euros, code HR-5520.\n"


@pytest.fixture
def public(db: None) -> Folder:
    folder = Folder.objects.create(name="Handbook")
    folder_set_access(folder=folder, public=True)
    return folder


@pytest.fixture
def manager(public: Folder) -> Client:
    """The content manager of the issue: view, add and change sources, and read access to one public folder."""
    client = Client()
    client.force_login(staff("cm", "view_source", "add_source", "change_source"))
    return client


def test_with_nothing_configured_no_directory_may_be_a_source(public: Folder, tmp_path: Path, settings: Any) -> None:
    settings.KB_SOURCE_FOLDER_ROOTS = []
    with pytest.raises(SourceRejected, match="KB_SOURCE_FOLDER_ROOTS"):
        source_check(name="share", kind="folder", location=str(tmp_path), folder_name="Handbook")
    settings.KB_SOURCE_FOLDER_ROOTS = [str(tmp_path)]  # one setting opens it
    assert source_check(name="share", kind="folder", location=str(tmp_path / "docs"), folder_name="Handbook")[1] == str(
        tmp_path / "docs")
    with pytest.raises(SourceRejected, match=r"not under a directory this server allows sources in \(KB_SOURCE_FOLDER_ROOTS"):
        source_check(name="share", kind="folder", location=str(tmp_path.parent), folder_name="Handbook")


def test_the_servers_own_data_is_never_a_source_whatever_is_listed(public: Folder, tmp_path: Path, settings: Any) -> None:
    settings.KB_SOURCE_FOLDER_ROOTS = ["/"]
    other_cache = Path(django_settings.VAR_DIR) / "sources" / "7"
    link = tmp_path / "innocent"
    link.symlink_to(django_settings.MEDIA_ROOT)  # a path that looks harmless and resolves into the media root
    for location in (str(django_settings.MEDIA_ROOT), "/", "/etc", str(django_settings.VAR_DIR), str(other_cache),
                     str(django_settings.STATIC_ROOT), "/proc/self", str(link)):
        with pytest.raises(SourceRejected, match="KB_SOURCE_FOLDER_ROOTS") as refused:
            source_check(name="share", kind="folder", location=location, folder_name="Handbook")
        assert "server's own data or system files" in str(refused.value) or "not under" in str(refused.value), location
    assert local_root_check(str(tmp_path)) == tmp_path.resolve()  # a plain directory is fine under "/"


def test_a_content_manager_cannot_add_the_media_root_by_the_api_the_admin_or_the_command(
        manager: Client, public: Folder, settings: Any, tmp_path: Path) -> None:
    settings.KB_SOURCE_FOLDER_ROOTS = [str(tmp_path)]
    media = str(django_settings.MEDIA_ROOT)
    for location in (media, "/", "/etc", str(django_settings.VAR_DIR)):
        refused = send(manager, "post", "/api/sources", {"name": "x", "kind": "folder", "location": location,
                                                         "folder": public.pk})
        assert refused.status_code == 400 and "KB_SOURCE_FOLDER_ROOTS" in refused.json()["detail"], refused.content
    share = tmp_path / "share"
    share.mkdir()
    added = send(manager, "post", "/api/sources", {"name": "share", "kind": "folder", "location": str(share),
                                                   "folder": public.pk})
    assert added.status_code == 201, added.content
    moved = send(manager, "patch", f"/api/sources/{added.json()['id']}", {"location": media})
    assert moved.status_code == 400 and "KB_SOURCE_FOLDER_ROOTS" in moved.json()["detail"]
    assert Source.objects.get().location == str(share)

    form = {"name": "media", "kind": "folder", "location": media, "branch": "", "path": "", "include": "",
            "exclude": "", "shrink_guard": "0.5", "every_text": "", "credential": "", "folder": public.pk}
    admin_form = manager.post("/admin/kb/source/add/", form)
    assert admin_form.status_code == 200 and "KB_SOURCE_FOLDER_ROOTS" in admin_form.content.decode()
    with pytest.raises(CommandError, match="KB_SOURCE_FOLDER_ROOTS"):
        call_command("source", "add", "media", "--kind", "folder", "--location", media, "--folder", "Handbook")
    assert Source.objects.count() == 1


def test_a_source_at_the_media_root_added_before_the_policy_fails_its_run_and_changes_nothing(
        people: dict[str, Any], public: Folder, settings: Any, tmp_path: Path) -> None:
    hr = Folder.objects.create(name="HR")
    folder_set_access(folder=hr, public=False, groups=[people["groups"]["hr"]])
    upload = document_upload(name="salaries.md", stream=io.BytesIO(HR_SHEET), size=len(HR_SHEET),
                             folder=hr, enqueue=False)
    assert Path(upload.document.file.path).is_relative_to(django_settings.MEDIA_ROOT)
    settings.KB_SOURCE_FOLDER_ROOTS = ["/"]
    # A row written before this version (or by hand): the run checks the policy again.
    media = Source.objects.create(name="media", kind="folder", location=str(django_settings.MEDIA_ROOT), folder=public)
    result = source_sync(media)
    assert result.status == "failed" and "KB_SOURCE_FOLDER_ROOTS" in result.reason and result.new == 0
    assert not Document.objects.filter(folder=public).exists()

    # The operator narrows the roots after a source ran: its next run fails with the reason and deletes nothing.
    share = tmp_path / "share"
    share.mkdir()
    (share / "canteen.md").write_text("# Canteen\n\nThe canteen serves soup at noon on weekdays.\n")
    settings.KB_SOURCE_FOLDER_ROOTS = [str(tmp_path)]
    canteen = Source.objects.create(name="canteen", kind="folder", location=str(share), folder=public)
    assert source_sync(canteen).new == 1
    settings.KB_SOURCE_FOLDER_ROOTS = []
    closed = source_sync(canteen)
    assert closed.status == "failed" and "KB_SOURCE_FOLDER_ROOTS" in closed.reason and closed.deleted == 0
    canteen.refresh_from_db()
    assert canteen.last_status == "failed" and "KB_SOURCE_FOLDER_ROOTS" in canteen.last_reason
    assert Document.objects.filter(source=canteen).count() == 1


@pytest.mark.parametrize("target", ["secret", "/proc/self/environ"])
def test_a_file_swapped_for_a_link_after_the_listing_is_never_read_through_it(
        public: Folder, settings: Any, tmp_path: Path, target: str) -> None:
    secret = tmp_path / "var" / "secret_key"
    secret.parent.mkdir()
    secret.write_text("django-insecure-SECRET-7781")
    share = tmp_path / "share"
    (share / "docs").mkdir(parents=True)
    (share / "docs" / "notes.md").write_text("# Notes\n\nThe notes of the week.\n")
    settings.KB_SOURCE_FOLDER_ROOTS = [str(share)]
    source = Source.objects.create(name="share", kind="folder", location=str(share), folder=public)
    [entry] = list_entries(source)
    assert entry.read().startswith(b"# Notes")

    (share / "docs" / "notes.md").unlink()
    (share / "docs" / "notes.md").symlink_to(secret if target == "secret" else target)
    with pytest.raises(OSError, match="changed since it was listed"):
        entry.read()


def test_a_directory_swapped_for_a_link_or_a_file_replaced_after_the_listing_fails_that_file(
        public: Folder, settings: Any, tmp_path: Path) -> None:
    outside = tmp_path / "outside" / "docs"
    outside.mkdir(parents=True)
    (outside / "notes.md").write_text("# Outside\n\nNot the share's.\n")
    share = tmp_path / "share"
    (share / "docs").mkdir(parents=True)
    (share / "docs" / "notes.md").write_text("# Notes\n\nThe notes of the week.\n")
    (share / "plan.md").write_text("# Plan\n\nThe plan.\n")
    settings.KB_SOURCE_FOLDER_ROOTS = [str(share)]
    source = Source.objects.create(name="share", kind="folder", location=str(share), folder=public)
    entries = {e.path: e for e in list_entries(source)}
    assert set(entries) == {"docs/notes.md", "plan.md"}

    (share / "docs").rename(share / "old-docs")
    (share / "docs").symlink_to(outside)  # the same names, through a link to elsewhere
    with pytest.raises(OSError, match="the directory 'docs' changed since it was listed"):
        entries["docs/notes.md"].read()
    (share / "plan.md").unlink()
    (share / "plan.md").write_text("# Plan\n\nAnother file now.\n")
    with pytest.raises(OSError, match="another file than the one listed"):
        entries["plan.md"].read()
    os.mkfifo(share / "fifo.md")  # never listed (not a regular file), and never blocks a read
    found = (share / "old-docs" / "notes.md").lstat()
    with pytest.raises(OSError):
        read_listed(share, "fifo.md", found)
    assert read_listed(share, "old-docs/notes.md", found).startswith(b"# Notes")


def test_a_sub_path_through_a_link_is_refused(public: Folder, settings: Any, tmp_path: Path) -> None:
    share = tmp_path / "share"
    share.mkdir()
    (share / "etc").symlink_to("/etc")
    settings.KB_SOURCE_FOLDER_ROOTS = [str(share)]
    source = Source.objects.create(name="share", kind="folder", location=str(share), path="etc", folder=public)
    result = source_sync(source)
    assert result.status == "failed" and "symbolic link" in result.reason and result.listed == 0
    assert not Document.objects.filter(source=source).exists()
