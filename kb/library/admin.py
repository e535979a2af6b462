"""Admin for folders, documents and sources: status, failure reason, retry, index-version badge, re-index, sync now."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth import get_permission_codename
from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponseRedirect
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext, ngettext

from accounts.acl import readable_filter
from kb import queues
from kb.library.access import document_sync_acl, folders_readable, staff_may, visible_folders
from kb.library.ingest.pipeline import RUNNING, STAGES
from kb.library.ingest.version import current_index_version
from kb.library.models import Chunk, Document, Folder, Source
from kb.library.selectors import document_is_stale, documents_stale
from kb.library.services import document_delete, document_queue_ingest, folder_sync_documents
from kb.library.sources.git import redact
from kb.library.sources.secrets import secret_state
from kb.library.sources.selectors import lag_of, sources_lag, with_lag
from kb.library.sources.services import SourceRejected, parse_every, source_check, source_create, source_remove

# What the document list names beside the index version, as (label, current state): search adds
# its reranker and late interaction (search/admin.py), since kb may not import search.
_index_notes: list[tuple[str, Callable[[], str]]] = []


def index_note_register(label: str, state: Callable[[], str]) -> None:
    """Show `label: state()` after the current index version on the document list."""
    _index_notes.append((label, state))


class ReadableRowsMixin:
    """Staff who are not superusers get only rows they may read (kb.library.access's rule), like on every other surface."""

    def readable_rows(self, user: Any, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Of `queryset`, the rows `user` may read; this default serves rows that carry an `acl` (documents, chunks)."""
        return queryset.filter(readable_filter(user))

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset: QuerySet[Any] = super().get_queryset(request)  # type: ignore[misc]
        if request.user.is_superuser:
            return queryset
        return self.readable_rows(request.user, queryset)


class RecordAdminMixin:
    """Rows that record what happened (an access log, a fitted model): listed and read, never added,
    edited or deleted through the admin."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class StaffRuleMixin(ReadableRowsMixin):
    """The staff rule on a model admin (kb.library.access.staff_may): viewing, adding, changing or deleting needs the
    Django model permission for it, and an object the user may read, which is one of the rows listed to them.
    Superusers pass."""

    opts: Any

    def staff_may(self, request: HttpRequest, action: str, obj: Any = None) -> bool:
        user = request.user
        permission = f"{self.opts.app_label}.{get_permission_codename(action, self.opts)}"
        if obj is None or isinstance(obj, Document | Folder):
            return staff_may(user, permission, obj)
        return staff_may(user, permission) and (user.is_superuser or self.get_queryset(request).filter(pk=obj.pk).exists())

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.staff_may(request, "view", obj) or self.staff_may(request, "change", obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self.staff_may(request, "add")

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.staff_may(request, "change", obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.staff_may(request, "delete", obj)


@admin.register(Folder)
class FolderAdmin(StaffRuleMixin, admin.ModelAdmin):
    list_display = ("name", "public", "document_count")
    filter_horizontal = ("groups", "users")

    def readable_rows(self, user: Any, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(pk__in=folders_readable(user).values("pk"))

    def get_queryset(self, request: HttpRequest) -> QuerySet[Folder]:
        """Counting, for staff who are not superusers, only the documents they may read."""
        readable = None if request.user.is_superuser else readable_filter(request.user, through="documents__")
        folders: QuerySet[Folder] = super().get_queryset(request)
        return folders.annotate(n_documents=Count("documents", filter=readable))

    @admin.display(description="Documents", ordering="n_documents")
    def document_count(self, obj: Any) -> int:
        return int(obj.n_documents)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        folder_sync_documents(folder=form.instance)


class VisibleFolderFilter(admin.RelatedFieldListFilter):
    """The folder filter names only folders the staff user may see (superusers: all)."""

    def field_choices(self, field: Any, request: HttpRequest, model_admin: Any) -> Any:
        if request.user.is_superuser:
            return super().field_choices(field, request, model_admin)
        return [(str(f.pk), str(f)) for f in visible_folders(request.user).order_by("name")]


class StaleFilter(admin.SimpleListFilter):
    title = "index version"
    parameter_name = "index"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("current", "Current"), ("stale", "Stale (re-index needed)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Document]) -> QuerySet[Document]:
        stale = documents_stale(queryset)
        if self.value() == "stale":
            return stale
        if self.value() == "current":
            return queryset.filter(status=Document.Status.READY).exclude(pk__in=stale.values("pk"))
        return queryset


@admin.register(Document)
class DocumentAdmin(StaffRuleMixin, admin.ModelAdmin):
    list_display = (
        "title", "folder", "language", "status_badge", "index_badge", "chunk_count", "stage_timings", "attempts",
        "updated_at",
    )
    list_filter = ("status", "language", StaleFilter, ("folder", VisibleFolderFilter))
    list_select_related = ("folder",)
    search_fields = ("title", "filename")
    filter_horizontal = ("groups", "users")
    # `file` too: a new version goes through the upload service (validation, hash, type,
    # name, re-upload rules); an edited field here would bypass all of them.
    readonly_fields = (
        "file", "pending_acl", "filename", "mime_type", "sha256", "size", "status", "failed_stage", "failure_reason", "attempts",
        "worker", "acl", "extractor_version", "pipeline_version", "late_version", "embedding_model", "embedding_dimensions",
        "chunk_count", "token_total", "token_max", "indexed_at", "stage_timings", "warnings", "uploaded_by", "created_at",
        "updated_at", "language_detected",
    )
    fieldsets = (
        (None, {"fields": ("title", "file", "folder", "audience_default")}),
        ("Language", {"fields": ("language", "language_fixed", "language_detected")}),
        ("Access", {"fields": ("inherit_access", "public", "groups", "users", "acl", "pending_acl")}),
        ("Pipeline", {"fields": ("status", "failed_stage", "failure_reason", "attempts", "worker", "warnings")}),
        ("Index", {"fields": (
            "embedding_model", "embedding_dimensions", "pipeline_version", "extractor_version", "late_version",
            "chunk_count", "token_total", "token_max", "indexed_at", "stage_timings",
        )}),
        ("Source", {"fields": ("filename", "mime_type", "sha256", "size", "uploaded_by", "created_at", "updated_at")}),
    )
    actions = ("retry_ingest", "reindex")
    change_list_template = "admin/kb/document/change_list.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Document]:
        return super().get_queryset(request).defer("canonical_text", "pages", "headings")  # a whole manual per row otherwise

    def save_model(self, request: HttpRequest, obj: Document, form: Any, change: bool) -> None:
        """A language an admin sets is fixed: every re-indexing keeps it (clearing "fixed" hands it back to
        detection). Either change indexes the document again at once, so its chunks are read with the
        language's text search configuration (chunks whose text is unchanged keep their vectors)."""
        changed = change and {"language", "language_fixed"} & set(form.changed_data)
        if change and "language" in form.changed_data:
            obj.language_fixed = bool(obj.language)
        super().save_model(request, obj, form, change)
        if changed and obj.status not in RUNNING:
            document_queue_ingest(documents=Document.objects.filter(pk=obj.pk))

    class Media:
        css = {"all": ("kb/admin.css",)}

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "folder" and not request.user.is_superuser:
            kwargs["queryset"] = visible_folders(request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Uploads go through the library page / `manage.py ingest`, which validate and hash the file.
        return False

    @admin.display(description="Status", ordering="status")
    def status_badge(self, obj: Document) -> str:
        if obj.status == Document.Status.FAILED:
            kept = " · the previous version is still served to its old audience" if obj.pending_acl is not None else ""
            return format_html(
                '<span class="kb-badge kb-failed" title="{}">failed in {}</span><div class="kb-reason">{}{}</div>',
                obj.failure_reason, obj.failed_stage or "?", obj.failure_reason, kept,
            )
        return format_html('<span class="kb-badge kb-{}">{}</span>', obj.status, obj.get_status_display())

    @admin.display(description="Index")
    def index_badge(self, obj: Document) -> str:
        if obj.status != Document.Status.READY:
            return format_html('<span class="kb-badge kb-none">{}</span>', "not indexed")
        version = f"p{obj.pipeline_version} e{obj.extractor_version} l{obj.late_version} · {obj.embedding_model}"
        if document_is_stale(obj):
            return format_html(
                '<span class="kb-badge kb-stale" title="current: {}">stale · {}</span>',
                current_index_version().label(), version,
            )
        return format_html('<span class="kb-badge kb-current">current · {}</span>', version)

    @admin.display(description="Ingest time")
    def stage_timings(self, obj: Document) -> str:
        """Where the last ingestion's time went, stage by stage (kb.library.ingest.pipeline)."""
        if not obj.stage_seconds:
            return "—"
        total = sum(obj.stage_seconds.values())  # "tokens" is not inside "chunk": each second counts once
        seconds = obj.stage_seconds
        parts = format_html_join(" · ", "{} {}", ((name, f"{seconds[name]:.2f}") for name in STAGES if name in seconds))
        return format_html('<span class="kb-timings" title="seconds per stage">{} s <small>({})</small></span>',
                           f"{total:.2f}", parts)

    @admin.action(description="Retry failed (or stuck) documents", permissions=["change"])
    def retry_ingest(self, request: HttpRequest, queryset: QuerySet[Document]) -> None:
        n = document_queue_ingest(documents=queryset.filter(status__in=[Document.Status.FAILED, *RUNNING]))
        self.message_user(request, ngettext("Queued %(n)d document for another attempt",
                                            "Queued %(n)d documents for another attempt", n) % {"n": n})

    @admin.action(description="Re-index selected documents", permissions=["change"])
    def reindex(self, request: HttpRequest, queryset: QuerySet[Document]) -> None:
        n = document_queue_ingest(documents=queryset.exclude(status__in=RUNNING))
        self.message_user(request, ngettext("Queued %(n)d document for re-indexing",
                                            "Queued %(n)d documents for re-indexing", n) % {"n": n})

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        document_sync_acl(document=form.instance)

    def get_urls(self) -> list[Any]:
        extra = [
            path("reindex-stale/", self.admin_site.admin_view(self.reindex_stale_view), name="kb_document_reindex_stale"),
        ]
        return extra + super().get_urls()

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        context = {
            **(extra_context or {}),
            "stale_count": documents_stale(self.get_queryset(request)).count(),
            "index_version": current_index_version().label(),
            "index_notes": [(label, state()) for label, state in _index_notes],
        }
        return super().changelist_view(request, extra_context=context)

    def reindex_stale_view(self, request: HttpRequest) -> HttpResponseRedirect:
        if request.method != "POST" or not self.has_change_permission(request):
            raise PermissionDenied
        n = document_queue_ingest(documents=documents_stale(self.get_queryset(request)))
        self.message_user(request, ngettext("Queued %(n)d stale document for re-indexing",
                                            "Queued %(n)d stale documents for re-indexing", n) % {"n": n})
        return HttpResponseRedirect(reverse("admin:kb_document_changelist"))

    def delete_model(self, request: HttpRequest, obj: Document) -> None:
        document_delete(document=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Document]) -> None:
        for document in queryset:
            document_delete(document=document)


@admin.register(Chunk)
class ChunkAdmin(StaffRuleMixin, admin.ModelAdmin):
    list_display = ("document", "ordinal", "kind", "audience", "breadcrumb", "tokens", "page")
    list_filter = ("kind", "audience")
    list_select_related = ("document",)
    search_fields = ("breadcrumb", "content")
    exclude = ("embedding", "late_vectors", "piece_ids")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Chunk]:
        return super().get_queryset(request).defer("embedding", "late_vectors", "piece_ids")  # ~55 KB a row, never shown
    readonly_fields = [f.name for f in Chunk._meta.fields if f.name not in {"embedding", "search", "late_vectors", "piece_ids"}]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class SourceAddForm(forms.ModelForm):
    """Adding a source in the admin, under the rules of `manage.py source add` and /api/sources
    (kb.library.sources.services.source_check); the folder among those the adder may read, the secret write-only."""

    every_text = forms.CharField(label="Every", required=False, help_text="90s, 15m, 2h or 1d; empty: by hand only")
    credential = forms.CharField(label="Secret", required=False, strip=False, widget=forms.PasswordInput(render_value=False),
                             help_text="A token or password for the location, never shown back (or the server's "
                                       "KB_SOURCE_<NAME>_TOKEN_FILE setting)")

    class Meta:
        model = Source
        fields = ("name", "kind", "location", "branch", "path", "folder", "include", "exclude", "shrink_guard")

    def clean(self) -> dict[str, Any]:
        data: dict[str, Any] = super().clean() or {}
        try:
            data["every"] = parse_every(data["every_text"]) if data.get("every_text") else None
            if data.get("folder") is not None:
                source_check(name=data.get("name", ""), kind=data.get("kind", ""), location=data.get("location", ""),
                             folder_name=data["folder"].name, path=data.get("path", ""),
                             shrink_guard=data.get("shrink_guard", 0.5), operator=False,
                             branch=data.get("branch", ""))
        except SourceRejected as exc:
            raise forms.ValidationError(str(exc)) from None
        return data


@admin.register(Source)
class SourceAdmin(StaffRuleMixin, admin.ModelAdmin):
    """Where documents come from, how their last run went (live while it runs: kb/library/static/kb/sources.js polls
    /api/sources) and how far the index is behind; "Sync now" queues a run. A source is added here (the add
    form) as with `manage.py source add` or /api/sources; changing one goes through those two, which keep a
    secret with its location (kb.library.sources.services)."""

    list_display = ("name", "kind", "shown_location", "folder", "every", "last_run", "index_lag", "last_finished_at",
                    "last_success_at")
    list_select_related = ("folder",)
    list_filter = ("kind", "last_status")
    search_fields = ("name",)
    fields = ("name", "kind", "shown_location", "secret_state", "branch", "path", "folder", "include", "exclude",
              "every", "shrink_guard", "last_run", "last_reason", "last_started_at", "last_finished_at",
              "last_success_at", "index_lag", "failed_files")
    readonly_fields = fields
    actions = ["sync_now"]

    class Media:
        css = {"all": ("kb/admin.css",)}
        js = ("kb/sources.js",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Source]:
        sources: QuerySet[Source] = super().get_queryset(request)
        return with_lag(sources)  # each row's lag figures in the list's own query

    def readable_rows(self, user: Any, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(folder__in=folders_readable(user))

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return super().get_fields(request, obj) if obj is not None else (*SourceAddForm.Meta.fields, "every_text", "credential")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.readonly_fields if obj is not None else ()

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        if obj is None:
            kwargs["form"] = SourceAddForm
        return super().get_form(request, obj, change, **kwargs)

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "folder" and not request.user.is_superuser:  # its documents take the folder's access
            kwargs["queryset"] = folders_readable(request.user).order_by("name")
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request: HttpRequest, obj: Source, form: Any, change: bool) -> None:
        data = form.cleaned_data
        created = source_create(name=data["name"], kind=data["kind"], location=data["location"],
                                folder_name=data["folder"].name, branch=data.get("branch", ""), path=data.get("path", ""),
                                include=data.get("include") or [], exclude=data.get("exclude") or [], every=data["every"],
                                shrink_guard=data["shrink_guard"], secret=data.get("credential", ""), operator=False)
        obj.pk = created.pk
        obj.refresh_from_db()

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Removing a source removes its documents (as `manage.py source remove` does): that needs both.
        return super().has_delete_permission(request, obj) and staff_may(request.user, "kb.delete_document")

    @admin.display(description="Location")
    def shown_location(self, obj: Source) -> str:
        return redact(obj.location)

    @admin.display(description="Credential")
    def secret_state(self, obj: Source) -> str:
        return secret_state(obj)

    @admin.display(description="Last run", ordering="last_status")
    def last_run(self, obj: Source) -> str:
        if not obj.last_status:
            return format_html('<div data-source-run="{}">never run</div>', obj.pk)
        if obj.last_status == Source.RunStatus.RUNNING:
            counts = (f"{obj.last_step}: listed {obj.last_listed} · {obj.last_planned} changes · "
                      f"indexed {obj.last_indexed} of {obj.last_to_index} · failed {obj.last_failed}")
        else:
            counts = (f"listed {obj.last_listed} · unchanged {obj.last_unchanged} · changed {obj.last_changed} · "
                      f"new {obj.last_new} · deleted {obj.last_deleted} · renamed {obj.last_renamed} · "
                      f"failed {obj.last_failed} · chunks embedded {obj.last_chunks_embedded}")
        return format_html('<div data-source-run="{}"><span class="kb-badge kb-{}">{}</span> <small>{}</small>'
                           '<div class="kb-reason">{}</div></div>',
                           obj.pk, obj.last_status, obj.get_last_status_display(), counts, obj.last_reason)

    @admin.display(description="Index lag")
    def index_lag(self, obj: Source) -> str:
        lag = lag_of(obj)
        last = "—" if obj.last_lag_seconds is None else f"{obj.last_lag_seconds:.0f} s"
        return format_html('<span data-source-lag="{}">behind {} s · pending {} · failed {}</span>'
                           '<div><small>last change searchable after {}</small></div>',
                           obj.pk, f"{lag.lag_seconds():.0f}", lag.pending, lag.failed, last)

    @admin.display(description="Failed files")
    def failed_files(self, obj: Source) -> str:
        failures = sources_lag([obj.pk], failures=True)[obj.pk].failures
        if not failures:
            return "none"
        return format_html("<ul>{}</ul>", format_html_join("", '<li><code>{}</code>: <span class="kb-reason">{}</span></li>',
                                                           failures))

    @admin.action(description="Sync now", permissions=["change"])
    def sync_now(self, request: HttpRequest, queryset: QuerySet[Source]) -> None:
        from kb.library.tasks import sync_source

        queued = [source.name for source in queryset if queues.send(sync_source, source.pk, False)]
        self.message_user(request, ngettext("Queued a run of %(n)d source: %(names)s", "Queued a run of %(n)d sources: %(names)s",
                                            len(queued)) % {"n": len(queued), "names": ", ".join(queued) or gettext("none")})

    def delete_model(self, request: HttpRequest, obj: Source) -> None:
        source_remove(source=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Source]) -> None:
        for source in queryset:
            source_remove(source=source)
