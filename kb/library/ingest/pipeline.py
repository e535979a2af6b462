"""Extract → chunk → embed → index for one document, with a visible status at each stage.

Chunks are written in one transaction at the end (indexing.replace_chunks), so a
worker killed anywhere before that leaves the previous chunks (or none) searchable and
the document retryable; it is never half-indexed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from functools import partial

import numpy as np
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from kb.library.events import publish_document_status
from kb.library.ingest import bounded, chunking, extract, headings, indexing
from kb.library.ingest.version import current_index_version
from kb.library.models import Chunk, Document, filename_title
from kb.library.services import DOCUMENT_LEASE
from kb.text import classify, embedding, language, multilingual, tokens
from kb.text import pieces as pieces_format
from kb.text.tokens import counting_time

log = logging.getLogger(__name__)

# Timed stages, in pipeline order (Document.stage_seconds; "tokens" is the token counting done while chunking).
STAGES = ("extract", "chunk", "tokens", "classify", "embed", "write")
PROGRESS_EVERY = 128  # chunks per progress report while embedding (about 2 s of work here)


class StageFailed(Exception):
    """A document-specific failure; its message is shown to admins as the reason."""


def _claim(document_id: int, worker: str) -> bool:
    """Take the document for `worker` (a Celery node name, or blank). False when another worker holds it or it is done."""
    claimable = Q(status__in=[Document.Status.QUEUED, Document.Status.FAILED]) | DOCUMENT_LEASE.lapsed(timezone.now())
    return bool(
        Document.objects.filter(claimable, pk=document_id).update(
            status=Document.Status.EXTRACTING,
            worker=worker,
            attempts=F("attempts") + 1,
            failed_stage="",
            failure_reason="",
            updated_at=timezone.now(),
        )
    )


def _current(document_id: int, version: int) -> QuerySet[Document]:
    """The row while it is still the version this run works on: every status write goes
    through it, so a run overtaken by a newer upload writes nothing (0 rows)."""
    return Document.objects.filter(pk=document_id, version=version)


def _enter(document_id: int, version: int, status: str) -> None:
    _current(document_id, version).update(status=status, updated_at=timezone.now())
    publish_document_status(document_id)


def _status(document_id: int) -> str:
    return str(Document.objects.filter(pk=document_id).values_list("status", flat=True).first() or "missing")


def ingest(document_id: int, *, worker: str = "") -> str:
    """Index one document; returns its final status. Safe to call twice (the second call is a no-op).
    `worker`: the Celery node running it, whose heartbeat vouches for the claim (kb.upkeep)."""
    if not _claim(document_id, worker):
        return _status(document_id)
    publish_document_status(document_id)
    # The file and the version come from one read of the row, so they always belong together.
    document = Document.objects.get(pk=document_id)
    version = document.version
    stage = Document.Status.EXTRACTING
    clock = _Stopwatch()
    try:
        with document.file.open("rb") as handle:
            data = handle.read()
        extracted = bounded.extract(
            data=data, mime=document.mime_type, filename=document.filename, ocr=settings.KB_OCR_ENABLED,
            ocr_max_pixels=settings.KB_OCR_MAX_PIXELS, cpu_seconds=settings.KB_EXTRACT_CPU_SECONDS,
            memory_mb=settings.KB_EXTRACT_MEMORY_MB, on_ocr_page=partial(_ocr_progress, document_id, version),
        )
        del data
        if len(extracted.text) > extract.MAX_TEXT_CHARS:
            raise StageFailed(f"the text is {len(extracted.text):,} characters long; at most "
                              f"{extract.MAX_TEXT_CHARS:,} are indexed (split the document)")
        if not extracted.text.strip():
            raise StageFailed("no text could be extracted" + (f" ({'; '.join(extracted.warnings)})" if extracted.warnings else ""))
        title = document.title or extracted.title or filename_title(document.filename)
        shown_headings = headings.locate(text=extracted.text, mime=document.mime_type)
        clock.lap("extract")

        stage = Document.Status.CHUNKING
        _enter(document_id, version, stage)
        # Detected once, before chunking and outside the write's transaction: the chunk budget, the multilingual
        # pass and the stored languages read it.
        detected = language.document_language(extracted.text)
        with counting_time() as counting:
            drafts = chunking.split(extracted, title=title, count=_budget_counter(document, detected))
        clock.lap("chunk", within={"tokens": counting[0]})
        if not drafts:
            raise StageFailed("the document has no text to index")
        default = document.audience_default or None
        audiences = [classify.classify_chunk(text=draft.text, default=default) for draft in drafts]
        clock.lap("classify")

        stage = Document.Status.EMBEDDING
        texts = [draft.text for draft in drafts]
        kept = _previous_vectors(document, set(texts))
        todo = sorted({text for text in texts if text not in kept})
        chunks_detected = language.chunk_languages([draft.content for draft in drafts], detected)
        foreign = _multilingual_texts(document, drafts, chunks_detected)
        todo_foreign = sorted(text for text in foreign if text not in kept or kept[text][2] is None)
        _current(document_id, version).update(progress_done=0, progress_total=len(todo) + len(todo_foreign))
        _enter(document_id, version, stage)
        if todo:
            fresh = zip(todo, *_embed_with_progress(document_id, version, todo), strict=True)
            kept.update((text, (vector, late, None)) for text, vector, late in fresh)
        began = time.perf_counter()
        for text, other in zip(todo_foreign, _embed_multilingual(document_id, version, todo_foreign, len(todo)),
                               strict=True):
            kept[text] = (*kept[text][:2], other)
        spent = time.perf_counter() - began
        vectors = np.stack([kept[text][0] for text in texts])
        clock.lap("embed", within={"embed_multilingual": spent} if todo_foreign else None)

        indexing.replace_chunks(
            document=document, title=title, extracted=extracted, headings=shown_headings, drafts=drafts,
            audiences=audiences, vectors=vectors, version=version, late=[kept[text][1] for text in texts],
            multilingual=[kept[text][2] for text in texts], detected=detected, chunks_detected=chunks_detected,
        )
        clock.lap("write")
        _current(document_id, version).update(stage_seconds=clock.seconds, chunks_reused=len(texts) - len(todo))
        publish_document_status(document_id)
        return Document.Status.READY
    except indexing.Superseded:
        log.info("document %s was uploaded again while version %s was indexed; that run was dropped", document_id, version)
        return _status(document_id)
    except (extract.ExtractionError, extract.UnsupportedFile, StageFailed) as exc:
        _fail(document_id, version, stage, str(exc))
    except SoftTimeLimitExceeded:
        _fail(document_id, version, stage, f"took longer than {settings.KB_INGEST_TIME_LIMIT} s (KB_INGEST_TIME_LIMIT)")
    except FileNotFoundError:
        _fail(document_id, version, stage, "the stored file is missing; upload it again")
    except Exception as exc:  # one bad document must never stop the others: record and go on
        log.exception("ingesting document %s failed in %s", document_id, stage)
        _fail(document_id, version, stage, f"internal error: {type(exc).__name__}: {exc}")
    return _status(document_id)


def _ocr_progress(document_id: int, version: int, done: int, total: int) -> None:
    """A long scan must not look abandoned: each OCR page renews the lease and shows n/m."""
    _current(document_id, version).update(progress_done=done, progress_total=total, updated_at=timezone.now())
    publish_document_status(document_id)


class _Stopwatch:
    """Seconds per stage, stored on the document: where a slow document's time went, visible in the admin."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, stage: str, within: dict[str, float] | None = None) -> None:
        """Close `stage`; `within` names parts of it measured separately (they are subtracted from it)."""
        now = time.perf_counter()
        parts = within or {}
        self.seconds[stage] = round(now - self._last - sum(parts.values()), 3)
        self.seconds.update({name: round(value, 3) for name, value in parts.items()})
        self._last = now


