"""search's part of the admin: the document list (kb.library.admin) names the reranker and late
interaction that queries use now, next to the index version; and the answerability models
refitted from this deployment's verdicts, which an admin reads, accepts and reverts here."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.translation import gettext, gettext_lazy

from kb.library.access import staff_may
from kb.library.admin import RecordAdminMixin, index_note_register
from search import late, rerank
from search.answerability import (
    AnswerabilityError,
    may_accept,
    model_accept,
    model_revert,
    refit_from_verdicts,
)
from search.models import AnswerabilityModel

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
