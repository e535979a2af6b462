"""Read-mostly admin for conversations, answers and feedback; reviewing happens in the review API. Review
grants are given and revoked here, and superusers read (and export) the review access log here.

Staff who are not superusers get only what they may read (kb.library.admin.StaffRuleMixin): answers whose every
source they may read (chat.selectors.messages_readable), since an answer, its quotes and its flags may repeat
any of them, and only those whose deletion takes nothing else with it that they may not read; review grants
only of groups they belong to and folders they may read (chat.review.scope)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.widgets import ForeignKeyRawIdWidget
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet
from django.http import HttpRequest, StreamingHttpResponse
from django.utils.translation import gettext_lazy

from chat.models import (
    Citation,
    Conversation,
    CuratedAnswer,
    CuratedCitation,
    CuratedQuestion,
    Feedback,
    Message,
    ReviewAccess,
    ReviewGrant,
)
from chat.review.curated import curated_visible
from chat.review.scope import access_log_csv, grantable_folders, grantable_groups, grants_manageable, reviewers
from chat.selectors import messages_readable
from kb.library.access import visible_documents
from kb.library.admin import ReadableRowsMixin, RecordAdminMixin, StaffRuleMixin


def messages_manageable(user: Any) -> QuerySet[Message]:
    """Messages `user` may read whose deletion takes only what they may read: a question takes its answers."""
    if user.is_superuser:
        return Message.objects.all()
    readable = messages_readable(user)
    return readable.exclude(answers__in=Message.objects.exclude(pk__in=readable))


def citations_readable(user: Any) -> QuerySet[Citation]:
    """Citations whose document and answer `user` may read (a citation whose document is gone: nobody but superusers)."""
    if user.is_superuser:
        return Citation.objects.all()
    return Citation.objects.filter(document__in=visible_documents(user), message__in=messages_manageable(user))


class MessageRowsMixin(ReadableRowsMixin):
    message_lookup = "message"  # the path from this admin's model to its Message

    def readable_rows(self, user: Any, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(**{f"{self.message_lookup}__in": messages_manageable(user)})


class FeedbackRowsMixin(MessageRowsMixin):
    """A flag names its citation (`[1] <document title> > <heading>`): that must be readable too."""

    def readable_rows(self, user: Any, queryset: QuerySet[Any]) -> QuerySet[Any]:
        rows = super().readable_rows(user, queryset)
        return rows.filter(Q(citation__isnull=True) | Q(citation__in=citations_readable(user)))


class ReadableRawIdWidget(ForeignKeyRawIdWidget):
    """A raw-id input that names only rows of `queryset`: the stock one prints the label of any id it is given."""

    def __init__(self, rel: Any, admin_site: Any, queryset: QuerySet[Any], **kwargs: Any) -> None:
        super().__init__(rel, admin_site, **kwargs)
        self.queryset = queryset

    def label_and_url_for_value(self, value: Any) -> tuple[str, str]:
        try:
            readable = self.queryset.filter(pk=value).exists()
        except (TypeError, ValueError, ValidationError):
            readable = False
        return super().label_and_url_for_value(value) if readable else ("", "")


class ReadOnlyInline(admin.TabularInline):
    """Rows shown with their parent, never added, changed or removed from there (each subclass names its `fields`)."""

    extra = 0
    can_delete = False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.fields

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class MessageInline(MessageRowsMixin, ReadOnlyInline):
    model = Message
    message_lookup = "pk"
    fk_name = "conversation"
    fields = ("role", "status", "text", "backend", "created_at")
    show_change_link = True


@admin.register(Conversation)
class ConversationAdmin(StaffRuleMixin, admin.ModelAdmin):
    list_display = ("title", "owner", "created_at", "updated_at")
    list_select_related = ("owner",)
    search_fields = ("title", "owner__username")
    readonly_fields = ("owner", "created_at", "updated_at")
    inlines = (MessageInline,)

    def readable_rows(self, user: Any, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Conversations all of whose messages `user` may read: deleting one deletes them all."""
        return queryset.exclude(messages__in=Message.objects.exclude(pk__in=messages_readable(user)))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # conversations are started in the chat