def _budget_counter(document: Document, detected: str) -> chunking.Count:
    """How the chunk budget is counted: in the tokens of the models that embed the document's chunks. An English
    chunk: MiniLM's word pieces. A chunk of the multilingual space: e5's tokens within the budget and, since MiniLM
    reads it too (its word pieces serve the answer's sentence scoring), MiniLM's within its whole window. Budgeted
    in MiniLM's pieces alone, which cut Cyrillic and CJK almost letter by letter, a Russian chunk held ~150
    characters and cut long sentences in two (docs/INGESTION.md)."""
    code = document.language if document.language_fixed and document.language else detected
    return _both_windows if multilingual.embeds(code) else tokens.count_tokens


def _both_windows(text: str) -> int:
    """e5's tokens, or MiniLM's less the margin its budget keeps under its window, whichever is more."""
    return max(multilingual.token_count(text), tokens.count_tokens(text) - (tokens.WINDOW - chunking.MAX_TOKENS))


def _multilingual_texts(document: Document, drafts: list[chunking.Draft], detected: Sequence[str]) -> set[str]:
    """The chunk texts the multilingual space embeds (kb.text.multilingual.embeds): by each chunk's
    language as indexing will store it (the admin's correction, else `detected`; kb.text.language)."""
    if not settings.KB_MULTILINGUAL:
        return set()
    fixed = document.language if document.language_fixed and document.language else ""
    languages = [fixed] * len(drafts) if fixed else detected
    return {draft.text for draft, code in zip(drafts, languages, strict=True) if multilingual.embeds(code)}


