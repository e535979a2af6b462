"""Adding and removing sources (the operator's writes); their runs are kb.library.sources.sync."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.utils.translation import gettext

from kb.library.models import Folder, Source
from kb.library.services import document_delete
from kb.library.sources import git, site
from kb.library.sources.listing import ListingError, sub_path
from kb.library.sources.policy import local_root_check
from kb.library.sources.secrets import secret_setting, secret_setting_set
from kb.library.sources.sync import SourceBusy, source_lock

_DURATION = re.compile(r"^(\d+)\s*([smhd]?)$")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
MIN_EVERY = 60  # seconds: a schedule tighter than this would mostly list an unchanged source


class SourceRejected(ValueError):
    """A source that cannot be added as asked; the message says why."""


def parse_every(value: str) -> int:
    """Seconds of a schedule written as 90s, 15m, 2h, 1d or plain seconds."""
    match = _DURATION.match(value.strip().lower())
    if match is None:
        raise SourceRejected(f"{value!r}: write the interval as 90s, 15m, 2h or 1d")
    seconds = int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if seconds < MIN_EVERY:
        raise SourceRejected(f"{value!r}: the shortest schedule is {MIN_EVERY} s")
    return seconds


def every_text(seconds: int | None) -> str:
    """A schedule as `parse_every` reads it, in the largest whole unit (900 -> "15m"); "" when run by hand only."""
    if not seconds:
        return ""
    for unit in ("d", "h", "m"):
        if seconds % _UNIT_SECONDS[unit] == 0:
            return f"{seconds // _UNIT_SECONDS[unit]}{unit}"
    return f"{seconds}s"


def location_reachable_check(*, kind: str, location: str, secret: str = "") -> None:
    """SourceRejected unless a folder source's directory (or a local Git repository) exists and can be read now,
    or a site's start URL answers (with `secret` as its token), so a mistyped location is refused before a source
    is saved rather than at its first run. Only locations within the operator's policy are looked at
    (`source_check` applies it first, and the site's request goes only to an address it allows); a remote Git
    URL is not fetched here (its host is checked against the policy, and the first run reports the rest)."""
    from kb.library.sources.policy import local_root_check

    try:
        if kind == Source.Kind.FOLDER or (kind == Source.Kind.GIT and git.location_check(location) == "file"):
            local = location.strip().removeprefix("file://")
            real = local_root_check(local)
            if not real.is_dir():
                raise SourceRejected(f"{location.strip()!r}: no such directory on the server; check the path "
                                     "(it is read by the server, not by your computer)")
            if not os.access(real, os.R_OK | os.X_OK):
                raise SourceRejected(f"{location.strip()!r}: the server may not read this directory; give its "
                                     "user read access, or choose another")
        if kind == Source.Kind.SITE:
            site.start_check(location, token=secret or None)
    except ListingError as exc:
        raise SourceRejected(str(exc)) from None


class SourceNameTaken(SourceRejected):
    """Another source has the name already (names are unique, case aside)."""


class SourceNotWatchable(SourceRejected):
    """`watch` asked of a source that is not a folder on this server (the admin shows it beside that field)."""


def watch_check(*, kind: str, watch: bool) -> None:
    """SourceNotWatchable unless a watched source is a folder source: only a directory on this server can be
    watched (kb.library.sources.watch); a Git repository lives elsewhere and tells of a change by push webhook,
    a site by nothing, so its schedule serves it."""
    if watch and kind != Source.Kind.FOLDER:
        raise SourceNotWatchable(gettext(
            "watch: only a folder source (a directory on this server) can be watched, not a %(kind)s source; "
            "a Git source syncs on a push webhook instead, a site on its schedule (docs/SOURCES.md)") % {"kind": kind})


def _checked(*, name: str, kind: str, location: str, path: str, shrink_guard: float, exclude_pk: int | None = None,
             branch: str = "", watch: bool = False) -> tuple[str, str, str]:
    """The rules a source's settings obey, whether added or changed: (name, location, sub-path) cleaned."""
    name = name.strip()
    if not name:
        raise SourceRejected("a source needs a name")
    others = Source.objects.exclude(pk=exclude_pk) if exclude_pk is not None else Source.objects.all()
    if others.filter(name__iexact=name).exists():
        raise SourceNameTaken(f"a source named {name!r} already exists")
    if kind not in Source.Kind.values:
        raise SourceRejected(f"{kind!r}: the kinds are {', '.join(Source.Kind.values)}")
    try:
        clean_path = sub_path(path)
        if kind == Source.Kind.GIT:
            git.location_check(location)
            git.branch_check(branch)
        elif kind == Source.Kind.SITE:
            site.location_check(location)
        elif kind == Source.Kind.FOLDER:
            local_root_check(location)
    except ListingError as exc:
        raise SourceRejected(str(exc)) from None
    if not 0 <= shrink_guard <= 1:
        raise SourceRejected(f"{shrink_guard}: the shrink guard is a share of the documents, from 0 to 1")
    watch_check(kind=kind, watch=watch)
    return name, location.strip(), clean_path


def source_check(*, name: str, kind: str, location: str, folder_name: str, path: str = "", shrink_guard: float = 0.5,
                 operator: bool = True, branch: str = "", watch: bool = False) -> tuple[str, str, str, Folder]:
    """Whether a source may be added as asked (SourceRejected says why): (name, location, sub-path) cleaned
    and its folder. The folder must exist already: its access, set deliberately, is what the source's
    documents get. Only an operator (`manage.py source add`, not the API or the admin) adds a source whose
    name has a token setting: the setting's token would go to whatever location the adder gave."""
    name, location, clean_path = _checked(name=name, kind=kind, location=location, path=path, shrink_guard=shrink_guard,
                                          branch=branch, watch=watch)
    if not operator and secret_setting_set(name):
        raise SourceRejected(f"{secret_setting(name)} is set on the server for a source of this name: only an operator "
                             "adds it (manage.py source add)")
    folder = Folder.objects.filter(name=folder_name).first()
    if folder is None:
        raise SourceRejected(f"no KB folder named {folder_name!r}: create it first, with the access its documents should have")
    return name, location, clean_path, folder


@transaction.atomic
def source_create(*, name: str, kind: str, location: str, folder_name: str, branch: str = "", path: str = "",
                  include: Sequence[str] = (), exclude: Sequence[str] = (), every: int | None = None,
                  shrink_guard: float = 0.5, secret: str = "", operator: bool = True, watch: bool = False) -> Source:
    """A new source filling an existing folder, under the rules of `source_check`. `secret` is its token or
    password (kb.library.sources.secrets); `watch` (folder sources only): `manage.py watch_sources` syncs it
    a few seconds after a file is saved."""
    name, location, clean_path, folder = source_check(name=name, kind=kind, location=location, folder_name=folder_name,
                                                      path=path, shrink_guard=shrink_guard, operator=operator,
                                                      branch=branch, watch=watch)
    return Source.objects.create(name=name, kind=kind, location=location, folder=folder, branch=branch.strip(),
                                 path=clean_path, include=list(include), exclude=list(exclude), every=every,
                                 shrink_guard=shrink_guard, secret=secret, watch=watch)


EDITABLE = ("name", "location", "branch", "path", "include", "exclude", "every", "shrink_guard", "watch")


@transaction.atomic
def source_change(*, source: Source, **changes: Any) -> Source:
    """Change a source's settings (any of EDITABLE) under the rules of `source_create`. Its kind and folder
    stay: its documents' access comes from that folder. The next run lists what the new settings select
    (the shrink guard holds a run that would delete too much). `secret` replaces the stored one ("" clears it);
    a new location drops it unless it is given again, so a secret is never sent to a place it was not meant for."""
    secret = changes.pop("secret", None)
    unknown = set(changes) - set(EDITABLE)
    if unknown:
        raise SourceRejected(f"{', '.join(sorted(unknown))}: cannot be changed (only {', '.join(EDITABLE)})")
    merged = {field: changes.get(field, getattr(source, field)) for field in EDITABLE}
    if merged["every"] is not None and merged["every"] < MIN_EVERY:
        raise SourceRejected(f"{merged['every']} s: the shortest schedule is {MIN_EVERY} s")
    merged["name"], merged["location"], merged["path"] = _checked(
        name=merged["name"], kind=source.kind, location=merged["location"], path=merged["path"],
        shrink_guard=merged["shrink_guard"], exclude_pk=source.pk, branch=merged["branch"], watch=merged["watch"])
    merged["branch"] = merged["branch"].strip()
    merged["include"], merged["exclude"] = list(merged["include"]), list(merged["exclude"])
    moved = merged["location"] != source.location
    # The operator's token setting is bound to the source's name and location as the operator knows them.
    if (moved and secret_setting_set(source.name)) or (
            merged["name"].lower() != source.name.lower() and secret_setting_set(merged["name"])):
        raise SourceRejected(f"{secret_setting(source.name if moved else merged['name'])} holds a token on the server: "
                             "its location and name change only while it is unset (then set it again)")
    if secret is None and moved:
        secret = ""
    for field, value in merged.items():
        setattr(source, field, value)
    if secret is not None:
        source.secret = secret
    source.save(update_fields=[*EDITABLE, *(["secret"] if secret is not None else [])])
    return source


def source_remove(*, source: Source, keep_documents: bool = False) -> int:
    """Remove a source and, unless kept, its documents (through kb.library.services); returns how many were deleted.
    Kept documents stay in the folder as ordinary documents. Refused while a run of the source is under way."""
    with source_lock(source.pk) as taken:
        if not taken:
            raise SourceBusy(f"{source.name}: a run of this source is under way; remove it when it ends")
        deleted = 0
        with transaction.atomic():
            if not keep_documents:
                for document in source.documents.all():
                    document_delete(document=document)
                    deleted += 1
            source.documents.update(source=None, source_path="", source_etag="")
            cache = git.cache_dir(source)
            source.delete()
        shutil.rmtree(cache, ignore_errors=True)
        return deleted
