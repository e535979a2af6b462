"""/api/sources: the sources kept in sync with KB folders (docs/SOURCES.md), for scripts and the admin's peers.

Handlers parse, call kb.library.sources (the same services as `manage.py source` and `manage.py sync`) and
serialize. Admin-only, by the staff rule of the documents API (kb.library.access.staff_may): to anyone who
is not staff these endpoints answer 404; staff without the model permission for the action
(`kb.view_source`, `kb.add_source`, `kb.change_source`, `kb.delete_source`) get 403; a source whose KB
folder the caller may not read is not there for them (404), since its documents take that folder's
access. A source's token or password is written as `secret` and never shown back (`credential` says
whether one is set), never part of its location (kb.library.sources.git refuses one there), and a location is shown with any
`user@` part of a URL redacted. Tokens need `documents:read` to read and
`documents:write` to change anything.

`POST /api/sources/<id>/webhook` is the one endpoint without a session or token: a forge's push webhook, believed
only when signed with the source's webhook secret (kb.library.sources.webhooks; 401 with the reason otherwise).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.db.models import Count, QuerySet
from django.http import Http404, HttpRequest
from django.utils.translation import gettext
from ninja import Query, Router, Schema, Status
from ninja.errors import HttpError
from pydantic import Field

from accounts.acl import is_active_user
from accounts.auth import api_auth
from accounts.models import Scope
from kb import queues
from kb.library.access import folders_readable, staff_may
from kb.library.models import Folder, Source
from kb.library.sources.git import redact
from kb.library.sources.secrets import WEBHOOK, secret_state
from kb.library.sources.selectors import SourceLag, sources_lag
from kb.library.sources.services import parse_every, source_change, source_create, source_remove
from kb.library.sources.webhooks import (
    QueueUnavailable,
    WebhookRefused,
    webhook_path,
    webhook_receive,
    webhook_secret_set,
)
from kb.schemas import ANY, BODY, NO_NUL, NOT_FOUND, PARAMS, ErrorOut, InvalidOut, StrictIn

READ, WRITE = api_auth(Scope.DOCUMENTS_READ), api_auth(Scope.DOCUMENTS_WRITE)
sources = Router(tags=["sources"])

RunStatusName = Literal["", "running", "ok", "failed", "held"]
GLOB = Field(min_length=1, max_length=500, pattern=NO_NUL)
CREDENTIAL_HELP = ("A token or password for the location (git over https, a site), sent only to it; write-only: "
                      "never shown back, and dropped when the location changes. The KB_SOURCE_<NAME>_TOKEN setting "
                      "(or its _FILE) takes precedence")
WATCH_HELP = ("Folder: watch the directory and sync a few seconds after a file is saved (`manage.py watch_sources`; "
              "docs/OPERATIONS.md, \"Watched folders\"); the schedule stays the safety net. Refused (400) on a git or "
              "site source: only a directory on this server can be watched; a Git source takes push webhooks")
WEBHOOK_HELP = ("Git: the secret a forge signs its push webhooks with (GitHub, Gitea: the webhook's secret; GitLab: "
                "its secret token); write-only. The KB_SOURCE_<NAME>_WEBHOOK_SECRET setting (or its _FILE) takes "
                "precedence. Without one, pushes are refused")


# --------------------------------------------------------------------------- schemas


class SourceIn(StrictIn):
    """A new source. The folder must exist: its access is what the source's documents get."""

    name: str = Field(min_length=1, max_length=200, pattern=NO_NUL, examples=["handbook"])
    kind: Literal["folder", "git", "site"] = Field(examples=["git"])
    location: str = Field(min_length=1, max_length=2000, pattern=NO_NUL,
                          description="folder: an absolute directory on the server; git: a URL git clones "
                          "(https, ssh, file://), never with a password or token in it",
                          examples=["https://git.example.com/docs/handbook.git"])
    folder: int = Field(description="The KB folder it fills (id)", examples=[3])
    branch: str = Field(default="", max_length=200, pattern=NO_NUL, description="git: the branch; empty: the default",
                        examples=["main"])
    path: str = Field(default="", max_length=1000, pattern=NO_NUL, description="Only this sub-path of the source",
                      examples=["docs"])
    include: list[str] = Field(default_factory=list, description="Globs on the path from the source's root; "
                               "empty: every supported file", examples=[["*.md", "*.rst"]])
    exclude: list[str] = Field(default_factory=list, examples=[["docs/drafts/*"]])
    every: str | None = Field(default=None, max_length=20, pattern=NO_NUL,
                              description="Schedule: 90s, 15m, 2h, 1d (at least 60 s); null: by hand", examples=["15m"])
    shrink_guard: float = Field(default=0.5, ge=0, le=1, description="A run that would delete more than this share "
                                "of the source's documents waits for a confirmed run", examples=[0.5])
    watch: bool = Field(default=False, description=WATCH_HELP, examples=[True])
    secret: str = Field(default="", max_length=2000, pattern=NO_NUL, description=CREDENTIAL_HELP,
                        examples=["glpat-XXXXXXXXXXXXXXXXXXXX"], json_schema_extra={"writeOnly": True})
    webhook_secret: str = Field(default="", max_length=2000, pattern=NO_NUL, description=WEBHOOK_HELP,
                                examples=["Zk3t9V0w0n3v8rW1m7qQxq"], json_schema_extra={"writeOnly": True})


