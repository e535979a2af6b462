"""Issue 28 items 1 and 10: the documents and folders API for staff holding only some Django permissions.

The rule (kb.library.access.staff_may): a change needs the model permission for that action and read
access to the object; only superusers manage what they cannot read. What staff cannot read they
cannot see either: no restricted folder listed, no grants of a folder they may not read.
And a re-upload waiting to be indexed does not show its new file's hash to the old audience.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from kb.library.models import Document, Folder
from kb.library.services import document_upload, folder_create

GUESS = b"# Pay\n\nThe new pay scale starts at 7,300.\n"


def stored(name: str, text: bytes, folder: Folder | None, **access: Any) -> Document:
    """A document as the operator uploads it (no uploader: no staff rule)."""
    return document_upload(name=name, stream=io.BytesIO(text), size=len(text), folder=folder, enqueue=False,
                           **access).document


def staff(name: str, *perms: str, groups: tuple[Any, ...] = ()) -> User:
    user = User.objects.create_user(name, password=name, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="kb", codename__in=perms))
    user.groups.set(groups)
    return user


def as_user(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def files(name: str, data: bytes) -> list[io.BytesIO]:
    stream = io.BytesIO(data)
    stream.name = name
    return [stream]


@pytest.fixture
def shop(people: dict[str, Any]) -> dict[str, Any]:
    """A public folder, an engineering folder, an hr folder, and a document of mallory's own in the hr one.
    mallory: staff with kb.add_document only, in no group."""
    groups = people["groups"]
    general = folder_create(name="general", public=True)
    eng = folder_create(name="eng", public=False, groups=[groups["engineering"]])
    hr = folder_create(name="hr", public=False, groups=[groups["hr"]])
    mallory = staff("mallory", "add_document")
    return {
        "general": general,
        "eng": eng,
        "hr": hr,
        "mallory": mallory,
        "guide": stored("guide.md", b"# Guide\n\nHow we work.\n", general),
        "specs": stored("specs.md", b"# Specs\n\nEngine specs.\n", eng),
        "salaries": stored("salaries.md", b"# Salaries\n\nSecret numbers.\n", hr),
        "note": stored("note.md", b"# Note\n\nFor mallory.\n", hr, public=False, users=[mallory]),
    }


def grant(user: User, *perms: str) -> None:
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="kb", codename__in=perms))


# --------------------------------------------------------------------------- item 1: folders


def test_staff_see_only_folders_they_may_know_of_and_grants_only_of_those_they_read(shop: dict[str, Any]) -> None:
    mallory = as_user(shop["mallory"])
    listed = {f["name"]: f["access"] for f in mallory.get("/api/folders").json()}
    # hr is listed because it holds her note, but its grants are not hers to see; eng not at all.
    assert listed == {"general": {"inherit": False, "public": True, "groups": [], "users": []}, "hr": None}
    assert mallory.get(f"/api/folders/{shop['eng'].pk}").status_code == 404
    assert mallory.get(f"/api/folders/{shop['hr'].pk}").json()["access"] is None


def test_the_reported_takeover_is_refused_and_changes_nothing(people: dict[str, Any], shop: dict[str, Any]) -> None:
    """Issue 28's steps: mallory (kb.add_document, no group) gives a folder to herself, then deletes."""
    mallory, eng, hr = shop["mallory"], shop["eng"], shop["hr"]
    client = as_user(mallory)
    body = {"users": [mallory.pk]}
    for folder in (eng, hr):  # no kb.change_folder: refused before any folder is looked up
        refused = client.put(f"/api/folders/{folder.pk}/access", body, content_type="application/json")
        assert refused.status_code == 403 and "kb.change_folder" in refused.json()["detail"]
    assert client.delete(f"/api/documents/{shop['note'].pk}").status_code == 403  # hers to read, not to delete
    grant(mallory, "change_folder", "delete_folder", "change_document", "delete_document")
    client = as_user(User.objects.get(pk=mallory.pk))
    assert client.put(f"/api/folders/{eng.pk}/access", body, content_type="application/json").status_code == 404
    refused = client.put(f"/api/folders/{hr.pk}/access", body, content_type="application/json")
    assert refused.status_code == 403  # she sees hr (her note is in it) but may not read the folder
    assert client.delete(f"/api/folders/{hr.pk}").status_code == 403
    assert client.delete(f"/api/documents/{shop['salaries'].pk}").status_code == 404
    specs, salaries = Document.objects.get(pk=shop["specs"].pk), Document.objects.get(pk=shop["salaries"].pk)
    assert specs.acl == [f"g:{people['groups']['engineering'].pk}"]
    assert salaries.acl == [f"g:{people['groups']['hr'].pk}"]
    assert list(Folder.objects.get(pk=hr.pk).users.all()) == []


