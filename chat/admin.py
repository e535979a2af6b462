"""Read-mostly admin for conversations, answers and feedback; reviewing happens in the review API."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from chat.models import Citation, Conversation, Feedback, Message
from chat.selectors import messages_readable


class ReadableRowsMixin:
    """Staff who are not superusers get only rows of answers whose every source they may read
    (chat.selectors.messages_readable): an answer, its quotes and its flags may repeat any of them."""

    message_lookup = "message"  # the path from this admin's model to its Message

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset: QuerySet[Any] = super().get_queryset(request)  # type: ignore[misc]
        if request.user.is_superuser:
            return queryset
        return queryset.filter(**{f"{self.message_lookup}__in": messages_readable(request.user)})


class MessageInline(ReadableRowsMixin, admin.TabularInline):
    model = Message
    message_lookup = "pk"
    fk_name = "conversation"
    fields = ("role", "status", "text", "backend", "created_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin):
    list_display = ("title", "owner", "created_at", "updated_at")
    list_select_related = ("owner",)
    search_fields = ("title", "owner__username")
    readonly_fields = ("owner", "created_at", "updated_at")
    inlines = (MessageInline,)


class CitationInline(ReadableRowsMixin, admin.TabularInline):
    model = Citation
    fields = ("number", "document", "label", "link", "distance", "quote")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class FeedbackInline(ReadableRowsMixin, admin.TabularInline):
    model = Feedback
    fields = ("kind", "citation", "note", "reviewer", "created_at")
    readonly_fields = ("reviewer", "created_at")
    extra = 0


@admin.register(Message)
class MessageAdmin(ReadableRowsMixin, admin.ModelAdmin):
    message_lookup = "pk"
    list_display = ("pk", "conversation", "role", "status", "intent", "backend", "total_ms", "created_at")
    list_filter = ("role", "status", "backend", "intent")
    list_select_related = ("conversation",)
    search_fields = ("text",)
    readonly_fields = (
        "conversation", "role", "question", "text", "status", "intent", "refusal_reason", "error", "backend",
        "model", "notice", "nearest_distance", "threshold", "retrieval_ms", "first_token_ms", "total_ms",
        "created_at", "started_at", "finished_at",
    )
    exclude = ("job_id",)
    inlines = (CitationInline, FeedbackInline)


@admin.register(Feedback)
class FeedbackAdmin(ReadableRowsMixin, admin.ModelAdmin):
    list_display = ("kind", "message", "citation", "reviewer", "created_at")
    list_filter = ("kind",)
    list_select_related = ("message", "citation", "reviewer")
    raw_id_fields = ("message", "citation")
    readonly_fields = ("reviewer", "created_at")

    def save_model(self, request: HttpRequest, obj: Feedback, form: object, change: bool) -> None:
        if not change:
            obj.reviewer = request.user  # type: ignore[assignment]
        super().save_model(request, obj, form, change)