def _embed_multilingual(document_id: int, version: int, texts: list[str], done: int) -> list[np.ndarray]:
    """The texts' multilingual vectors, in slices, reporting progress after `done` texts as the first pass does
    (this encoder is the slower one: a long document must not look abandoned)."""
    out: list[np.ndarray] = []
    for start in range(0, len(texts), PROGRESS_EVERY):
        out.extend(multilingual.embed_passages(texts[start : start + PROGRESS_EVERY]))
        _current(document_id, version).update(progress_done=done + len(out), updated_at=timezone.now())
        publish_document_status(document_id)
    return out


def _embed_with_progress(document_id: int, version: int, texts: list[str]) -> tuple[np.ndarray, list[bytes]]:
    """Embed in slices, reporting `progress_done` after each so the library can show n/m.

    Returns each text's vector and its late stage's coarse word vectors (kb.text.pieces), from the same pass."""
    parts: list[np.ndarray] = []
    late: list[bytes] = []
    for start in range(0, len(texts), PROGRESS_EVERY):
        vectors, slice_pieces, slice_ids = embedding.embed_with_pieces(texts[start : start + PROGRESS_EVERY])
        parts.append(vectors)
        late.extend(late_codes(slice_pieces, slice_ids))
        _current(document_id, version).update(
            progress_done=min(start + PROGRESS_EVERY, len(texts)), updated_at=timezone.now()
        )
        publish_document_status(document_id)
    return np.concatenate(parts), late


def late_codes(pieces: Sequence[np.ndarray], ids: Sequence[np.ndarray]) -> list[bytes]:
    """Each text's coarse word vectors without its stop words and punctuation (kb.text.pieces.stop_words)."""
    vocabulary = embedding.tokenizer()
    spelled = [[vocabulary.id_to_token(int(i)) or "" for i in row] for row in ids]
    stop = pieces_format.stop_words({pieces_format.spelled(tokens, places) for tokens in spelled
                                     for places in pieces_format.words(tokens)})
    return [pieces_format.pack(vectors, tokens, stop) for vectors, tokens in zip(pieces, spelled, strict=True)]


def _previous_vectors(document: Document, texts: set[str]) -> dict[str, tuple[np.ndarray, bytes, np.ndarray | None]]:
    """The stored vectors of the version being replaced, by chunk text, for the texts wanted again: a chunk
    whose text did not change keeps them (editing one paragraph re-embeds a few chunks, not the manual).
    Only from an index built by the running models and late format."""
    stamp = current_index_version()
    if (document.embedding_model, document.embedding_dimensions, document.late_version,
            document.multilingual_model) != (stamp.embedding_model, stamp.embedding_dimensions, stamp.late_version,
                                             stamp.multilingual_model):
        return {}
    kept = {}
    old = Chunk.objects.filter(document_id=document.pk)
    wanted = {pk for pk, text in old.values_list("pk", "text") if text in texts}
    rows = old.filter(pk__in=wanted).values_list("text", "embedding", "late_vectors", "multilingual_embedding")
    for text, vector, late, other in rows:
        if late is not None:  # a multilingual vector it lacks and needs is computed (todo_foreign)
            kept[text] = (np.asarray(vector, dtype=np.float32), bytes(late),
                          None if other is None else np.asarray(other, dtype=np.float32))
    return kept


def _fail(document_id: int, version: int, stage: str, reason: str) -> None:
    _current(document_id, version).update(
        status=Document.Status.FAILED, failed_stage=stage, failure_reason=reason[:2000], updated_at=timezone.now()
    )
    publish_document_status(document_id)
