"""Conversations, their messages, the citations the server attached, reviewers' feedback and people's judgements."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils.translation import gettext_lazy as _
from pgvector.django import VectorField

from kb.library.models import EMBEDDING_DIMENSIONS


class Conversation(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations")
    title = models.CharField(max_length=200, blank=True, help_text="The first question, shortened")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at", "-pk"]
        indexes = [models.Index(fields=["owner", "-updated_at"], name="chat_conv_owner_recent")]

    def __str__(self) -> str:
        return self.title or f"Conversation {self.pk}"

    @property
    def group(self) -> str:
        """The channel-layer group its events go to."""
        return f"chat.{self.pk}"


class Message(models.Model):
    class Role(models.TextChoices):
        USER = "user"
        ASSISTANT = "assistant"

    class Status(models.TextChoices):
        PENDING = "pending"  # queued for a worker
        RUNNING = "running"  # retrieving or generating; `text` grows as tokens arrive
        DONE = "done"
        REFUSED = "refused"  # NO ANSWER: no backend was called
        FAILED = "failed"

    FINISHED = (Status.DONE, Status.REFUSED, Status.FAILED)

    class Verdict(models.TextChoices):
        """A reviewer's verdict on one of the answer's unsupported claims."""

        OPEN = "open"
        CONFIRMED = "confirmed"
        DISMISSED = "dismissed"

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="messages")
    role = models.CharField(max_length=16, choices=Role.choices)
    question = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="answers",
        help_text="For an answer: the user's message it answers",
    )
    text = models.TextField(blank=True, help_text="The question, or the answer as far as it has been produced")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.DONE, db_index=True)
    intent = models.CharField(max_length=16, blank=True)
    refusal_reason = models.TextField(blank=True)
    error = models.TextField(blank=True)
    backend = models.CharField(max_length=40, blank=True)
    model = models.CharField(max_length=200, blank=True)
    notice = models.CharField(max_length=300, blank=True, help_text="Shown with the answer, e.g. a small model's caveat")
    match = models.CharField(max_length=16, blank=True,
                             help_text="How well the answer matches its question (chat.match): quoted, closest, or curated")
    # The curated answer it served (chat.review.curated), if it was one.
    curated = models.ForeignKey("chat.CuratedAnswer", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="served")
    # Every document handed to the generator, cited or not: the answer may draw on any of them,
    # so it is shown only to readers who may read them all (chat.selectors).
    source_documents = ArrayField(models.BigIntegerField(), default=list, blank=True)
    # chat.claim_support's verdict on the finished answer: the cited sentences their quotes do not back, each
    # with the reviewer's "verdict" (open, confirmed, dismissed); open ones put the answer first on the review desk.
    unsupported = models.JSONField(default=list, blank=True)
    nearest_distance = models.FloatField(null=True, blank=True)
    threshold = models.FloatField(null=True, blank=True)
    # What retrieval saw (search.answerability.Signals as JSON) and the question's embedding: the features a
    # refit from this deployment's verdicts uses, and what content gaps group questions by. Staff-only, like
    # refusal_reason: the nearest distance says how close a readable passage came.
    signals = models.JSONField(default=dict, blank=True)
    query_vector = VectorField(dimensions=EMBEDDING_DIMENSIONS, null=True, blank=True)
    retrieval_ms = models.FloatField(null=True, blank=True)
    first_token_ms = models.FloatField(null=True, blank=True)
    total_ms = models.FloatField(null=True, blank=True)
    # A queued job names the row it may claim by this too: a stale queue entry (a test
    # database recreated, a restored backup) never answers somebody else's question.
    job_id = models.UUIDField(default=uuid.uuid4, editable=False)
    # The asker's thumbs (up 1, down -1, none 0): the sign of their Judgement's kind, kept for the lists
    # and the admin; reviewers' flags on citations are Feedback.
    rating = models.SmallIntegerField(default=0, choices=[(1, "helpful"), (0, "not rated"), (-1, "not helpful")])
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The Celery worker (its node name) that claimed the answer: when that worker is started again after it
    # died (the launcher restarts it under the same name), it fails what it was producing at once.
    worker = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        ordering = ["conversation_id", "pk"]
        indexes = [models.Index(fields=["role", "-created_at"], name="chat_msg_role_recent")]
        # Declared, so that Django's post_migrate creates it wherever a table was emptied (chat 0009 first made it)
        permissions = [("view_contentgaps", "Can view content gaps")]

    def __str__(self) -> str:
        return f"{self.role} #{self.pk}"

    @property
    def refused(self) -> bool:
        return self.status == self.Status.REFUSED

    @property
    def finished(self) -> bool:
        return self.status in self.FINISHED


class Citation(models.Model):
    """Source [number] of an answer, as the server attached it: the model only wrote the number."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="citations")
    number = models.PositiveSmallIntegerField()
    # Re-indexing replaces chunks and deleting a document removes them; the quote and
    # locator stay, and a citation whose document is gone is shown to nobody.
    chunk = models.ForeignKey("kb.Chunk", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    document = models.ForeignKey("kb.Document", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    document_title = models.CharField(max_length=300)
    label = models.CharField(max_length=1000, help_text="Locator label: the section's breadcrumb")
    link = models.CharField(max_length=300)
    quote = models.TextField(help_text="Exactly the cited source text: canonical_text[start:end]")
    start = models.PositiveIntegerField()
    end = models.PositiveIntegerField()
    page = models.PositiveIntegerField(null=True, blank=True)
    parts = models.PositiveSmallIntegerField(default=1, help_text="Parts of a split section reassembled into this source")
    distance = models.FloatField()

    class Meta:
        ordering = ["message_id", "number"]
        constraints = [models.UniqueConstraint(fields=["message", "number"], name="chat_citation_message_number")]

    def __str__(self) -> str:
        return f"[{self.number}] {self.label}"


class Feedback(models.Model):
    """A reviewer's flag on an answer, or on one of its citations (or their confirmation of a citation)."""

    class Kind(models.TextChoices):
        RIGHT_SOURCE = "right_source", "Right source"  # support confirms the citation: its question is remembered
        WRONG_SOURCE = "wrong_source", "Wrong source"
        UNSUPPORTED = "unsupported", "Unsupported claim"
        OUTDATED = "outdated", "Outdated"

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="feedback")
    citation = models.ForeignKey(Citation, null=True, blank=True, on_delete=models.CASCADE, related_name="feedback")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name = _("citation flag")
        verbose_name_plural = _("citation flags")

    def __str__(self) -> str:
        return f"{self.get_kind_display()} on message {self.message_id}"


class Judgement(models.Model):
    """One person's verdict on one answer: the asker's own, or a support reviewer's. The verdicts of a
    deployment are its own evaluation set (chat.review.evalset, `manage.py export_judgements`)."""

    class Kind(models.TextChoices):
        HELPFUL = "helpful", "Helpful"  # on a refusal: right to refuse
        WRONG = "wrong", "Wrong"
        SHOULD_REFUSE = "should_refuse", "Should have refused"
        SHOULD_ANSWER = "should_answer", "Should have answered"

    class Role(models.TextChoices):
        ASKER = "asker"
        REVIEWER = "reviewer"

    class Reason(models.TextChoices):
        """The reason chip with an asker's thumbs down (the Ask page): chat.review.judgements.REASON_KIND maps each onto
        the kind it is stored as; two share "wrong", so the reason is kept beside it."""

        OFF_TOPIC = "off_topic", "Doesn't answer my question"
        WRONG_OR_OUTDATED = "wrong_or_outdated", "Wrong or outdated"
        SHOULD_REFUSE = "should_refuse", "Should have said it doesn't know"
        SHOULD_ANSWER = "should_answer", "The documents do answer this"

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="judgements")
    # A judge who leaves keeps their verdict as data, unnamed (as Feedback.reviewer).
    judge = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    role = models.CharField(max_length=16, choices=Role.choices)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    document = models.ForeignKey(
        "kb.Document", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="Should have answered (or wrong): the document that answers the question",
    )
    # Should have answered (or wrong), with the passage picked in the viewer: the document's range the judge selected, and the
    # passage (kb.Chunk.stable_id) it lies in; the question is then remembered for that passage (search.memory).
    passage = models.CharField(max_length=40, blank=True, default="",
                               help_text="The passage that answers the question (kb.Chunk.stable_id)")
    start = models.PositiveIntegerField(null=True, blank=True)
    end = models.PositiveIntegerField(null=True, blank=True)
    reason = models.CharField(max_length=20, choices=Reason.choices, blank=True, default="",
                              help_text="The asker's reason chip with a thumbs down; empty for any other verdict")
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["message_id", "created_at", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["message", "judge"], name="chat_judgement_message_judge"),
            models.CheckConstraint(condition=models.Q(document__isnull=True) | models.Q(kind__in=["should_answer", "wrong"]),
                                   name="chat_judgement_document_should_answer"),
            models.CheckConstraint(condition=models.Q(passage="") | models.Q(document__isnull=False),
                                   name="chat_judgement_passage_document"),
        ]
        permissions = [("export_judgement", "Can export judgements as an evaluation set")]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} on message {self.message_id}"


