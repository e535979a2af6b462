"""Read-mostly admin for conversations, answers and feedback; reviewing happens in the review API."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from chat.models import Citation, Conversation, Feedback, Message


class MessageInline(admin.TabularInline):
    model = Message
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


class CitationInline(admin.TabularInline):
    model = Citation
    fields = ("number", "document", "label", "link", "distance", "quote")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class FeedbackInline(admin.TabularInline):
    model = Feedback
    fields = ("kind", "citation", "note", "reviewer", "created_at")
    readonly_fields = ("reviewer", "created_at")
    extra = 0


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
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
class FeedbackAdmin(admin.ModelAdmin):
    list_display = ("kind", "message", "citation", "reviewer", "created_at")
    list_filter = ("kind",)
    list_select_related = ("message", "citation", "reviewer")
    raw_id_fields = ("message", "citation")
    readonly_fields = ("reviewer", "created_at")

    def save_model(self, request: HttpRequest, obj: Feedback, form: object, change: bool) -> None:
        if not change:
            obj.reviewer = request.user  # type: ignore[assignment]
        super().save_model(request, obj, form, change)
