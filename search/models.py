"""What this deployment's use teaches retrieval: answer/refuse models fitted from its verdicts, questions remembered
for the passages that answered them, and staff's boosts and hides."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _
from pgvector.django import VectorField

from kb.library.models import EMBEDDING_DIMENSIONS


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


class RememberedQuestion(models.Model):
    """A question a verdict tied to the passage that answers it (search.memory): searched as one more candidate
    list of retrieval, under the passage's own access in the SQL (a join on the passage, like chunks), so it only
    ever helps someone who may read the passage. The passage is its document's chunk with `stable_id`: the same
    across re-indexing while its text is unchanged, gone (and the question with it) once the text changes."""

    class Kind(models.TextChoices):
        HELPFUL = "helpful", "Marked helpful"  # a judge marked the answer that cited the passage helpful
        CONFIRMED = "confirmed", "Citation confirmed"  # support confirmed the answer's citation of the passage
        LINKED = "linked", "Linked by a judge"  # "should have answered", with the passage picked in the viewer

    document = models.ForeignKey("kb.Document", on_delete=models.CASCADE, related_name="+")
    stable_id = models.CharField(max_length=40, help_text="The passage: its chunk's stable id (kb.Chunk.stable_id)")
    # The part of the passage that answers (the judge's pick, or the sentence the answer quoted), as offsets from
    # the passage's start, so that it stays right when text before the passage changes; null: the whole passage.
    span_start = models.PositiveIntegerField(null=True, blank=True)
    span_end = models.PositiveIntegerField(null=True, blank=True)
    question = models.TextField()
    embedding = VectorField(dimensions=EMBEDDING_DIMENSIONS)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    # The verdict it came from (chat.Judgement or, for a confirmed citation, chat.Message): by id, since search sits
    # below chat; chat drops the question when that verdict is taken back or contradicted (search.memory).
    judgement_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    message_id = models.BigIntegerField(db_index=True, help_text="The answer the verdict was given on")
    judge = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name = _("remembered question")
        verbose_name_plural = _("remembered questions")
        indexes = [models.Index(fields=["document", "stable_id"], name="search_remembered_passage"),
                   models.Index(fields=["judge", "created_at"], name="search_remembered_judge")]
        constraints = [models.UniqueConstraint(fields=["message_id", "document", "stable_id"],
                                               name="search_remembered_message_passage")]

    def __str__(self) -> str:
        return self.question[:80]


class RetrievalAdjustment(models.Model):
    """Staff's boost or hide of a document or one of its passages for retrieval (search.adjustments): the reason,
    who and when are kept, and revoking one keeps the row as the log. Only what a user may read is ever ranked,
    so an adjustment changes order among readable passages and can reveal nothing."""

    class Action(models.TextChoices):
        BOOST = "boost", "Boost"
        HIDE = "hide", "Hide"

    document = models.ForeignKey("kb.Document", on_delete=models.CASCADE, related_name="+")
    stable_id = models.CharField(max_length=40, blank=True, default="",
                                 help_text="One passage (kb.Chunk.stable_id); empty: the whole document")
    action = models.CharField(max_length=8, choices=Action.choices)
    reason = models.CharField(max_length=500)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name = _("boost or hide")
        verbose_name_plural = _("boosts and hides")
        indexes = [models.Index(fields=["document", "stable_id"], condition=models.Q(revoked_at__isnull=True),
                                name="search_adjustment_active")]

    def __str__(self) -> str:
        return f"{self.get_action_display()} document {self.document_id}" + (" passage" if self.stable_id else "")

    @property
    def active(self) -> bool:
        return self.revoked_at is None