class CitationInline(MessageRowsMixin, ReadOnlyInline):
    model = Citation
    fields = ("number", "document", "label", "link", "distance", "quote")


class FeedbackInline(FeedbackRowsMixin, admin.TabularInline):
    model = Feedback
    fields = ("kind", "citation", "note", "reviewer", "created_at")
    readonly_fields = ("reviewer", "created_at")
    extra = 0

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        """A flag's citation is one of this answer's citations that the user may read."""
        formset = super().get_formset(request, obj, **kwargs)
        citation = formset.form.base_fields.get("citation")
        if isinstance(citation, forms.ModelChoiceField):
            citation.queryset = citations_readable(request.user).filter(message=obj) if obj else Citation.objects.none()
        return formset


@admin.register(Message)
class MessageAdmin(MessageRowsMixin, StaffRuleMixin, admin.ModelAdmin):
    message_lookup = "pk"
    list_display = ("pk", "conversation", "role", "status", "intent", "answered_by", "time_to_answer", "created_at")
    list_filter = ("role", "status", "backend", "intent")
    list_select_related = ("conversation",)
    search_fields = ("text",)
    exclude = ("job_id", "query_vector")  # 384 numbers say nothing to a person
    # All of it: its sources decide who may read it, and chat.claim_support's flags go through the review API.
    readonly_fields = tuple(f.name for f in Message._meta.fields if f.name not in {"id", "job_id", "query_vector"})
    inlines = (CitationInline, FeedbackInline)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # messages are asked and answered in the chat

    @admin.display(description=gettext_lazy("Answered by"), ordering="backend")
    def answered_by(self, obj: Message) -> str:
        return obj.backend or "—"

    @admin.display(description=gettext_lazy("Time to answer"), ordering="total_ms")
    def time_to_answer(self, obj: Message) -> str:
        return "—" if obj.total_ms is None else f"{obj.total_ms / 1000:.1f} s"


class FeedbackForm(forms.ModelForm):
    """A flag on a citation flags one of that answer's citations."""

    class Meta:
        model = Feedback
        fields = ("kind", "message", "citation", "note")

    def clean(self) -> dict[str, Any]:
        data: dict[str, Any] = super().clean() or {}
        message, citation = data.get("message"), data.get("citation")
        if message is not None and citation is not None and citation.message_id != message.pk:
            raise ValidationError({"citation": "Choose one of this answer's citations."})
        return data


@admin.register(Feedback)
class FeedbackAdmin(FeedbackRowsMixin, StaffRuleMixin, admin.ModelAdmin):
    form = FeedbackForm
    list_display = ("kind", "message", "citation", "reviewer", "created_at")
    list_filter = ("kind",)
    list_select_related = ("message", "citation", "reviewer")
    raw_id_fields = ("message", "citation")
    readonly_fields = ("reviewer", "created_at")

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        """The ids accepted, and the labels shown beside them, are only of rows the user may read."""
        choices = {"message": messages_manageable, "citation": citations_readable}.get(db_field.name)
        if choices is not None:
            kwargs["queryset"] = choices(request.user)
            kwargs["widget"] = ReadableRawIdWidget(db_field.remote_field, self.admin_site, kwargs["queryset"],
                                                   using=kwargs.get("using"))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request: HttpRequest, obj: Feedback, form: object, change: bool) -> None:
        if not change:
            obj.reviewer = request.user  # type: ignore[assignment]
        super().save_model(request, obj, form, change)


class ReviewGrantForm(forms.ModelForm):
    class Meta:
        model = ReviewGrant
        fields = ("reviewer", "group", "folder", "note")

    def clean(self) -> dict[str, Any]:
        data: dict[str, Any] = super().clean() or {}
        if (data.get("group") is None) == (data.get("folder") is None):
            raise ValidationError("Choose a group or a folder (one of them).")
        return data