class SourceChangeIn(StrictIn):
    """Any of these settings; those left out stay. A source's kind and folder do not change."""

    name: str | None = Field(default=None, min_length=1, max_length=200, pattern=NO_NUL, examples=["handbook"])
    location: str | None = Field(default=None, min_length=1, max_length=2000, pattern=NO_NUL,
                                 examples=["https://git.example.com/docs/handbook.git"])
    branch: str | None = Field(default=None, max_length=200, pattern=NO_NUL, examples=["main"])
    path: str | None = Field(default=None, max_length=1000, pattern=NO_NUL, examples=["docs"])
    include: list[str] | None = Field(default=None, examples=[["*.md"]])
    exclude: list[str] | None = Field(default=None, examples=[["docs/drafts/*"]])
    every: str | None = Field(default=None, max_length=20, pattern=NO_NUL,
                              description="90s, 15m, 2h, 1d; null or empty: by hand only", examples=["1h"])
    shrink_guard: float | None = Field(default=None, ge=0, le=1, examples=[0.5])
    watch: bool | None = Field(default=None, description=WATCH_HELP, examples=[False])
    secret: str | None = Field(default=None, max_length=2000, pattern=NO_NUL,
                               description=CREDENTIAL_HELP + "; an empty string removes it",
                               examples=["glpat-XXXXXXXXXXXXXXXXXXXX"], json_schema_extra={"writeOnly": True})
    webhook_secret: str | None = Field(default=None, max_length=2000, pattern=NO_NUL,
                                       description=WEBHOOK_HELP + "; an empty string removes it",
                                       examples=["Zk3t9V0w0n3v8rW1m7qQxq"], json_schema_extra={"writeOnly": True})


class RunOut(Schema):
    """The last run; while `status` is running, the figures so far (they move as it goes)."""

    status: RunStatusName = Field(description="The last run: empty when never run; held: the listing shrank "
                                  "past the guard, nothing was changed", examples=["ok"])
    reason: str = Field(description="Why it failed or was held", examples=[""])
    step: Literal["", "listing", "applying", "indexing"] = Field(description="While running: what it does now",
                                                                  examples=["indexing"])
    listed: int = Field(examples=[120])
    planned: int = Field(description="Changes found: changed, new, deleted and renamed files", examples=[3])
    to_index: int = Field(description="Documents the run indexes", examples=[3])
    indexed: int = Field(description="Of those, indexed so far (ready or failed)", examples=[2])
    unchanged: int = Field(examples=[117])
    changed: int = Field(examples=[2])
    new: int = Field(examples=[1])
    deleted: int = Field(examples=[0])
    renamed: int = Field(examples=[0])
    failed: int = Field(description="Files that failed alone (see the documents' reasons)", examples=[0])
    chunks_embedded: int = Field(examples=[4])
    started_at: datetime | None
    finished_at: datetime | None


class FailureOut(Schema):
    path: str = Field(description="The file's path at the source", examples=["docs/scan.pdf"])
    reason: str = Field(examples=["no text layer and OCR found no text"])