def test_each_write_needs_its_model_permission(shop: dict[str, Any]) -> None:
    """mallory may read the guide and the general folder; kb.add_document alone changes neither."""
    client = as_user(shop["mallory"])
    guide, general = shop["guide"].pk, shop["general"].pk
    json = "application/json"
    refused = {
        "delete document": client.delete(f"/api/documents/{guide}"),
        "document access": client.put(f"/api/documents/{guide}/access", {"users": [shop["mallory"].pk]},
                                      content_type=json),
        "reindex": client.post(f"/api/documents/{guide}/reindex"),
        "folder access": client.put(f"/api/folders/{general}/access", {"users": [shop["mallory"].pk]},
                                    content_type=json),
        "delete folder": client.delete(f"/api/folders/{general}"),
        "create folder": client.post("/api/folders", {"name": "Mine"}, content_type=json),
    }
    assert {name: r.status_code for name, r in refused.items()} == dict.fromkeys(refused, 403)
    assert "kb.delete_document" in refused["delete document"].json()["detail"]
    assert Document.objects.filter(pk=guide).exists() and Folder.objects.get(pk=general).public
    assert not Folder.objects.filter(name="Mine").exists()


def test_with_the_permission_and_read_access_staff_manage(people: dict[str, Any], shop: dict[str, Any]) -> None:
    """The positive control: eve reads eng through engineering and holds the permissions."""
    groups = people["groups"]
    eve = staff("eve", "add_document", "change_document", "delete_document", "add_folder", "change_folder",
                "delete_folder", groups=(groups["engineering"],))
    client = as_user(eve)
    listed = {f["name"]: f["access"] for f in client.get("/api/folders").json()}
    assert listed["eng"] == {"inherit": False, "public": False, "groups": [groups["engineering"].pk], "users": []}
    assert "hr" not in listed
    changed = client.put(f"/api/folders/{shop['eng'].pk}/access", {"groups": [groups["finance"].pk]},
                         content_type="application/json")
    assert changed.status_code == 200, changed.content
    assert changed.json()["access"]["groups"] == [groups["finance"].pk]  # shown: she just set it
    assert Document.objects.get(pk=shop["specs"].pk).acl == [f"g:{groups['finance'].pk}"]
    # Having given eng away she no longer reads it: no second change, and it is gone from her list.
    again = client.put(f"/api/folders/{shop['eng'].pk}/access", {"groups": [groups["engineering"].pk]},
                       content_type="application/json")
    assert again.status_code == 404
    created = client.post("/api/folders", {"name": "Mine", "groups": [groups["engineering"].pk]},
                          content_type="application/json")
    assert created.status_code == 201
    assert client.delete(f"/api/folders/{created.json()['id']}").status_code == 204
    assert client.delete(f"/api/documents/{shop['guide'].pk}").status_code == 204


def test_a_superuser_manages_any_folder(people: dict[str, Any], shop: dict[str, Any]) -> None:
    admin = as_user(people["admin"])
    assert {f["name"] for f in admin.get("/api/folders").json()} >= {"eng", "hr", "general"}
    response = admin.put(f"/api/folders/{shop['hr'].pk}/access", {"public": True}, content_type="application/json")
    assert response.status_code == 200 and response.json()["access"]["public"] is True


# --------------------------------------------------------------------------- item 1: uploads


