"""Admin for folders, documents and sources, in the words of the library page: status and failure reason with Retry and
Replace file, index badges in words (versions on hover), re-index, sync now, a source's failed files on its list."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth import get_permission_codename, get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.functional import Promise
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext, gettext_lazy, ngettext

from accounts.acl import EVERYONE, readable_filter
from kb import queues
from kb.library.access import document_sync_acl, folders_readable, staff_may, visible_folders
from kb.library.ingest.extract import SUPPORTED, SUPPORTED_KINDS
from kb.library.ingest.pipeline import STAGES
from kb.library.ingest.version import current_index_version
from kb.library.models import Chunk, Document, Folder, Source, SourcePush, filename_title
from kb.library.selectors import document_is_stale, documents_stale
from kb.library.services import (
    DocumentStateConflict,
    UploadRejected,
    document_delete,
    document_queue_ingest,
    document_replace_file,
    document_retry,
    folder_sync_documents,
)
from kb.library.sources.git import redact
from kb.library.sources.secrets import WEBHOOK, secret_state
from kb.library.sources.selectors import lag_of, sources_lag, with_lag
from kb.library.sources.services import (
    SourceNameTaken,
    SourceNotWatchable,
    SourceRejected,
    every_text,
    location_reachable_check,
    parse_every,
    source_check,
    source_create,
    source_remove,
)
from kb.library.sources.webhooks import webhook_path, webhook_secret_set

StrOrPromise = str | Promise  # a label, translated when shown

# What the document list names beside the index version, as (label, current state): search adds
# its reranker and late interaction (search/admin.py), since kb may not import search.
_index_notes: list[tuple[StrOrPromise, Callable[[], str]]] = []


def index_note_register(label: StrOrPromise, state: Callable[[], str]) -> None:
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

    class Media:
        js = ("kb/admin.js",)  # the pickers' help icons named for screen readers

    def readable_rows(self, user: Any, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(pk__in=folders_readable(user).values("pk"))

    def get_queryset(self, request: HttpRequest) -> QuerySet[Folder]:
        """Counting, for staff who are not superusers, only the documents they may read."""
        readable = None if request.user.is_superuser else readable_filter(request.user, through="documents__")
        folders: QuerySet[Folder] = super().get_queryset(request)
        return folders.annotate(n_documents=Count("documents", filter=readable))

    @admin.display(description=gettext_lazy("Documents"), ordering="n_documents")
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
    title = gettext_lazy("index")
    parameter_name = "index"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("current", gettext_lazy("Up to date")), ("stale", gettext_lazy("Needs re-indexing"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Document]) -> QuerySet[Document]:
        stale = documents_stale(queryset)
        if self.value() == "stale":
            return stale
        if self.value() == "current":
            return queryset.filter(status=Document.Status.READY).exclude(pk__in=stale.values("pk"))
        return queryset


def version_words(document: Document) -> str:
    """The index version a document was indexed with, spelled out (the badge's hover)."""
    return gettext("pipeline v%(p)s · extractor v%(e)s · passage pieces v%(l)s · embedding model %(m)s") % {
        "p": document.pipeline_version, "e": document.extractor_version, "l": document.late_version,
        "m": document.embedding_model or "?"}


def readers_words(principals: list[str] | None) -> str:
    """Who a list of principals (accounts.acl: everyone, g:<id>, u:<id>) lets read, by name."""
    if principals is None:
        return "—"
    if EVERYONE in principals:
        return gettext("Everyone")
    group_ids = [int(p[2:]) for p in principals if p.startswith("g:")]
    user_ids = [int(p[2:]) for p in principals if p.startswith("u:")]
    names = [*(gettext("group %(name)s") % {"name": g.name} for g in Group.objects.filter(pk__in=group_ids)),
             *(u.get_username() for u in get_user_model().objects.filter(pk__in=user_ids))]
    return ", ".join(sorted(names)) or gettext("Nobody yet")


class DocumentForm(forms.ModelForm):
    """The document's editable fields, labelled as the library page names them."""

    class Meta:
        model = Document
        fields = ("title", "folder", "audience_default", "language", "language_fixed", "inherit_access", "public",
                  "groups", "users")
        labels = {
            "audience_default": gettext_lazy("Passages read as"),
            "inherit_access": gettext_lazy("Same readers as its folder"),
            "public": gettext_lazy("Everyone may read it"),
            "language_fixed": gettext_lazy("Language set by hand"),
        }
        help_texts = {
            "language": gettext_lazy("A two-letter code, e.g. en, de, pl, zh; empty: detected from the text"),
            "language_fixed": gettext_lazy("Re-indexing keeps the language set here"),
            "public": gettext_lazy("Only when it does not take its folder's readers"),
        }


class ReplaceFileForm(forms.Form):
    file = forms.FileField(label=gettext_lazy("New file"), allow_empty_file=True)


@admin.register(Document)
class DocumentAdmin(StaffRuleMixin, admin.ModelAdmin):
    """Documents as the library names them: a title (the file's name until the document names itself), its state in
    words with what to do about a failure (Retry, Replace file) and whether its index is up to date; the version
    figures, passages, timings and attempts are on hover and on the document's page, so the list fits 1,280 px."""

    form = DocumentForm
    list_display = ("title_column", "status_column", "updated")
    list_display_links = None
    list_filter = ("status", "language", StaleFilter, ("folder", VisibleFolderFilter))
    list_select_related = ("folder",)
    search_fields = ("title", "filename")
    filter_horizontal = ("groups", "users")
    # `file` too: a new version goes through the upload service (validation, hash, type,
    # name, re-upload rules) or Replace file; an edited field here would bypass all of them.
    readonly_fields = (
        "file", "filename", "file_type", "size", "checksum", "status", "failed_stage", "failure_reason", "attempts",
        "worker", "readers", "readers_waiting", "index_state", "chunk_count", "token_total", "token_max", "indexed_at",
        "stage_timings", "warnings", "uploaded_by", "created_at", "updated_at", "language_detected",
    )
    fieldsets = (
        (None, {"fields": ("title", "file", "folder", "audience_default")}),
        (gettext_lazy("Language"), {"fields": ("language", "language_fixed", "language_detected")}),
        (gettext_lazy("Who may read it"), {"fields": ("inherit_access", "public", "groups", "users", "readers",
                                                      "readers_waiting")}),
        (gettext_lazy("Processing"), {"fields": ("status", "failed_stage", "failure_reason", "attempts", "worker",
                                                 "warnings")}),
        (gettext_lazy("Index"), {"fields": ("index_state", "chunk_count", "token_total", "token_max", "indexed_at",
                                            "stage_timings")}),
        (gettext_lazy("File"), {"fields": ("filename", "file_type", "size", "checksum", "uploaded_by", "created_at",
                                           "updated_at")}),
    )
    actions = ("retry_ingest", "reindex")
    change_list_template = "admin/kb/document/change_list.html"
    change_form_template = "admin/kb/document/change_form.html"

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
        if changed and obj.status not in Document.RUNNING:
            document_queue_ingest(documents=Document.objects.filter(pk=obj.pk))

    class Media:
        css = {"all": ("kb/admin.css",)}
        js = ("kb/admin.js",)  # the pickers' help icons named for screen readers

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "folder" and not request.user.is_superuser:
            kwargs["queryset"] = visible_folders(request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Uploads go through the library page / `manage.py ingest`, which validate and hash the file.
        return False

    @admin.display(description=gettext_lazy("Status"), ordering="status")
    def status_column(self, obj: Document) -> str:
        return self.status_badge(obj, actions=False)

    def get_list_display(self, request: HttpRequest) -> Any:
        """The status column offers Retry and Replace file only to those who may change documents."""
        if not self.has_change_permission(request):
            return self.list_display

        @admin.display(description=gettext_lazy("Status"), ordering="status")
        def status_column(obj: Document) -> str:
            return self.status_badge(obj, actions=True)

        return tuple(status_column if name == "status_column" else name for name in self.list_display)

    @admin.display(description=gettext_lazy("Title"), ordering="title")
    def title_column(self, obj: Document) -> str:
        """The title, cut to one line with the whole on hover, and its folder and file's name under it: a failed
        document has no title of its own yet, and two files may carry the same heading."""
        title = obj.title or filename_title(obj.filename)
        link = reverse("admin:kb_document_change", args=[obj.pk])
        where = f"{obj.folder.name} · {obj.filename}" if obj.folder else obj.filename
        language = f" · {obj.language}" if obj.language else ""
        return format_html('<a class="kb-title" href="{}" title="{}">{}</a><small class="kb-filename" title="{}">{}</small>',
                           link, title, title, where + language, where + language)

    @admin.display(description=gettext_lazy("Updated"), ordering="updated_at")
    def updated(self, obj: Document) -> str:
        when = timezone.localtime(obj.updated_at)
        return format_html('<span title="{}">{}</span>', date_format(when, "DATETIME_FORMAT"),
                           date_format(when, "SHORT_DATE_FORMAT"))

    def status_badge(self, obj: Document, *, actions: bool = False) -> str:
        """The document's state in words: Ready with whether its index is up to date, or why it failed with
        what to do (Retry; Replace file, since a corrupt file retried fails again); figures on hover."""
        tries = ngettext("%(n)d attempt", "%(n)d attempts", obj.attempts) % {"n": obj.attempts}
        if obj.status == Document.Status.READY:
            return format_html('<span class="kb-badge kb-ready" title="{}">{}</span> {}', tries, obj.get_status_display(),
                               self.index_badge(obj))
        if obj.status != Document.Status.FAILED:
            return format_html('<span class="kb-badge kb-{}" title="{}">{}</span>', obj.status, tries,
                               obj.get_status_display())
        kept = gettext(" · the previous version is still served to its old readers") if obj.pending_acl is not None else ""
        stage = obj.failed_stage or gettext("processing")
        buttons = ""
        if actions and obj.source_id is None:
            buttons = format_html(
                '<div class="kb-row-actions"><button type="submit" class="kb-row-button" formmethod="post" '
                'formaction="{}">{}</button> <a class="kb-row-button" href="{}">{}</a></div>',
                reverse("admin:kb_document_retry", args=[obj.pk]), gettext("Retry"),
                reverse("admin:kb_document_replace", args=[obj.pk]), gettext("Replace file"))
        said = obj.failure_reason.removeprefix(f"{obj.filename}: ")  # the file is named in the row already
        reason = gettext("While %(stage)s: %(reason)s") % {"stage": stage, "reason": said}
        return format_html('<span class="kb-badge kb-failed" title="{}">{}</span><div class="kb-reason" title="{}">{}{}</div>{}',
                           tries, obj.get_status_display(), reason, reason, kept, buttons)

    @admin.display(description=gettext_lazy("Index"))
    def index_badge(self, obj: Document) -> str:
        if obj.status != Document.Status.READY:
            return format_html('<span class="kb-badge kb-none">{}</span>', gettext("Not indexed"))
        details = gettext("%(n)d passages · %(version)s · took %(time)s") % {
            "n": obj.chunk_count, "version": version_words(obj), "time": self.total_time(obj)}
        if document_is_stale(obj):
            return format_html('<span class="kb-badge kb-stale" title="{}">{}</span>',
                               gettext("%(details)s; current: %(current)s") % {
                                   "details": details, "current": current_index_version().label()},
                               gettext("Needs re-indexing"))
        return format_html('<span class="kb-badge kb-current" title="{}">{}</span>', details, gettext("Up to date"))

    @admin.display(description=gettext_lazy("Index"))
    def index_state(self, obj: Document) -> str:
        return format_html("{} <small>({})</small>", self.index_badge(obj), version_words(obj))

    @staticmethod
    def total_time(obj: Document) -> str:
        return f"{sum(obj.stage_seconds.values()):.1f} s" if obj.stage_seconds else "—"

    @admin.display(description=gettext_lazy("Time to index"))
    def stage_timings(self, obj: Document) -> str:
        """Where the last ingestion's time went, stage by stage (kb.library.ingest.pipeline)."""
        if not obj.stage_seconds:
            return "—"
        seconds = obj.stage_seconds  # "tokens" is not inside "chunk": each second counts once
        parts = format_html_join(" · ", "{} {}", ((name, f"{seconds[name]:.2f}") for name in STAGES if name in seconds))
        return format_html('<span class="kb-timings" title="{}">{} <small>({})</small></span>',
                           gettext("seconds per stage"), self.total_time(obj), parts)

    @admin.display(description=gettext_lazy("Who may read it now"))
    def readers(self, obj: Document) -> str:
        return readers_words(obj.acl)

    @admin.display(description=gettext_lazy("Readers once the new version is indexed"))
    def readers_waiting(self, obj: Document) -> str:
        return readers_words(obj.pending_acl) if obj.pending_acl is not None else gettext("No change waiting")

    @admin.display(description=gettext_lazy("File type"))
    def file_type(self, obj: Document) -> str:
        return obj.mime_type

    @admin.display(description=gettext_lazy("Checksum (SHA-256)"))
    def checksum(self, obj: Document) -> str:
        return obj.sha256

    @admin.action(description=gettext_lazy("Retry the selected failed (or stuck) documents"), permissions=["change"])
    def retry_ingest(self, request: HttpRequest, queryset: QuerySet[Document]) -> None:
        n = document_queue_ingest(documents=queryset.filter(status__in=[Document.Status.FAILED, *Document.RUNNING]))
        self.message_user(request, ngettext("Queued %(n)d document for another attempt",
                                            "Queued %(n)d documents for another attempt", n) % {"n": n})

    @admin.action(description=gettext_lazy("Index the selected documents again"), permissions=["change"])
    def reindex(self, request: HttpRequest, queryset: QuerySet[Document]) -> None:
        n = document_queue_ingest(documents=queryset.exclude(status__in=Document.RUNNING))
        self.message_user(request, ngettext("Queued %(n)d document for re-indexing",
                                            "Queued %(n)d documents for re-indexing", n) % {"n": n})

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        document_sync_acl(document=form.instance)

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view
        extra = [
            path("reindex-stale/", view(self.reindex_stale_view), name="kb_document_reindex_stale"),
            path("<int:pk>/retry/", view(self.retry_view), name="kb_document_retry"),
            path("<int:pk>/replace/", view(self.replace_view), name="kb_document_replace"),
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

    def _changeable(self, request: HttpRequest, pk: int) -> Document:
        """The document, when the user may change it; else 404 for one they may not read, 403 for one they may."""
        document = get_object_or_404(self.get_queryset(request), pk=pk)
        if not self.has_change_permission(request, document):
            raise PermissionDenied
        return document

    def retry_view(self, request: HttpRequest, pk: int) -> HttpResponseRedirect:
        """The list's Retry beside a failed document (the changelist's form posts it, with its CSRF token)."""
        if request.method != "POST":
            raise PermissionDenied
        document = self._changeable(request, pk)
        try:
            document_retry(document=document)
        except DocumentStateConflict as exc:
            self.message_user(request, str(exc), messages.ERROR)
        else:
            self.message_user(request, gettext("%(name)s: queued for another attempt") % {"name": document.filename})
        return HttpResponseRedirect(request.POST.get("next") or reverse("admin:kb_document_changelist"))

    def replace_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """Replace file: a new file for the same document, with its folder and readers (a corrupt file
        retried only fails again)."""
        document = self._changeable(request, pk)
        form = ReplaceFileForm(request.POST or None, request.FILES or None)
        problem = ""
        if request.method == "POST" and form.is_valid():
            upload = form.cleaned_data["file"]
            try:
                replaced = document_replace_file(document=document, name=upload.name or "upload", stream=upload,
                                                 size=upload.size or 0, by=request.user)
            except (UploadRejected, DocumentStateConflict) as exc:
                problem = str(exc)
            else:
                self.message_user(request, gettext("%(name)s replaces the old file and is being indexed; it keeps the "
                                                   "document's folder and readers") % {"name": replaced.filename},
                                  messages.SUCCESS)
                return HttpResponseRedirect(reverse("admin:kb_document_changelist"))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts, "original": document, "form": form, "problem": problem,
            "title": gettext("Replace the file of %(name)s") % {"name": document.filename},
            "max_upload_mb": settings.KB_MAX_UPLOAD_MB, "upload_accept": ",".join(SUPPORTED),
            "upload_kinds": SUPPORTED_KINDS, "readers": readers_words(document.acl),
        }
        return TemplateResponse(request, "admin/kb/document/replace_file.html", context,
                                status=400 if problem or form.errors else 200)

    def delete_model(self, request: HttpRequest, obj: Document) -> None:
        document_delete(document=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Document]) -> None:
        for document in queryset:
            document_delete(document=document)


@admin.register(Chunk)
class ChunkAdmin(StaffRuleMixin, admin.ModelAdmin):
    list_display = ("document", "position", "kind", "audience", "section", "tokens", "page")
    list_filter = ("kind", "audience")
    list_select_related = ("document",)
    search_fields = ("breadcrumb", "content")
    exclude = ("embedding", "late_vectors", "identifiers")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Chunk]:
        return super().get_queryset(request).defer("embedding", "late_vectors", "identifiers")  # never shown

    @admin.display(description=gettext_lazy("Passage"), ordering="ordinal")
    def position(self, obj: Chunk) -> int:
        return obj.ordinal + 1

    @admin.display(description=gettext_lazy("Section"), ordering="breadcrumb")
    def section(self, obj: Chunk) -> str:
        return format_html('<span class="kb-cut" title="{}">{}</span>', obj.breadcrumb, obj.breadcrumb)
    readonly_fields = [f.name for f in Chunk._meta.fields if f.name not in {"embedding", "search", "late_vectors", "identifiers"}]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class SourceAddForm(forms.ModelForm):
    """Adding a source in the admin, under the rules of `manage.py source add` and /api/sources
    (kb.library.sources.services.source_check); the folder among those the adder may read, the secret write-only.
    A folder's (or a local repository's) directory must exist and be readable before the source is saved."""

    every_text = forms.CharField(label=gettext_lazy("Every"), required=False,
                                 help_text=gettext_lazy("90s, 15m, 2h or 1d; empty: by hand only"))
    credential = forms.CharField(
        label=gettext_lazy("Secret"), required=False, strip=False, widget=forms.PasswordInput(render_value=False),
        help_text=gettext_lazy("A token or password for the location; never shown back. An operator may set it on the "
                               "server instead, as KB_SOURCE_{NAME}_TOKEN or KB_SOURCE_{NAME}_TOKEN_FILE, {NAME} being "
                               "the source's name in capitals (other characters as _)."))
    hook_secret = forms.CharField(
        label=gettext_lazy("Webhook secret"), required=False, strip=False, widget=forms.PasswordInput(render_value=False),
        help_text=gettext_lazy("Git: the secret your forge signs push webhooks with (GitHub and Gitea: the webhook's "
                               "secret; GitLab: its secret token), so a push is searchable at once; never shown back. "
                               "An operator may set it as KB_SOURCE_{NAME}_WEBHOOK_SECRET(_FILE) instead."))

    class Meta:
        model = Source
        fields = ("name", "kind", "location", "branch", "path", "folder", "include", "exclude", "shrink_guard", "watch")
        labels = {"watch": gettext_lazy("Watch")}
        help_texts = {
            "location": gettext_lazy("Folder: a directory on the server (not on your computer), under one the "
                                     "operator allows; Git: a repository URL; site: a start URL"),
            "watch": gettext_lazy("Folder: sync a few seconds after a file in the directory is saved, not only on "
                                  "the schedule (the watcher, manage.py watch_sources). Git sources take push "
                                  "webhooks instead; a site cannot be watched."),
        }

    def clean(self) -> dict[str, Any]:
        data: dict[str, Any] = super().clean() or {}
        try:
            data["every"] = parse_every(data["every_text"]) if data.get("every_text") else None
        except SourceRejected as exc:
            self.add_error("every_text", str(exc))
        if data.get("folder") is None or self.errors:
            return data
        try:
            source_check(name=data.get("name", ""), kind=data.get("kind", ""), location=data.get("location", ""),
                         folder_name=data["folder"].name, path=data.get("path", ""),
                         shrink_guard=data.get("shrink_guard", 0.5), operator=False, branch=data.get("branch", ""),
                         watch=bool(data.get("watch")))
            location_reachable_check(kind=data.get("kind", ""), location=data.get("location", ""),
                                     secret=data.get("credential", ""))
        except SourceNotWatchable as exc:
            self.add_error("watch", str(exc))
        except SourceRejected as exc:
            field = "location" if "location" in self.fields and _about_location(exc) else None
            self.add_error(field, str(exc))
        return data


