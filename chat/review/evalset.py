"""A deployment's judged questions as its own evaluation set, in the evaluation-set format of
docs/EVALUATION.md (`questions.jsonl`, `ood.jsonl`): what `manage.py export_judgements` writes.

One verdict decides per answer: a reviewer's (the newest) over the asker's. Each row is written only
as far as the data backs it honestly; every answer left out is counted with its reason:

- questions.jsonl: an answer judged helpful, its needle the answer's lead sentence (markers taken out)
  found verbatim in the quote of the first source it cites; or judged "should have answered" naming a
  document, its needle that document's sentence nearest the question (`document_needle`).
- ood.jsonl: a question judged "should have refused", and a refusal a reviewer judged right.

An answer withheld from the exporter, and a row naming a document they may not read, are left out.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.models import Prefetch
from pgvector.django import CosineDistance

from accounts.acl import is_active_user
from chat import sentence_scorer
from chat.backends.extractive import sentences as readable_sentences
from chat.claim_support import MARKER, claim_spans
from chat.models import Citation, Judgement, Message
from chat.selectors import is_withheld
from kb.library.access import visible_documents
from kb.library.models import Chunk, Document
from kb.text import embedding
from kb.text.classify import classify_query
from kb.text.identifiers import identifiers

# The keys of each row, in the order docs/EVALUATION.md lists them.
QUESTION_KEYS = ("id", "gt", "query", "phrasing", "needle", "doc", "intent", "identifier")
OOD_KEYS = ("id", "query", "kind")
NEEDLE_CHARS = (40, 250)  # the set's needles: a short sentence, never a heading
NEEDLE_CHUNKS = 3  # a named document's passages nearest the question whose sentences are candidates
MARKERS = re.compile(r"\s*" + MARKER.pattern)
PERMISSION = "chat.export_judgement"


class ExportRefused(PermissionError):
    """The exporter may not export judgements (or does not exist: the same to them)."""


@dataclass
class EvalSet:
    questions: list[dict[str, Any]] = field(default_factory=list)
    ood: list[dict[str, Any]] = field(default_factory=list)
    left_out: Counter[str] = field(default_factory=Counter)  # reason -> answers

    def write(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for name, rows in (("questions.jsonl", self.questions), ("ood.jsonl", self.ood)):
            (directory / name).write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows),
                                          encoding="utf-8")


def may_export(user: Any) -> bool:
    """Superusers, and staff granted chat.export_judgement."""
    return is_active_user(user) and (user.is_superuser or (user.is_staff and user.has_perm(PERMISSION)))


def normalised(text: str) -> str:
    """Whitespace as the set's needles have it: single spaces, none leading or trailing."""
    return " ".join(text.split())


def document_path(document: Document) -> str:
    """`<folder>/<file name>`, as the set's `doc` (the folder is the set's access group)."""
    name = document.filename or str(document)
    return f"{document.folder.name}/{name}" if document.folder else name


def deciding(judgements: list[Judgement]) -> Judgement | None:
    """The verdict that counts: the newest reviewer's, else the asker's."""
    ranked = sorted(judgements, key=lambda j: (j.role == Judgement.Role.REVIEWER, j.updated_at, j.pk))
    return ranked[-1] if ranked else None


def lead_needle(answer: Message) -> tuple[str, Citation] | str:
    """(needle, its citation) from a helpful answer's lead sentence, or why there is none."""
    spans = claim_spans(answer.text)
    if not spans:
        return "empty answer"
    lead = answer.text[spans[0][0] : spans[0][1]]
    numbers = MARKER.findall(lead)
    citation = next((c for c in answer.citations.all() if numbers and c.number == int(numbers[0])), None)
    if citation is None:
        return "lead sentence cites no source"
    needle = normalised(MARKERS.sub("", lead))
    if needle not in normalised(citation.quote):
        return "lead sentence not verbatim in its source"
    return needle, citation


def needle_candidates(question: str, document: Document, *, passages: int = NEEDLE_CHUNKS) -> list[tuple[float, str]]:
    """The sentences of `document` that could be a needle for `question`, best first with their scores: those
    of its `passages` passages nearest the question by the retrieval's embedding and cosine distance, scored
    as the extractive answer scores its sources (chat.sentence_scorer). Only a sentence of needle length found
    exactly once, verbatim, in the document's text is a candidate."""
    vector, _ = embedding.embed_query(question)
    # Vectors of another embedding model are not comparable with the question's (as in retrieval).
    chunks = (Chunk.objects.filter(document=document).annotate(distance=CosineDistance("embedding", vector))
              .order_by("distance")[:passages] if document.embedding_model == settings.KB_EMBEDDING_MODEL else [])
    text = normalised(document.canonical_text)
    candidates: dict[str, int] = {}
    for rank, chunk in enumerate(chunks, 1):
        for sentence in readable_sentences(chunk.content):
            found = normalised(sentence)
            if NEEDLE_CHARS[0] <= len(found) <= NEEDLE_CHARS[1] and text.count(found) == 1:
                candidates.setdefault(found, rank)
    if not candidates:
        return []
    scored = sentence_scorer.score(question, list(candidates), list(candidates.values()))
    return sorted(zip(scored.total, candidates, strict=True), reverse=True)