class LagOut(Schema):
    """How far the index is behind the source (docs/SOURCES.md, "Index lag")."""

    seconds: float = Field(description="Age of the oldest change seen at the source that is not searchable yet; "
                           "0 when every change seen is", examples=[0.0])
    pending: int = Field(description="Changes seen, not searchable yet", examples=[0])
    failed: int = Field(description="Files that failed (their reasons in `failures`)", examples=[1])
    failures: list[FailureOut] = Field(description="The failed files, the first 20 by path")
    last_change_seconds: float | None = Field(description="The longest lag (change at the source -> searchable) "
                                              "of the last changes made searchable", examples=[42.5])
    listed_at: datetime | None = Field(description="When a run last listed the source")


class WebhookStateOut(Schema):
    """A Git source's push webhook (docs/SOURCES.md, "Push webhooks")."""

    path: str = Field(description="Where a forge posts pushes, on this server's address",
                      examples=["/api/sources/7/webhook"])
    state: str = Field(description="Whether a webhook secret is set, and by what; never the value",
                        examples=["not set", "set", "set by KB_SOURCE_HANDBOOK_WEBHOOK_SECRET"])
    last_push_at: datetime | None = Field(description="When the last verified push (or watched save) came")
    last_push_origin: str = Field(description="Who sent it: github, gitlab, gitea or watch", examples=["github"])


class SourceOut(Schema):
    id: int = Field(examples=[7])
    name: str = Field(examples=["handbook"])
    kind: Literal["folder", "git", "site"] = Field(examples=["git"])
    location: str = Field(description="Any user@ part of a URL is redacted",
                          examples=["https://git.example.com/docs/handbook.git"])
    branch: str = Field(examples=["main"])
    path: str = Field(examples=["docs"])
    folder: int = Field(examples=[3])
    folder_name: str = Field(examples=["Handbook"])
    include: list[str] = Field(examples=[["*.md"]])
    exclude: list[str] = Field(examples=[["docs/drafts/*"]])
    every_seconds: int | None = Field(description="Seconds between scheduled runs; null: by hand", examples=[900])
    shrink_guard: float = Field(examples=[0.5])
    watch: bool = Field(description="Folder: synced a few seconds after a file is saved, not only on its schedule",
                        examples=[False])
    documents: int = Field(description="Documents it keeps in the folder", examples=[118])
    credential: str = Field(description="Whether a token or password is set, and by what; never the value",
                            examples=["not set", "set", "set by KB_SOURCE_HANDBOOK_TOKEN"])
    last_run: RunOut
    last_success_at: datetime | None = Field(description="When a run last ended ok")
    index_lag: LagOut
    webhook: WebhookStateOut
    created_at: datetime


class SourceFilter(Schema):
    keep_documents: bool = Field(default=False, description="Keep its documents in the folder as ordinary documents")


class WebhookOut(Schema):
    status: Literal["queued", "following", "ignored", "pong"] = Field(
        description="queued: a run starts now; following: one starts when the run under way ends; ignored: "
        "verified but nothing to do (another branch, not a push); pong: a forge's test delivery", examples=["queued"])
    detail: str = Field(examples=["a run of this source is queued"])


class SyncFilter(Schema):
    confirm: bool = Field(default=False, description="Go ahead with the deletions a held run would make")


# --------------------------------------------------------------------------- helpers


def _allow(request: HttpRequest, permission: str) -> None:
    """Not staff: 404 (no such endpoints); staff without `permission`: 403."""
    user = request.user
    if not (is_active_user(user) and user.is_staff):
        raise Http404("Not Found")
    if not staff_may(user, permission):
        raise HttpError(403, gettext("You need the %(permission)s permission for this.") % {"permission": permission})


def _readable(request: HttpRequest) -> QuerySet[Source]:
    """The sources whose folder the caller may read (superusers: all); the others are not there for them."""
    found = Source.objects.select_related("folder").annotate(document_count=Count("documents"))
    if request.user.is_superuser:
        return found
    return found.filter(folder__in=folders_readable(request.user))


def _source(request: HttpRequest, pk: int, permission: str) -> Source:
    _allow(request, permission)
    source = _readable(request).filter(pk=pk).first()
    if source is None or not staff_may(request.user, permission, source.folder):
        raise Http404(f"no source {pk}")
    return source