class ReviewGrant(models.Model):
    """Lets one support reviewer see in full, on the review desk only, the answers of a group or a folder: those
    all of whose sources the group may read, or that lie in the folder and take its access (chat.selectors'
    review scope). Nothing else opens to them; deleting the grant revokes it from the next request on."""

    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="review_grants",
                                 help_text="A member of the review group (KB_REVIEW_GROUP)")
    group = models.ForeignKey("auth.Group", null=True, blank=True, on_delete=models.CASCADE, related_name="+",
                              help_text="Answers all of whose sources this group may read")
    folder = models.ForeignKey("kb.Folder", null=True, blank=True, on_delete=models.CASCADE, related_name="+",
                               help_text="Answers all of whose sources lie in this folder and take its access")
    # Who gave it stays on record after they leave, unnamed (as Feedback.reviewer).
    granted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    note = models.CharField(max_length=300, blank=True, help_text="Why: a ticket, a project")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["reviewer_id", "pk"]
        constraints = [
            models.CheckConstraint(condition=models.Q(group__isnull=True) ^ models.Q(folder__isnull=True),
                                   name="chat_reviewgrant_group_xor_folder"),
            models.UniqueConstraint(fields=["reviewer", "group"], name="chat_reviewgrant_reviewer_group"),
            models.UniqueConstraint(fields=["reviewer", "folder"], name="chat_reviewgrant_reviewer_folder"),
        ]

    def __str__(self) -> str:
        return f"{self.reviewer} reviews {self.scope}"

    @property
    def scope(self) -> str:
        return f"group {self.group}" if self.group_id else f"folder {self.folder}"