def document_needle(question: str, document: Document) -> str | None:
    """The best of `needle_candidates`; None when there is none (the row is left out rather than given a needle
    nobody checked). On ../shared/eval it is the set's needle (or overlaps it) for 40 of 70 doc-phrased and 25 of 70
    ticket-phrased queries, and requiring a lead over the next candidate does not make it more precise
    (bench/needles.py, docs/CHAT.md)."""
    ranked = needle_candidates(question, document)
    return ranked[0][1] if ranked else None


def question_row(answer: Message, needle: str, document: Document) -> dict[str, Any]:
    query = normalised(answer.question.text if answer.question else "")
    intent = answer.intent if answer.intent in ("screen", "concept") else classify_query(query)[0]
    # Employees' own words: the set's "ticket" phrasing (the "doc" one reuses the documentation's vocabulary).
    return {"id": f"j{answer.pk}-ticket", "gt": f"j{answer.pk}", "query": query, "phrasing": "ticket",
            "needle": needle, "doc": document_path(document), "intent": intent,
            "identifier": bool(identifiers(query))}


def ood_row(answer: Message) -> dict[str, Any]:
    """`near` when a passage came within the distance the page offers passages beside a refusal, else `far`
    (a "literal trap" is not something stored data can tell)."""
    reach = (answer.threshold or 0.0) + settings.KB_SEARCH_RELATED_MARGIN
    near = answer.nearest_distance is not None and answer.nearest_distance <= reach
    return {"id": f"ood-j{answer.pk}", "query": normalised(answer.question.text if answer.question else ""),
            "kind": "near" if near else "far"}


def judgements_export(*, exporter: Any, since: datetime | None = None) -> EvalSet:
    """The judged answers (their deciding verdict given since `since`) as rows `exporter` may take away."""
    if not may_export(exporter):
        raise ExportRefused("only superusers and staff with the chat.export_judgement permission export judgements")
    answers = (Message.objects.filter(role=Message.Role.ASSISTANT, judgements__isnull=False).distinct()
               .select_related("question").order_by("pk")
               .prefetch_related("citations__document__folder",
                                 Prefetch("judgements", queryset=Judgement.objects.select_related("document__folder"))))
    readable = visible_documents(exporter)
    out = EvalSet()
    for answer in answers:
        verdict = deciding(list(answer.judgements.all()))
        if verdict is None or (since is not None and verdict.updated_at < since):
            continue
        reason = _add(out, answer, verdict, exporter=exporter, readable=readable)
        if reason:
            out.left_out[reason] += 1
    return out


def _add(out: EvalSet, answer: Message, verdict: Judgement, *, exporter: Any, readable: Any) -> str | None:
    """Add the answer's row to `out`; why not, when it has none."""
    if is_withheld(answer, viewer=exporter):
        return "answer withheld from the exporter"
    kind, refused = verdict.kind, answer.status == Message.Status.REFUSED
    if kind == Judgement.Kind.SHOULD_REFUSE or (refused and kind == Judgement.Kind.HELPFUL):
        if refused and verdict.role != Judgement.Role.REVIEWER:
            return "refusal not confirmed by a reviewer"
        out.ood.append(ood_row(answer))
        return None
    if kind == Judgement.Kind.HELPFUL and answer.status == Message.Status.DONE:
        found = lead_needle(answer)
        if isinstance(found, str):
            return found
        needle, citation = found
        document = citation.document
    elif kind == Judgement.Kind.SHOULD_ANSWER:
        document = verdict.document
        if document is None:
            return "should have answered, no document named"
        if not readable.filter(pk=document.pk).exists():
            return "names a document the exporter may not read"
        question = answer.question.text if answer.question else ""
        needle = document_needle(question, document) or ""
        if not needle:
            return "no sentence of the named document found as a needle"
    elif kind == Judgement.Kind.WRONG:
        return "judged wrong: the right answer is not known"
    else:
        return f"judged helpful, but {answer.status}"
    if not NEEDLE_CHARS[0] <= len(needle) <= NEEDLE_CHARS[1]:
        return "needle not of needle length"
    if document is None or not readable.filter(pk=document.pk).exists():
        return "names a document the exporter may not read"
    out.questions.append(question_row(answer, needle, document))
    return None