@admin.register(ReviewGrant)
class ReviewGrantAdmin(StaffRuleMixin, admin.ModelAdmin):
    """Review grants: which support reviewer sees which group's or folder's answers in full on the review desk.
    Deleting one revokes it from the reviewer's next request. The choices are the staff rule's: a group the
    granter belongs to, a folder they may read (superusers: any), a reviewer of the review group."""

    form = ReviewGrantForm
    list_display = ("reviewer", "scope", "granted_by", "note", "created_at")
    list_select_related = ("reviewer", "group", "folder", "granted_by")
    list_filter = ("group", "folder")
    search_fields = ("reviewer__username", "note")
    readonly_fields = ("granted_by", "created_at")

    def readable_rows(self, user: Any, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(pk__in=grants_manageable(user).values("pk"))

    def get_list_filter(self, request: HttpRequest) -> Any:
        return self.list_filter if request.user.is_superuser else ()  # the filters name every group and folder

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        choices = {"reviewer": lambda user: reviewers(), "group": grantable_groups,
                   "folder": grantable_folders}.get(db_field.name)
        if choices is not None:
            kwargs["queryset"] = choices(request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request: HttpRequest, obj: ReviewGrant, form: object, change: bool) -> None:
        obj.granted_by = request.user  # type: ignore[assignment]  # a change is a new grant from whoever made it
        super().save_model(request, obj, form, change)


class ReviewGrantInline(ReadOnlyInline):
    """A reviewer's grants on their user page, for superusers: read-only (given and revoked under Review grants)."""

    model = ReviewGrant
    fk_name = "reviewer"
    fields = ("scope", "granted_by", "note", "created_at")
    verbose_name_plural = gettext_lazy("review grants (given and revoked under Chat › Review grants)")

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# accounts' user admin may not import chat (docs/ARCHITECTURE.md): chat adds its inline to the registered one.
_user_admin = type(admin.site._registry[get_user_model()])
_user_admin.inlines = (*_user_admin.inlines, ReviewGrantInline)


@admin.register(ReviewAccess)
class ReviewAccessAdmin(RecordAdminMixin, admin.ModelAdmin):
    """The review access log: superusers only, read-only; "Export as CSV" downloads the selected rows."""

    list_display = ("at", "reviewer_name", "answer", "surface", "grants")
    list_filter = ("surface",)
    search_fields = ("reviewer_name", "=answer")
    date_hierarchy = "at"
    readonly_fields = list_display
    actions = ("export_csv",)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    @admin.action(description=gettext_lazy("Export the selected rows as a spreadsheet (CSV)"), permissions=["view"])
    def export_csv(self, request: HttpRequest, queryset: QuerySet[ReviewAccess]) -> StreamingHttpResponse:
        response = StreamingHttpResponse(access_log_csv(queryset), content_type="text/csv")
        response["Content-Disposition"] = 'attachment; filename="review-access-log.csv"'
        return response


class CuratedRowsMixin:
    """A curated answer's citations and example questions are seen with the answer, by whoever may view it."""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.has_perm("chat.view_curatedanswer"))


class CuratedCitationInline(CuratedRowsMixin, ReadOnlyInline):
    model = CuratedCitation
    fields = ("number", "document", "stable_id", "start", "end", "quote")


class CuratedQuestionInline(CuratedRowsMixin, ReadOnlyInline):
    model = CuratedQuestion
    fields = ("text",)


@admin.register(CuratedAnswer)
class CuratedAnswerAdmin(StaffRuleMixin, admin.ModelAdmin):
    """Read and delete: curated answers are written, approved and retired on the desk (/review/curated/), where the
    citations are checked. Staff who are not superusers see those whose every cited document they may read."""

    list_display = ("__str__", "state", "created_by", "approved_by", "approved_at", "updated_at")
    list_filter = ("state",)
    list_select_related = ("created_by", "approved_by")
    search_fields = ("text", "statement", "questions__text")
    fields = ("text", "statement", "state", "stale_reason", "from_topic", "created_by", "created_at",
              "approved_by", "approved_at")
    readonly_fields = fields
    inlines = (CuratedQuestionInline, CuratedCitationInline)

    def readable_rows(self, user: Any, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(pk__in=curated_visible(user).values("pk"))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # written on the curated answers desk