class ReviewAccess(models.Model):
    """The access log: one row each time the review desk showed a reviewer an answer they could not read on their
    own, through a ReviewGrant. Written by chat.selectors, read by superusers only (the admin, its CSV export)."""

    class Surface(models.TextChoices):
        REVIEW_PAGE = "review_page", "Review page"
        REVIEW_API = "review_api", "Review API"
        REVIEW_CONVERSATION = "review_conversation", "Review conversation (replay)"

    # Kept by name and number: the log outlives the reviewer's account and the answer.
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    reviewer_name = models.CharField(max_length=150)
    answer = models.BigIntegerField(db_index=True, help_text="The answer's id (chat.Message)")
    surface = models.CharField(max_length=32, choices=Surface.choices)
    grants = models.CharField(max_length=1000, help_text="The grants it was shown through")
    at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-at", "-pk"]
        verbose_name = "review access log entry"
        verbose_name_plural = "review access log"

    def __str__(self) -> str:
        return f"{self.reviewer_name} read answer {self.answer} ({self.get_surface_display()})"


class CuratedAnswer(models.Model):
    """Support's answer to a recurring question, written once (chat.review.curated): text whose claims cite passages
    (CuratedCitation), plus the example questions it answers (CuratedQuestion). A later question close to an example
    gets it, only when the asker may read every cited passage at that moment; a cited passage that changes or
    disappears makes it stale, and it is not served until approved again."""

    class State(models.TextChoices):
        DRAFT = "draft", _("Draft")
        APPROVED = "approved", _("Approved")
        STALE = "stale", _("Stale: a cited passage changed")

    text = models.TextField(help_text="The answer; each claim cites a passage as [n]")
    # Support's own statement, shown apart from the quotes ("The data file cannot have two-factor authentication"):
    # what the documents do not say, said by support.
    statement = models.TextField(blank=True, default="")
    state = models.CharField(max_length=16, choices=State.choices, default=State.DRAFT, db_index=True)
    stale_reason = models.CharField(max_length=500, blank=True, default="")
    # Where it was written from: an answer on the review desk, or a content-gap topic's label.
    from_message = models.ForeignKey(Message, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    from_topic = models.CharField(max_length=300, blank=True, default="")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    approved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    approved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-updated_at", "-pk"]
        verbose_name = _("curated answer")
        verbose_name_plural = _("curated answers")
        permissions = [("curate_answer", "Can write and approve curated answers")]

    def __str__(self) -> str:
        return self.text[:80]


class CuratedCitation(models.Model):
    """Passage [number] of a curated answer: its document's chunk with `stable_id` (unchanged while the passage's
    text is), with the quoted range of the document as it was approved."""

    answer = models.ForeignKey(CuratedAnswer, on_delete=models.CASCADE, related_name="citations")
    number = models.PositiveSmallIntegerField()
    document = models.ForeignKey("kb.Document", null=True, on_delete=models.SET_NULL, related_name="+")
    stable_id = models.CharField(max_length=40)
    start = models.PositiveIntegerField()
    end = models.PositiveIntegerField()
    quote = models.TextField(help_text="Exactly the document's text at [start:end] when approved")

    class Meta:
        ordering = ["answer_id", "number"]
        verbose_name = _("cited passage")
        verbose_name_plural = _("cited passages")
        constraints = [models.UniqueConstraint(fields=["answer", "number"], name="chat_curatedcitation_answer_number")]

    def __str__(self) -> str:
        return f"[{self.number}] of curated answer {self.answer_id}"


class CuratedQuestion(models.Model):
    """One example question a curated answer answers, embedded: later questions are matched against these."""

    answer = models.ForeignKey(CuratedAnswer, on_delete=models.CASCADE, related_name="questions")
    text = models.CharField(max_length=1000)
    embedding = VectorField(dimensions=EMBEDDING_DIMENSIONS)

    class Meta:
        ordering = ["answer_id", "pk"]
        verbose_name = _("example question")
        verbose_name_plural = _("example questions")

    def __str__(self) -> str:
        return self.text[:80]