def test_uploads_only_into_folders_staff_may_read(shop: dict[str, Any]) -> None:
    client = as_user(shop["mallory"])
    before = Document.objects.count()
    hidden = client.post("/api/documents", {"files": files("x.md", b"# X\n\nx.\n"), "folder": str(shop["eng"].pk)})
    assert hidden.status_code == 400  # as for a folder that does not exist
    assert hidden.json()["detail"] == f"Folder {shop['eng'].pk} does not exist (any more); reload the folder list."
    seen = client.post("/api/documents", {"files": files("x.md", b"# X\n\nx.\n"), "folder": str(shop["hr"].pk)})
    assert seen.status_code == 403
    assert Document.objects.count() == before
    fine = client.post("/api/documents", {"files": files("x.md", b"# X\n\nx.\n"), "folder": str(shop["general"].pk)})
    assert fine.status_code == 201, fine.content


def test_replacing_a_document_by_upload_needs_the_change_permission(shop: dict[str, Any]) -> None:
    client = as_user(shop["mallory"])
    new = {"files": files("guide.md", b"# Guide\n\nRewritten by mallory.\n"), "folder": str(shop["general"].pk)}
    item = client.post("/api/documents", new).json()["items"][0]
    assert item["document"] is None and "permission to change documents" in item["error"]
    assert Document.objects.get(pk=shop["guide"].pk).version == 1
    grant(shop["mallory"], "change_document")
    client = as_user(User.objects.get(pk=shop["mallory"].pk))
    new = {"files": files("guide.md", b"# Guide\n\nRewritten by mallory.\n"), "folder": str(shop["general"].pk)}
    item = client.post("/api/documents", new).json()["items"][0]
    assert item["error"] is None and item["document"]["id"] == shop["guide"].pk


# --------------------------------------------------------------------------- item 10: a pending version's hash


@pytest.fixture
def pending(people: dict[str, Any], shop: dict[str, Any]) -> Document:
    """The public guide's new version, waiting to be indexed, is for hr only."""
    stored("guide.md", GUESS, shop["general"], public=False, groups=[people["groups"]["hr"]])
    document = Document.objects.get(pk=shop["guide"].pk)
    assert document.pending_acl == [f"g:{people['groups']['hr'].pk}"] and document.acl == ["everyone"]
    return document


def test_a_pending_versions_hash_is_not_shown_to_the_old_audience(
    people: dict[str, Any], shop: dict[str, Any], pending: Document
) -> None:
    import hashlib

    new_hash = hashlib.sha256(GUESS).hexdigest()
    assert pending.sha256 == new_hash
    eve = staff("eve", "add_document", "change_document", groups=(people["groups"]["engineering"],))
    for user in (people["alice"], shop["mallory"], eve):  # the served version's readers, not the new one's
        client = as_user(user)
        detail = client.get(f"/api/documents/{pending.pk}").json()
        listed = {d["id"]: d for d in client.get("/api/documents").json()["items"]}
        assert detail["sha256"] == "", user
        assert listed.get(pending.pk, {"sha256": ""})["sha256"] == "", user
    assert as_user(people["dave"]).get(f"/api/documents/{pending.pk}").json()["sha256"] == new_hash  # hr
    assert as_user(people["admin"]).get(f"/api/documents/{pending.pk}").json()["sha256"] == new_hash


def test_an_upload_cannot_confirm_a_guess_of_the_pending_version(
    people: dict[str, Any], shop: dict[str, Any], pending: Document
) -> None:
    """Staff of the old audience uploading the guessed file: the same answer as for a wrong guess."""
    eve = staff("eve", "add_document", "change_document", groups=(people["groups"]["engineering"],))
    for user in (shop["mallory"], eve):
        client = as_user(user)
        answers = []
        for data in (GUESS, b"# Pay\n\nA wrong guess.\n"):
            item = client.post("/api/documents", {"files": files("guide.md", data),
                                                  "folder": str(shop["general"].pk)}).json()["items"][0]
            answers.append((item["created"], item["queued"], item["error"], item["document"]))
        assert answers[0] == answers[1], user
        assert answers[0][2] is not None  # refused: replacing needs access to both versions
    assert Document.objects.get(pk=pending.pk).version == pending.version