def _every(value: str | None) -> int | None:
    return parse_every(value) if value else None


def _out(source: Source, lag: SourceLag | None = None) -> dict[str, Any]:
    count = getattr(source, "document_count", None)
    lag = lag or sources_lag([source.pk], failures=True)[source.pk]
    return {
        "id": source.pk,
        "name": source.name,
        "kind": source.kind,
        "location": redact(source.location),
        "branch": source.branch,
        "path": source.path,
        "folder": source.folder_id,
        "folder_name": source.folder.name,
        "include": source.include,
        "exclude": source.exclude,
        "every_seconds": source.every,
        "shrink_guard": source.shrink_guard,
        "watch": source.watch,
        "documents": count if count is not None else source.documents.count(),
        "credential": secret_state(source),
        "last_run": {
            "status": source.last_status,
            "reason": source.last_reason,
            "step": source.last_step,
            "listed": source.last_listed,
            "planned": source.last_planned,
            "to_index": source.last_to_index,
            "indexed": source.last_indexed,
            "unchanged": source.last_unchanged,
            "changed": source.last_changed,
            "new": source.last_new,
            "deleted": source.last_deleted,
            "renamed": source.last_renamed,
            "failed": source.last_failed,
            "chunks_embedded": source.last_chunks_embedded,
            "started_at": source.last_started_at,
            "finished_at": source.last_finished_at,
        },
        "last_success_at": source.last_success_at,
        "index_lag": {
            "seconds": lag.lag_seconds(),
            "pending": lag.pending,
            "failed": lag.failed,
            "failures": [{"path": path, "reason": reason} for path, reason in lag.failures],
            "last_change_seconds": source.last_lag_seconds,
            "listed_at": source.last_listed_at,
        },
        "webhook": {
            "path": webhook_path(source),
            "state": secret_state(source, WEBHOOK),
            "last_push_at": source.last_push_at,
            "last_push_origin": source.last_push_origin,
        },
        "created_at": source.created_at,
    }


def _fresh(request: HttpRequest, source: Source) -> dict[str, Any]:
    return _out(_readable(request).get(pk=source.pk))


# --------------------------------------------------------------------------- endpoints


@sources.get("", response={200: list[SourceOut], **ANY, **NOT_FOUND}, auth=READ, summary="List sources")
def source_index(request: HttpRequest) -> list[dict[str, Any]]:
    """The sources whose KB folder the caller may read, by name, with their last run. Needs `kb.view_source`."""
    _allow(request, "kb.view_source")
    found = list(_readable(request))
    lags = sources_lag([source.pk for source in found], failures=True)
    return [_out(source, lags[source.pk]) for source in found]


@sources.post("", response={201: SourceOut, 409: ErrorOut, **BODY, **NOT_FOUND}, auth=WRITE, summary="Add a source")
def source_add(request: HttpRequest, payload: SourceIn) -> Status[dict[str, Any]]:
    """A source filling an existing folder the caller may read, checked as `manage.py source add` checks it
    (400 with the reason; 409 when the name is taken). Nothing runs until a sync is asked for or its
    schedule comes round. Needs `kb.add_source`."""
    _allow(request, "kb.add_source")
    folder = Folder.objects.filter(pk=payload.folder).first()
    if folder is None or not staff_may(request.user, "kb.add_source", folder):
        raise Http404(f"no folder {payload.folder}")
    source = source_create(name=payload.name, kind=payload.kind, location=payload.location, folder_name=folder.name,
                           branch=payload.branch, path=payload.path, include=payload.include,
                           exclude=payload.exclude, every=_every(payload.every), shrink_guard=payload.shrink_guard,
                           secret=payload.secret, operator=False, watch=payload.watch)
    if payload.webhook_secret:
        webhook_secret_set(source=source, secret=payload.webhook_secret)
    return Status(201, _fresh(request, source))


@sources.get("/{pk}", response={200: SourceOut, **PARAMS, **NOT_FOUND}, auth=READ, summary="One source")
def source_detail(request: HttpRequest, pk: int) -> dict[str, Any]:
    """A source and its last run (counts, reason). Needs `kb.view_source` and read access to its folder."""
    return _out(_source(request, pk, "kb.view_source"))


