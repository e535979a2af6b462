"""The library's upload form: where an upload goes and who may read it, with the messages shown
to the admin when the form is wrong.

`upload_target_of` and `readers_of` are the one rule behind the library page (UploadForm) and
the documents API (kb.library.documents_api), so the two cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.files.uploadedfile import UploadedFile
from django.utils.translation import gettext, gettext_lazy

from kb.library.access import folders_readable
from kb.library.ingest.extract import SUPPORTED, SUPPORTED_KINDS
from kb.library.models import Folder
from kb.library.services import UploadResult, document_upload


def upload_choices(user: Any) -> dict[str, Any]:
    """What the library's upload form offers a document manager: folders with their audience,
    groups and active people to share with, the size limit and the accepted file kinds."""
    return {
        "all_folders": _folders_with_audience(user),
        "groups": Group.objects.order_by("name"),
        "people": get_user_model().objects.filter(is_active=True).order_by("username"),
        "max_upload_mb": settings.KB_MAX_UPLOAD_MB,
        "upload_accept": ",".join(SUPPORTED),
        "upload_kinds": SUPPORTED_KINDS,
    }


def _folders_with_audience(user: Any) -> list[Folder]:
    """The folders `user` may upload into (a superuser: all; other staff: those whose grants admit them,
    as document_upload requires), each with `.audience`: who reads the documents that inherit its grants."""
    found = Folder.objects.order_by("name").prefetch_related("groups", "users")
    if not user.is_superuser:
        found = found.filter(pk__in=folders_readable(user).values("pk"))
    folders = list(found)
    for folder in folders:
        if folder.public:
            folder.audience = gettext("everyone")  # type: ignore[attr-defined]
        else:
            names = [g.name for g in folder.groups.all()] + [u.get_username() for u in folder.users.all()]
            folder.audience = ", ".join(names) or gettext("nobody yet")  # type: ignore[attr-defined]
    return folders


class UploadFormError(ValueError):
    """The upload form itself is wrong (not the file); the message is shown to the admin."""


@dataclass(frozen=True)
class UploadTarget:
    """Where an upload goes and who may read it, as document_upload() takes it."""

    folder: Folder | None
    public: bool | None
    groups: list[Group] | None
    users: list[Any] | None


def upload_store(*, target: UploadTarget, upload: UploadedFile[bytes], uploaded_by: Any) -> UploadResult:
    """Store one uploaded file where `target` says, with its readers; UploadRejected says why not."""
    return document_upload(
        name=upload.name or "upload",
        stream=upload,
        size=upload.size or 0,
        folder=target.folder,
        uploaded_by=uploaded_by,
        groups=target.groups,
        users=target.users,
        public=target.public,
    )


def upload_target_of(
    *, folder_id: str, access: str, group_ids: Iterable[str | int], user_ids: Iterable[str | int]
) -> UploadTarget:
    """Where an upload goes and who reads it; the one rule behind the library page and the documents API."""
    folder = None
    if folder_id:
        if not folder_id.isdigit() or (folder := Folder.objects.filter(pk=int(folder_id)).first()) is None:
            raise UploadFormError(gettext("Folder %(id)s does not exist (any more); reload the folder list.")
                                  % {"id": folder_id})
    access = access or ("folder" if folder else "everyone")
    if access == "folder":
        if folder is None:
            raise UploadFormError(gettext("Choose a folder, or choose who may read the documents."))
        return UploadTarget(folder=folder, public=None, groups=None, users=None)
    if access == "everyone":
        return UploadTarget(folder=folder, public=True, groups=[], users=[])
    if access != "restricted":
        raise UploadFormError(gettext("Choose who may read the documents."))
    groups, users = readers_of(group_ids=group_ids, user_ids=user_ids)
    if not groups and not users:
        raise UploadFormError(gettext("Choose at least one group or person who may read the documents."))
    return UploadTarget(folder=folder, public=False, groups=groups, users=users)


class UploadForm(forms.Form):
    """One file of the library's upload form (the page posts each file alone, for its progress bar).

    The fields take what the browser sends as it is; `clean()` applies `upload_target_of`, so
    the form reports the same first problem, in the same words, as the documents API.
    """

    file = forms.FileField(allow_empty_file=True, error_messages={"required": gettext_lazy("No file was received.")})
    folder = forms.Field(required=False)
    access = forms.Field(required=False)
    groups = forms.Field(required=False, widget=forms.SelectMultiple)
    users = forms.Field(required=False, widget=forms.SelectMultiple)

    target: UploadTarget

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:
            self.target = upload_target_of(
                folder_id=str(data.get("folder") or "").strip(),
                access=str(data.get("access") or ""),
                group_ids=data.get("groups") or [],
                user_ids=data.get("users") or [],
            )
        except UploadFormError as exc:
            raise forms.ValidationError(str(exc), code="invalid") from None
        return data

    def first_error(self) -> str:
        """The message the page shows: the first problem found, as the admin should fix it."""
        return next(str(messages[0]) for messages in self.errors.values())

    def save(self, *, uploaded_by: Any) -> UploadResult:
        """Store the valid form's file; UploadRejected says why the file itself was refused."""
        return upload_store(target=self.target, upload=self.cleaned_data["file"], uploaded_by=uploaded_by)


def readers_of(*, group_ids: Iterable[str | int], user_ids: Iterable[str | int]) -> tuple[list[Group], list[Any]]:
    """The groups and active people named by id; an id that names none is an error, never dropped silently."""
    wanted_groups, wanted_users = _ids(group_ids, "group"), _ids(user_ids, "person")
    groups = list(Group.objects.filter(pk__in=wanted_groups))
    users = list(get_user_model().objects.filter(pk__in=wanted_users, is_active=True))
    for kind, wanted, found in (("group", wanted_groups, groups), ("active person", wanted_users, users)):
        missing = sorted(set(wanted) - {item.pk for item in found})
        if missing:
            raise UploadFormError(f"No {kind} with id {', '.join(map(str, missing))}.")
    return groups, users


def _ids(values: Iterable[str | int], kind: str) -> list[int]:
    ids = []
    for value in values:
        text = str(value).strip()
        if not text.isdigit():
            raise UploadFormError(f"{text!r} is not a {kind} id.")
        ids.append(int(text))
    return ids