def _about_location(exc: SourceRejected) -> bool:
    """Whether a refusal is about the location (shown beside that field) rather than the source as a whole."""
    return not isinstance(exc, SourceNameTaken) and "KB folder" not in str(exc) and "shrink guard" not in str(exc)


@admin.register(Source)
class SourceAdmin(StaffRuleMixin, admin.ModelAdmin):
    """Where documents come from, how their last run went (live while it runs: kb/library/static/kb/sources.js polls
    /api/sources) and how far the index is behind; "Sync now" queues a run. A source is added here (the add
    form) as with `manage.py source add` or /api/sources; changing one goes through those two, which keep a
    secret with its location (kb.library.sources.services)."""

    # Four columns, so the list fits 1,280 px: the kind, location and folder under the name; the run's counts and
    # last success on hover, its failed files folded under it; the lag's figures on hover.
    list_display = ("source_column", "schedule", "last_run_column", "lag_column")
    list_display_links = None
    list_select_related = ("folder",)
    list_filter = ("kind", "last_status")
    search_fields = ("name",)
    fields = ("name", "kind", "shown_location", "secret_state", "branch", "path", "folder", "include", "exclude",
              "schedule", "watch", "shrink_guard", "last_run", "last_reason", "last_started_at", "last_finished_at",
              "last_success_at", "index_lag", "failed_files", "webhook_url", "webhook_state", "last_push", "recent_pushes")
    readonly_fields = fields
    webhook_fields = ("webhook_url", "webhook_state", "last_push", "recent_pushes")
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
        if obj is None:
            return (*SourceAddForm.Meta.fields, "every_text", "credential", "hook_secret")
        fields = super().get_fields(request, obj)
        if obj.kind != Source.Kind.FOLDER:
            fields = [f for f in fields if f != "watch"]  # only a folder on this server can be watched
        return fields if obj.kind == Source.Kind.GIT else [f for f in fields if f not in self.webhook_fields]

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
                                shrink_guard=data["shrink_guard"], secret=data.get("credential", ""), operator=False,
                                watch=bool(data.get("watch")))
        if data.get("hook_secret"):
            webhook_secret_set(source=created, secret=data["hook_secret"])
        obj.pk = created.pk
        obj.refresh_from_db()

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Removing a source removes its documents (as `manage.py source remove` does): that needs both.
        return super().has_delete_permission(request, obj) and staff_may(request.user, "kb.delete_document")

    @admin.display(description=gettext_lazy("Location"))
    def shown_location(self, obj: Source) -> str:
        return redact(obj.location)

    @admin.display(description=gettext_lazy("Source"), ordering="name")
    def source_column(self, obj: Source) -> str:
        where = gettext("%(kind)s %(location)s → folder %(folder)s") % {
            "kind": obj.get_kind_display(), "location": redact(obj.location), "folder": obj.folder.name}
        return format_html('<a class="kb-title kb-narrow" href="{}">{}</a><small class="kb-filename kb-narrow" '
                           'title="{}">{}</small>', reverse("admin:kb_source_change", args=[obj.pk]), obj.name, where,
                           where)

    @admin.display(description=gettext_lazy("Last run"), ordering="last_status")
    def last_run_column(self, obj: Source) -> str:
        return format_html("{}{}", self.run_cell(obj), self.failures_column(obj))

    @admin.display(description=gettext_lazy("Index lag"))
    def lag_column(self, obj: Source) -> str:
        lag = lag_of(obj)
        last = "—" if obj.last_lag_seconds is None else f"{obj.last_lag_seconds:.0f} s"
        return format_html('<span data-source-lag="{}" data-compact title="{}">{}</span>{}', obj.pk,
                           gettext("pending %(pending)s · failed %(failed)s · last change searchable after %(last)s")
                           % {"pending": lag.pending, "failed": lag.failed, "last": last},
                           gettext("behind %(seconds)s s") % {"seconds": f"{lag.lag_seconds():.0f}"},
                           format_html('<small class="kb-filename">{}</small>', self.last_push(obj))
                           if obj.last_push_at else "")

    @admin.display(description=gettext_lazy("Every"), ordering="every")
    def schedule(self, obj: Source) -> str:
        """The schedule as it is written when added (15m, not 900), and whether a saved file syncs it at once."""
        when = every_text(obj.every) or gettext("by hand")
        return gettext("%(schedule)s · watched") % {"schedule": when} if obj.watch else when

    @admin.display(description=gettext_lazy("Credential"))
    def secret_state(self, obj: Source) -> str:
        return secret_state(obj)

    @admin.display(description=gettext_lazy("Webhook URL"))
    def webhook_url(self, obj: Source) -> str:
        """Where the forge posts pushes: the source's path after this server's public address."""
        return format_html("<code>{}</code> <small>{}</small>", webhook_path(obj),
                           gettext("after this server's address, e.g. https://kb.example.com"))

    @admin.display(description=gettext_lazy("Webhook secret"))
    def webhook_state(self, obj: Source) -> str:
        return secret_state(obj, WEBHOOK)

    @admin.display(description=gettext_lazy("Last push"), ordering="last_push_at")
    def last_push(self, obj: Source) -> str:
        if obj.last_push_at is None:
            return gettext("none yet")
        return gettext("%(when)s from %(origin)s") % {
            "when": date_format(timezone.localtime(obj.last_push_at), "DATETIME_FORMAT"),
            "origin": dict(SourcePush.Origin.choices).get(obj.last_push_origin, obj.last_push_origin)}

    @admin.display(description=gettext_lazy("Recent pushes"))
    def recent_pushes(self, obj: Source) -> str:
        """The verified pushes kept for the replay window (KB_SOURCE_WEBHOOK_WINDOW), the newest first: when and from
        where, never what was signed."""
        pushes = [(date_format(timezone.localtime(p.received_at), "DATETIME_FORMAT"), p.get_origin_display())
                  for p in obj.pushes.order_by("-received_at")[:10]]
        if not pushes:
            return gettext("none")
        return format_html("<ul>{}</ul>", format_html_join("", "<li>{} · {}</li>", pushes))

    @admin.display(description=gettext_lazy("Last run"))
    def last_run(self, obj: Source) -> str:
        return self.run_cell(obj, compact=False)

    def run_cell(self, obj: Source, *, compact: bool = True) -> str:
        """The run's state with its counts; `compact` (the list): its one figure that matters, the counts and the
        last success on hover. kb/static/kb/sources.js renders the same while it runs."""
        mark = "data-compact" if compact else "data-full"
        if not obj.last_status:
            return format_html('<div data-source-run="{}" {}>{}</div>', obj.pk, mark, gettext("never run"))
        if obj.last_status == Source.RunStatus.RUNNING:
            counts = gettext("%(step)s: listed %(listed)s · %(planned)s changes · indexed %(indexed)s of %(to_index)s "
                             "· failed %(failed)s")
            short = gettext("%(indexed)s of %(to_index)s indexed")
        else:
            counts = gettext("listed %(listed)s · unchanged %(unchanged)s · changed %(changed)s · new %(new)s · deleted "
                             "%(deleted)s · renamed %(renamed)s · failed %(failed)s · chunks embedded %(chunks_embedded)s")
            short = gettext("%(listed)s files · %(failed)s failed") if obj.last_failed else gettext("%(listed)s files")
        values = {"step": obj.last_step, "listed": obj.last_listed, "planned": obj.last_planned,
                  "indexed": obj.last_indexed, "to_index": obj.last_to_index, "failed": obj.last_failed,
                  "unchanged": obj.last_unchanged, "changed": obj.last_changed, "new": obj.last_new,
                  "deleted": obj.last_deleted, "renamed": obj.last_renamed, "chunks_embedded": obj.last_chunks_embedded}
        if not compact:
            return format_html('<div data-source-run="{}" {}><span class="kb-badge kb-{}">{}</span> <small>{}</small>'
                               '<div class="kb-reason">{}</div></div>', obj.pk, mark, obj.last_status,
                               obj.get_last_status_display(), counts % values, obj.last_reason)
        success = date_format(timezone.localtime(obj.last_success_at), "DATETIME_FORMAT") if obj.last_success_at else "—"
        hover = gettext("%(counts)s · last success %(when)s") % {"counts": counts % values, "when": success}
        return format_html('<div data-source-run="{}" {}><span class="kb-badge kb-{}" title="{}">{}</span> '
                           '<small>{}</small><div class="kb-reason" title="{}">{}</div></div>',
                           obj.pk, mark, obj.last_status, hover, obj.get_last_status_display(), short % values,
                           obj.last_reason, obj.last_reason)

    @admin.display(description=gettext_lazy("Index lag"))
    def index_lag(self, obj: Source) -> str:
        lag = lag_of(obj)
        last = "—" if obj.last_lag_seconds is None else f"{obj.last_lag_seconds:.0f} s"
        return format_html('<span data-source-lag="{}" title="{}">{}</span>', obj.pk,
                           gettext("last change searchable after %(last)s") % {"last": last},
                           gettext("behind %(seconds)s s · pending %(pending)s · failed %(failed)s")
                           % {"seconds": f"{lag.lag_seconds():.0f}", "pending": lag.pending, "failed": lag.failed})

    @admin.display(description=gettext_lazy("Failed files"))
    def failed_files(self, obj: Source) -> str:
        failures = sources_lag([obj.pk], failures=True)[obj.pk].failures
        if not failures:
            return gettext("none")
        return format_html("<ul>{}</ul>", format_html_join("", '<li><code>{}</code>: <span class="kb-reason">{}</span></li>',
                                                           failures))

    @admin.display(description=gettext_lazy("Failed files"))
    def failures_column(self, obj: Source) -> str:
        """The source's failed files with their reasons, folded under their count (and on hover)."""
        lag = sources_lag([obj.pk], failures=True)[obj.pk]
        if not lag.failures:
            return "—"
        listed = "\n".join(f"{path}: {reason}" for path, reason in lag.failures)
        return format_html(
            '<details class="kb-failures" title="{}"><summary>{}</summary><ul>{}</ul></details>', listed,
            ngettext("%(n)d failed", "%(n)d failed", lag.failed) % {"n": lag.failed},
            format_html_join("", '<li><code>{}</code> <span class="kb-reason">{}</span></li>', lag.failures))

    @admin.action(description=gettext_lazy("Sync now"), permissions=["change"])
    def sync_now(self, request: HttpRequest, queryset: QuerySet[Source]) -> None:
        queued = [source.name for source in queryset if queues.send("kb.sync_source", source.pk, False)]
        self.message_user(request, ngettext("Queued a run of %(n)d source: %(names)s", "Queued a run of %(n)d sources: %(names)s",
                                            len(queued)) % {"n": len(queued), "names": ", ".join(queued) or gettext("none")})

    def delete_model(self, request: HttpRequest, obj: Source) -> None:
        source_remove(source=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Source]) -> None:
        for source in queryset:
            source_remove(source=source)