@sources.patch("/{pk}", response={200: SourceOut, 409: ErrorOut, **BODY, **NOT_FOUND}, auth=WRITE,
               summary="Change a source")
def source_edit(request: HttpRequest, pk: int, payload: SourceChangeIn) -> dict[str, Any]:
    """Change the fields given, checked as when adding (400 with the reason, 409 for a taken name). The next
    run lists what the new settings select; a new location drops the secret unless one is given with it.
    Needs `kb.change_source` and read access to its folder."""
    source = _source(request, pk, "kb.change_source")
    changes = payload.model_dump(exclude_unset=True)
    webhook_secret = changes.pop("webhook_secret", None)
    if "every" in changes:
        changes["every"] = _every(changes["every"])
    for field in ("name", "location", "branch", "path", "include", "exclude", "shrink_guard", "watch"):
        if field in changes and changes[field] is None:
            raise HttpError(400, gettext("%(field)s: give a value, or leave the field out to keep it") % {"field": field})
    source_change(source=source, **changes)
    if webhook_secret is not None:
        webhook_secret_set(source=source, secret=webhook_secret)
    return _fresh(request, source)


@sources.delete("/{pk}", response={204: None, 409: ErrorOut, **PARAMS, **NOT_FOUND}, auth=WRITE,
                summary="Remove a source")
def source_delete(request: HttpRequest, pk: int, filters: Query[SourceFilter]) -> Status[None]:
    """Removes the source and, unless `keep_documents`, its documents. 409 while a run of it is under way.
    Needs `kb.delete_source` and read access to its folder."""
    source = _source(request, pk, "kb.delete_source")
    source_remove(source=source, keep_documents=filters.keep_documents)
    return Status(204, None)


@sources.post("/{pk}/sync", response={202: SourceOut, **PARAMS, **NOT_FOUND}, auth=WRITE, summary="Sync a source now")
def source_sync_now(request: HttpRequest, pk: int, filters: Query[SyncFilter]) -> Status[dict[str, Any]]:
    """Queue one run on the ingest queue (as `manage.py sync`); 202 with the source's run state as it is now:
    follow `last_run` on the source. A run already under way makes this one end at once as busy. 503 when
    the queue is out of reach. Needs `kb.change_source` and read access to its folder."""
    source = _source(request, pk, "kb.change_source")
    if not queues.send("kb.sync_source", source.pk, filters.confirm):
        raise HttpError(503, gettext("The task queue is out of reach; try again in a moment."))
    return Status(202, _out(source))


@sources.post("/{pk}/webhook", auth=None, response={200: WebhookOut, 202: WebhookOut, 400: ErrorOut, 401: ErrorOut,
                                                     404: ErrorOut, 413: ErrorOut, 422: InvalidOut, 503: ErrorOut},
              summary="Receive a push webhook")
def source_webhook(request: HttpRequest, pk: int) -> Status[dict[str, Any]]:
    """A forge's push webhook for a Git source (GitHub, Gitea/Forgejo, GitLab; docs/SOURCES.md): no session or token,
    the signature is the credential. 202 `queued` starts a run at once (`following`: after the one under way);
    401 with the reason for no webhook secret, a forged or missing signature, a delivery seen before or older than
    KB_SOURCE_WEBHOOK_WINDOW, another repository, and nothing is recorded; 202 `ignored` for a verified delivery
    with nothing to do (another branch, not a push); 200 `pong` for a forge's test. Bodies over KB_MAX_BODY_KB: 413."""
    source = Source.objects.filter(pk=pk, kind=Source.Kind.GIT).first()
    if source is None:
        raise Http404(f"no Git source {pk}")
    try:
        outcome = webhook_receive(source=source, headers=request.headers, body=request.body)
    except WebhookRefused as exc:
        return Status(401, {"detail": str(exc)})
    except ValueError:
        return Status(400, {"detail": gettext("The delivery is not a JSON object (nor a form holding one).")})
    except QueueUnavailable as exc:
        return Status(503, {"detail": str(exc)})
    return Status(outcome.http_status, {"status": outcome.status, "detail": outcome.detail})
