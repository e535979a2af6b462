"""search's part of the admin: the document list (kb.library.admin) names the reranker and late
interaction that queries use now, next to the index version; the answerability models
refitted from this deployment's verdicts, which an admin reads, accepts and reverts here;
staff's boosts and hides (search.adjustments) and the remembered questions (search.memory)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Exists, OuterRef, QuerySet, Subquery
from django.db.models.functions import Substr
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.translation import gettext, gettext_lazy, ngettext

from accounts.acl import readable_filter
from kb.library.access import staff_may
from kb.library.admin import RecordAdminMixin, index_note_register
from kb.library.models import Chunk, Document
from search import late, rerank
from search.adjustments import (
    ADD,
    EXCERPT,
    REVOKE,
    VIEW,
    AdjustmentError,
    adjustable_documents,
    adjustment_add,
    adjustment_revoke,
    adjustment_target,
    adjustments_visible,
    document_passages,
    passage_from_link,
)
from search.answerability import (
    AnswerabilityError,
    may_accept,
    model_accept,
    model_revert,
    refit_from_verdicts,
)
from search.memory import forget
from search.models import AnswerabilityModel, RememberedQuestion, RetrievalAdjustment

index_note_register(gettext_lazy("re-ranking"), rerank.status)
index_note_register(gettext_lazy("passage-level matching"), late.status)


@admin.register(AnswerabilityModel)
class AnswerabilityModelAdmin(RecordAdminMixin, admin.ModelAdmin):
    """Read-only rows: a refit stores a proposal (`calibrate --from-verdicts` or the button here), and only
    accepting and reverting change which one serves; both need search.accept_answerabilitymodel (or a superuser)."""

    list_display = ("__str__", "state", "signals", "verdict_counts", "cv_auc", "created_at", "created_by",
                    "accepted_at", "accepted_by")
    list_select_related = ("created_by", "accepted_by")
    change_list_template = "admin/search/answerabilitymodel/change_list.html"

    class Media:
        css = {"all": ("kb/admin.css",)}

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return staff_may(request.user, "search.view_answerabilitymodel") or may_accept(request.user)

    @admin.display(description=gettext_lazy("Signals it weighs"))
    def signals(self, obj: AnswerabilityModel) -> str:
        return ", ".join(obj.model.get("features", []))

    @admin.display(description=gettext_lazy("Reviews: should answer / should refuse"))
    def verdict_counts(self, obj: AnswerabilityModel) -> str:
        on = obj.fitted_on
        return f"{on.get('answerable', '?')} / {on.get('unanswerable', '?')}" if on else "—"

    @admin.display(description=gettext_lazy("Accuracy (cross-validated AUC)"))
    def cv_auc(self, obj: AnswerabilityModel) -> str:
        chosen = obj.candidates[0] if obj.candidates else {}
        return f"{chosen['cross_validated']['auc']:.3f}" if chosen else "—"

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view
        return [
            path("refit/", view(self.refit_view), name="search_answerabilitymodel_refit"),
            path("revert/", view(self.revert_view), name="search_answerabilitymodel_revert"),
            path("<int:pk>/accept/", view(self.accept_view), name="search_answerabilitymodel_accept"),
            *super().get_urls(),
        ]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        active = AnswerabilityModel.objects.filter(active=True).select_related("previous").first()
        context = {**(extra_context or {}), "active": active, "may_accept": may_accept(request.user)}
        return super().changelist_view(request, extra_context=context)

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """The proposal as an admin decides on it: what it was fitted on, by judge (with a form to refit
        without some), each candidate cross-validated, the chosen one's frontier against the nearest distance
        alone, its coefficients."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        obj = get_object_or_404(AnswerabilityModel.objects.select_related("created_by", "accepted_by", "previous"),
                                pk=object_id)
        chosen = obj.candidates[0] if obj.candidates else {}
        baseline = chosen.get("baseline", {}).get("frontier", [])
        model = obj.model
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts, "title": f"{obj} ({obj.state})", "obj": obj, "chosen": chosen,
            "frontier": list(zip(chosen.get("frontier", []), baseline, strict=False)),
            "coefficients": list(zip(model["features"], model["coefficients"], strict=True)),
            "judges": obj.fitted_on.get("judges", []), "left_out": obj.fitted_on.get("left_out", []),
            "over_cap": any(j["share"] > obj.fitted_on.get("max_judge_share", 1.0) + 1e-6
                            for j in obj.fitted_on.get("judges", [])),
            "active": AnswerabilityModel.objects.filter(active=True).first(), "may_accept": may_accept(request.user),
        }
        return TemplateResponse(request, "admin/search/answerabilitymodel/detail.html", context)

    def _post(self, request: HttpRequest) -> None:
        if request.method != "POST" or not may_accept(request.user):
            raise PermissionDenied

    def refit_view(self, request: HttpRequest) -> HttpResponseRedirect:
        """Refit from every verdict, or (the proposal's form) less those of the judges ticked to leave out."""
        self._post(request)
        try:
            proposal = refit_from_verdicts(user=request.user, leave_out=request.POST.getlist("leave_out"))
        except AnswerabilityError as exc:
            self.message_user(request, gettext("No refit: %(reason)s") % {"reason": exc}, messages.ERROR)
            return HttpResponseRedirect(reverse("admin:search_answerabilitymodel_changelist"))
        left_out = proposal.fitted_on.get("left_out") or []
        if left_out:
            note = gettext("%(model)s proposed without the verdicts of %(judges)s; nothing changes until you accept it")
        else:
            note = gettext("%(model)s proposed; nothing changes until you accept it")
        self.message_user(request, note % {"model": proposal, "judges": ", ".join(left_out)})
        return HttpResponseRedirect(reverse("admin:search_answerabilitymodel_change", args=[proposal.pk]))

    def accept_view(self, request: HttpRequest, pk: int) -> HttpResponseRedirect:
        self._post(request)
        try:
            accepted = model_accept(pk=pk, user=request.user)
        except AnswerabilityError as exc:
            self.message_user(request, str(exc), messages.ERROR)
        else:
            self.message_user(request, gettext("%(model)s now decides answer or refuse") % {"model": accepted})
        return HttpResponseRedirect(reverse("admin:search_answerabilitymodel_changelist"))

    def revert_view(self, request: HttpRequest) -> HttpResponseRedirect:
        self._post(request)
        try:
            restored = model_revert(user=request.user)
        except AnswerabilityError as exc:
            self.message_user(request, str(exc), messages.ERROR)
        else:
            self.message_user(request, gettext("Reverted: %(model)s decides answer or refuse")
                              % {"model": restored or gettext("the settings’ model")})
        return HttpResponseRedirect(reverse("admin:search_answerabilitymodel_changelist"))


