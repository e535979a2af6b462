"""The library's upload form: the first problem, in the admin's words; a valid form stores the file."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.http import QueryDict

from kb.library.forms import UploadForm
from kb.library.models import Document, Folder

pytestmark = pytest.mark.django_db


def form(fields: str, file: bytes | None = b"# Notes\n\ntext\n") -> UploadForm:
    """The form as the page posts it: `fields` is the urlencoded body, `file` the one file (or none)."""
    files = {"file": SimpleUploadedFile("notes.md", file)} if file is not None else {}
    return UploadForm(QueryDict(fields), files)


@pytest.mark.parametrize(
    "fields,message",
    [
        ("folder=abc", "Folder abc does not exist (any more); reload the folder list."),
        ("folder=+999999+&access=everyone", "Folder 999999 does not exist (any more); reload the folder list."),
        ("access=folder", "Choose a folder, or choose who may read the documents."),
        ("access=nobody", "Choose who may read the documents."),
        ("access=restricted", "Choose at least one group or person who may read the documents."),
        ("access=restricted&groups=x&users=y", "'x' is not a group id."),
        ("access=restricted&users=y", "'y' is not a person id."),
        ("access=restricted&groups=999999&groups=999998", "No group with id 999998, 999999."),
        ("access=restricted&users=999999", "No active person with id 999999."),
    ],
)
def test_a_wrong_form_says_what_to_fix(fields: str, message: str) -> None:
    upload = form(fields)
    assert not upload.is_valid()
    assert upload.first_error() == message


def test_a_missing_file_is_named_before_any_other_problem() -> None:
    upload = form("folder=abc", file=None)
    assert not upload.is_valid()
    assert upload.first_error() == "No file was received."


def test_readers_are_ignored_unless_access_is_restricted() -> None:
    upload = form("access=everyone&groups=x&users=999999")
    assert upload.is_valid(), upload.errors
    assert upload.target.public is True and upload.target.groups == []


def test_a_valid_form_stores_the_file_where_it_says(people: dict[str, Any]) -> None:
    finance = people["groups"]["finance"]
    folder = Folder.objects.create(name="Ledgers", public=False)
    upload = form(f"folder={folder.pk}&access=restricted&groups={finance.pk}&users={people['bob'].pk}")
    assert upload.is_valid(), upload.errors
    result = upload.save(uploaded_by=people["admin"])
    document = Document.objects.get(pk=result.document.pk)
    assert result.created and document.folder == folder and document.uploaded_by == people["admin"]
    assert sorted(document.acl) == sorted([f"g:{finance.pk}", f"u:{people['bob'].pk}"])


def test_an_empty_file_reaches_the_upload_rules_which_name_it() -> None:
    """The form does not refuse it with Django's own words; the upload service says which file."""
    from kb.library.services import UploadRejected

    upload = form("access=everyone", file=b"")
    assert upload.is_valid(), upload.errors
    with pytest.raises(UploadRejected, match="notes.md: the file is empty"):
        upload.save(uploaded_by=None)
