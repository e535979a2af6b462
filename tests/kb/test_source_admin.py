"""Adding a source in the admin (issue 27): the rules of `manage.py source add` and /api/sources, a folder
among those the adder may read, and a secret that is stored but never shown back."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from kb.library.models import Folder, Source
from kb.library.services import folder_set_access

pytestmark = pytest.mark.django_db

FORM = {"name": "handbook", "kind": "git", "location": "https://git.example.com/handbook.git", "branch": "main",
        "path": "docs", "include": "", "exclude": "drafts/*", "shrink_guard": "0.5", "every_text": "15m",
        "credential": "s3cret-t0ken"}


@pytest.fixture
def folders(people: dict[str, Any]) -> dict[str, Folder]:
    engineering = Folder.objects.create(name="Engineering")
    hr = Folder.objects.create(name="HR")
    folder_set_access(folder=engineering, public=False, groups=[people["groups"]["engineering"]])
    folder_set_access(folder=hr, public=False, groups=[people["groups"]["hr"]])
    return {"engineering": engineering, "hr": hr}


def staff_adder(user: Any) -> Client:
    user.is_staff = True
    user.save()
    user.user_permissions.add(*Permission.objects.filter(codename__in=["add_source", "view_source"]))
    client = Client()
    client.force_login(user)
    return client


def test_staff_add_a_source_into_a_folder_they_read_and_its_secret_is_never_shown(
    people: dict[str, Any], folders: dict[str, Folder]
) -> None:
    client = staff_adder(people["alice"])  # engineering, not hr
    page = client.get("/admin/kb/source/add/").content.decode()
    assert "Engineering" in page and ">HR<" not in page  # only folders alice may read are offered

    response = client.post("/admin/kb/source/add/", {**FORM, "folder": folders["engineering"].pk})
    assert response.status_code == 302, response.content.decode()[:2000]
    source = Source.objects.get(name="handbook")
    assert (source.kind, source.branch, source.path, source.exclude, source.every, source.folder) == (
        "git", "main", "docs", ["drafts/*"], 900, folders["engineering"])
    assert source.secret == "s3cret-t0ken"
    change = client.get(f"/admin/kb/source/{source.pk}/change/").content.decode()
    assert "s3cret-t0ken" not in change and '<div class="readonly">set</div>' in change


def test_a_folder_the_adder_cannot_read_and_a_bad_location_are_refused_and_nothing_is_stored(
    people: dict[str, Any], folders: dict[str, Folder]
) -> None:
    client = staff_adder(people["alice"])
    hr = client.post("/admin/kb/source/add/", {**FORM, "folder": folders["hr"].pk})
    assert hr.status_code == 200 and "Select a valid choice" in hr.content.decode()
    credentials = client.post("/admin/kb/source/add/", {**FORM, "location": "https://bob:pw@git.example.com/x.git",
                                                        "folder": folders["engineering"].pk})
    assert credentials.status_code == 200 and "holds a password or token" in credentials.content.decode()
    schedule = client.post("/admin/kb/source/add/", {**FORM, "every_text": "10s", "folder": folders["engineering"].pk})
    assert schedule.status_code == 200 and "the shortest schedule is 60 s" in schedule.content.decode()
    assert not Source.objects.exists()


def test_without_the_add_permission_there_is_no_add_form(people: dict[str, Any], folders: dict[str, Folder]) -> None:
    people["alice"].is_staff = True
    people["alice"].save()
    people["alice"].user_permissions.add(Permission.objects.get(codename="view_source"))
    client = Client()
    client.force_login(people["alice"])
    assert client.get("/admin/kb/source/add/").status_code == 403
    assert client.post("/admin/kb/source/add/", {**FORM, "folder": folders["engineering"].pk}).status_code == 403
    assert not Source.objects.exists()


def test_a_folder_source_added_watched_is_saved_so_and_a_git_one_is_refused_beside_the_box(
    people: dict[str, Any], folders: dict[str, Folder], settings: Any, tmp_path: Any
) -> None:
    settings.KB_SOURCE_FOLDER_ROOTS = [str(tmp_path)]
    client = staff_adder(people["alice"])
    assert 'name="watch"' in client.get("/admin/kb/source/add/").content.decode()

    git = client.post("/admin/kb/source/add/", {**FORM, "watch": "on", "folder": folders["engineering"].pk})
    assert git.status_code == 200 and not Source.objects.exists()
    errors = git.context["adminform"].form.errors
    assert "only a folder source" in errors["watch"][0] and "push webhook" in errors["watch"][0]

    folder = {**FORM, "name": "share", "kind": "folder", "location": str(tmp_path), "branch": "", "credential": "",
              "watch": "on", "folder": folders["engineering"].pk}
    assert client.post("/admin/kb/source/add/", folder).status_code == 302
    source = Source.objects.get(name="share")
    assert source.watch is True
    listing = client.get("/admin/kb/source/").content.decode()
    assert "15m · watched" in listing
    detail = client.get(f"/admin/kb/source/{source.pk}/change/").content.decode()
    assert "field-watch" in detail
    repo = Source.objects.create(name="repo", kind="git", location="https://git.example.com/x.git",
                                 folder=folders["engineering"])
    assert "field-watch" not in client.get(f"/admin/kb/source/{repo.pk}/change/").content.decode()