def _viewer_link(document_id: int, start: int, end: int) -> str:
    return f"/documents/{document_id}/#char={start},{end}"


def _when(moment: Any) -> str:
    when = timezone.localtime(moment)
    return format_html('<span title="{}">{}</span>', date_format(when, "DATETIME_FORMAT"),
                       date_format(when, "SHORT_DATE_FORMAT"))


class AdjustmentStateFilter(admin.SimpleListFilter):
    title = gettext_lazy("state")
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("active", gettext_lazy("In force")), ("revoked", gettext_lazy("Revoked"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() in ("active", "revoked"):
            return queryset.filter(revoked_at__isnull=self.value() == "active")
        return queryset


class AdjustmentForm(forms.ModelForm):
    """A new boost or hide: the document (among those the staff member may read), the whole of it or one passage
    (chosen from its passages, or a passage link pasted from the viewer), what to do and why. The passages are
    those of the document chosen: picking a document reloads the form with them (search/adjustment.js)."""

    document = forms.ModelChoiceField(queryset=Document.objects.none(), label=gettext_lazy("Document"), required=False)
    passage = forms.ChoiceField(label=gettext_lazy("Passage"), required=False,
                                help_text=gettext_lazy("The whole document, or one of its passages"))
    link = forms.CharField(label=gettext_lazy("Or a passage link from the viewer"), required=False, max_length=300,
                           help_text=gettext_lazy("Select text in the document viewer and copy the address, "
                                                  "such as /documents/12/#char=340,512"))
    action = forms.ChoiceField(label=gettext_lazy("What to do"), widget=forms.RadioSelect, choices=[
        (RetrievalAdjustment.Action.HIDE, gettext_lazy("Hide: never offered as a source or quoted in answers")),
        (RetrievalAdjustment.Action.BOOST, gettext_lazy("Boost: put ahead of passages that match about as well"))])
    reason = forms.CharField(label=gettext_lazy("Why"), max_length=500, widget=forms.Textarea(attrs={"rows": 3}),
                             help_text=gettext_lazy("Shown to the staff who come after you, e.g. “2019 manual, "
                                                    "replaced by the 2024 one”"))

    class Meta:
        model = RetrievalAdjustment
        fields = ("document", "action", "reason")

    user: Any = None  # set by the admin's get_form

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        documents = adjustable_documents(self.user).only("pk", "title", "filename").order_by("title", "pk")
        document_field: Any = self.fields["document"]
        document_field.queryset = documents
        document_field.widget.attrs["data-adjustment-document"] = ""
        chosen = str((self.data.get("document") if self.is_bound else self.initial.get("document")) or "")
        passages: list[tuple[str, str]] = [("", gettext("The whole document"))]
        if chosen.isdigit() and documents.filter(pk=int(chosen)).exists():
            passages += [(p.stable_id, f"{p.start}–{p.end}: {p.excerpt}") for p in document_passages(int(chosen))]
        passage_field: Any = self.fields["passage"]
        passage_field.choices = passages

    def clean(self) -> dict[str, Any]:
        """Resolve the passage as the service will (search.adjustments.adjustment_target); a link names its document."""
        data: dict[str, Any] = super().clean() or {}
        document, link = data.get("document"), (data.get("link") or "").strip()
        try:
            if link:
                linked, start, end = passage_from_link(link)
                if document is not None and document.pk != linked:
                    raise AdjustmentError(gettext("The link is to another document than the one chosen."))
                found, stable_id = adjustment_target(user=self.user, document_id=linked, start=start, end=end)
                data["document"] = found
            elif document is not None:
                found, stable_id = adjustment_target(user=self.user, document_id=document.pk,
                                                     stable_id=data.get("passage") or "")
            elif "document" in self.errors:
                return data
            else:
                raise AdjustmentError(gettext("Choose a document, or paste a passage link from the viewer."))
        except AdjustmentError as exc:
            raise forms.ValidationError(str(exc)) from None
        data["stable_id"] = stable_id
        return data


@admin.register(RetrievalAdjustment)
class RetrievalAdjustmentAdmin(admin.ModelAdmin):
    """Boosts and hides, newest first, on documents the staff member may read (superusers: all): added through the
    form (search.adjustments.adjustment_add), taken back with Revoke, never edited; the rows stay as the log.
    Seeing them needs the view or change permission, adding the add one, revoking the change one."""

    form = AdjustmentForm
    list_display = ("document_column", "passage_column", "action", "reason_column", "by_column", "created_column",
                    "state_column")
    list_display_links = ("action",)
    list_filter = (AdjustmentStateFilter, "action")
    search_fields = ("reason", "document__title")
    actions = ("revoke",)
    detail_fields = ("document_column", "passage_column", "action", "reason", "by_column", "created_column",
                     "state_column")

    class Media:
        css = {"all": ("kb/admin.css",)}
        js = ("search/adjustment.js",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[RetrievalAdjustment]:
        return adjustments_visible(request.user)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._may(request, VIEW, obj) or self._may(request, REVOKE, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return staff_may(request.user, ADD)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a decision is revoked and made again, never edited

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return staff_may(request.user, REVOKE)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)  # the log stays; only a superuser may remove a row

    def _may(self, request: HttpRequest, permission: str, obj: Any) -> bool:
        if not staff_may(request.user, permission):
            return False
        return obj is None or self.get_queryset(request).filter(pk=obj.pk).exists()

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)
        return type(form.__name__, (form,), {"user": request.user})

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = self.detail_fields if obj is not None else ("document", "passage", "link", "action", "reason")
        return [(None, {"fields": fields})]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.detail_fields if obj is not None else ()

    def save_model(self, request: HttpRequest, obj: RetrievalAdjustment, form: Any, change: bool) -> None:
        """Through the service, which revokes the adjustment this one replaces."""
        data = form.cleaned_data
        made = adjustment_add(user=request.user, document_id=data["document"].pk, action=data["action"],
                              reason=data["reason"], stable_id=data["stable_id"])
        obj.pk = made.pk
        obj.refresh_from_db()

    @admin.display(description=gettext_lazy("Document"), ordering="document__title")
    def document_column(self, obj: RetrievalAdjustment) -> str:
        title = str(obj.document)
        return format_html('<a class="kb-cut" href="/documents/{}/" title="{}">{}</a>', obj.document_id, title, title)

    @admin.display(description=gettext_lazy("Passage"))
    def passage_column(self, obj: RetrievalAdjustment) -> str:
        if not obj.stable_id:
            return gettext("The whole document")
        excerpt = getattr(obj, "passage_excerpt", None)
        if excerpt is None:
            return gettext("A passage no longer in the document (its text changed)")
        excerpt = " ".join(excerpt.split())
        link = _viewer_link(obj.document_id, obj.passage_start, obj.passage_end)  # type: ignore[attr-defined]
        return format_html('<a class="kb-cut" href="{}" title="{}">{}</a>', link, excerpt, excerpt)

    @admin.display(description=gettext_lazy("By"), ordering="created_by__username")
    def by_column(self, obj: RetrievalAdjustment) -> str:
        return str(obj.created_by or gettext("someone since removed"))

    @admin.display(description=gettext_lazy("Why"))
    def reason_column(self, obj: RetrievalAdjustment) -> str:
        return format_html('<div class="kb-reason" title="{}">{}</div>', obj.reason, obj.reason)

    @admin.display(description=gettext_lazy("When"), ordering="created_at")
    def created_column(self, obj: RetrievalAdjustment) -> str:
        return _when(obj.created_at)

    @admin.display(description=gettext_lazy("State"), ordering="revoked_at")
    def state_column(self, obj: RetrievalAdjustment) -> str:
        if obj.revoked_at is None:
            return gettext("In force")
        return gettext("Revoked by %(who)s on %(when)s") % {
            "who": obj.revoked_by or gettext("someone since removed"),
            "when": date_format(timezone.localtime(obj.revoked_at), "SHORT_DATE_FORMAT")}

    @admin.action(description=gettext_lazy("Revoke the selected boosts and hides"), permissions=["revoke"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[RetrievalAdjustment]) -> None:
        revoked = 0
        for pk in queryset.filter(revoked_at__isnull=True).values_list("pk", flat=True):
            adjustment_revoke(user=request.user, adjustment_id=pk)
            revoked += 1
        self.message_user(request, ngettext("Revoked %(n)d boost or hide; retrieval ranks as before",
                                            "Revoked %(n)d boosts and hides; retrieval ranks as before", revoked)
                          % {"n": revoked})


@admin.register(RememberedQuestion)
class RememberedQuestionAdmin(RecordAdminMixin, admin.ModelAdmin):
    """Questions a verdict tied to the passage that answered them (search.memory), read by staff holding
    search.view_rememberedquestion, and only those whose passage they may read (the passage's own access,
    as retrieval reads it; superusers: all). Forget removes one (search.delete_rememberedquestion)."""

    list_display = ("question", "passage_column", "kind", "judge", "created_column")
    list_display_links = ("question",)
    list_filter = ("kind",)
    search_fields = ("question",)
    fields = ("question", "passage_column", "kind", "judge", "created_column")
    readonly_fields = fields
    actions = ("forget",)

    class Media:
        css = {"all": ("kb/admin.css",)}

    def get_queryset(self, request: HttpRequest) -> QuerySet[RememberedQuestion]:
        user = request.user
        passages = Chunk.objects.filter(document_id=OuterRef("document_id"), stable_id=OuterRef("stable_id"))
        rows = RememberedQuestion.objects.select_related("judge", "document").defer(
            "embedding", "document__canonical_text", "document__pages", "document__headings")
        if not user.is_superuser:
            passages = passages.filter(readable_filter(user))
            rows = rows.filter(Exists(passages))
        first = passages.order_by("ordinal")
        return rows.annotate(passage_excerpt=Subquery(first.annotate(excerpt=Substr("content", 1, EXCERPT))
                                                      .values("excerpt")[:1]),
                             passage_start=Subquery(first.values("start")[:1]),
                             passage_end=Subquery(first.values("end")[:1]))

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return staff_may(request.user, "search.view_rememberedquestion") and (
            obj is None or self.get_queryset(request).filter(pk=obj.pk).exists())

    def has_forget_permission(self, request: HttpRequest) -> bool:
        return staff_may(request.user, "search.delete_rememberedquestion")

    def get_actions(self, request: HttpRequest) -> Any:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    @admin.display(description=gettext_lazy("Passage it answers"))
    def passage_column(self, obj: RememberedQuestion) -> str:
        if obj.passage_start is None:  # type: ignore[attr-defined]
            return gettext("A passage no longer in the document")
        start = obj.passage_start + (obj.span_start or 0)  # type: ignore[attr-defined]
        end = obj.passage_start + obj.span_end if obj.span_end is not None else obj.passage_end  # type: ignore[attr-defined]
        excerpt = " ".join(obj.passage_excerpt.split())  # type: ignore[attr-defined]
        return format_html('<a href="{}" title="{}">{}</a><small class="kb-filename">{}</small>',
                           _viewer_link(obj.document_id, start, end), excerpt, excerpt, str(obj.document))

    @admin.display(description=gettext_lazy("When"), ordering="created_at")
    def created_column(self, obj: RememberedQuestion) -> str:
        return _when(obj.created_at)

    @admin.action(description=gettext_lazy("Forget the selected questions"), permissions=["forget"])
    def forget(self, request: HttpRequest, queryset: QuerySet[RememberedQuestion]) -> None:
        n = forget(ids=list(queryset.values_list("pk", flat=True)))
        self.message_user(request, ngettext("Forgot %(n)d question: retrieval no longer matches it",
                                            "Forgot %(n)d questions: retrieval no longer matches them", n) % {"n": n})
