"""Answer/refuse models fitted for this deployment (issue 29 item 3): a refit from its verdicts is stored
as a proposal, serves only once an admin accepts it, and the model it replaced stays one revert away."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class AnswerabilityModel(models.Model):
    """One fitted model, its version the primary key. At most one is active (a partial unique index, which
    is also what search reads on every question); with none active the settings' model decides."""

    model = models.JSONField(help_text="The model as search.answerability.model_from_json reads it")
    fitted_on = models.JSONField(default=dict, blank=True,
                                 help_text="Verdicts, questions and prior samples (and the prior's weight) it was fitted on")
    candidates = models.JSONField(default=list, blank=True,
                                  help_text="Each candidate's cross-validated figures on the verdicts, the chosen one first")
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    # What served before this one was accepted (None: the settings' model): a revert activates it again.
    previous = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    reverted_at = models.DateTimeField(null=True, blank=True)
    reverted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    active = models.BooleanField(default=False)

    class Meta:
        ordering = ["-pk"]
        verbose_name = "answerability model"
        constraints = [models.UniqueConstraint(fields=["active"], condition=models.Q(active=True),
                                               name="search_answerability_one_active")]
        permissions = [("accept_answerabilitymodel", "Can accept or revert the answerability model")]

    def __str__(self) -> str:
        return f"Answerability model v{self.pk}"

    @property
    def state(self) -> str:
        if self.active:
            return "active"
        if self.reverted_at:
            return "reverted"
        return "retired" if self.accepted_at else "proposed"
