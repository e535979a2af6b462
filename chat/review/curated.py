"""Curated answers: support's answer to a recurring question, written once (docs/LEARNING.md).

A curated answer is text whose every claim cites a passage ([n] → CuratedCitation: a document's chunk by its stable
id, with the quoted range), an optional statement of support's own, and the example questions it answers. A later
question within KB_CURATED_DISTANCE of an example gets it (chat.answering), but only when the asker may read every
cited passage at that moment: curated_for checks that in the same SQL as the match, against the chunks' own access
lists, so one unreadable passage withholds the whole answer and normal retrieval answers instead. A cited passage that
changes or disappears (re-upload, sync, delete) makes an approved answer stale; it is not served until approved again,
and curated_for never serves an answer whose passage is missing, whatever its state says (a race with re-indexing).

Who sees a curated answer on the desk, in the API and the admin: holders of chat.curate_answer who may read every
cited document (a citation whose document was deleted: superusers only, as chat.admin's citations).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.conf import settings
from django.db import transaction
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext
from pgvector.django import CosineDistance

from accounts.acl import is_active_user, user_principals
from chat.models import CuratedAnswer, CuratedCitation, CuratedQuestion, Message
from chat.selectors import withheld_from_reviewer
from chat.services import ChatError, NotFound
from kb.library.access import visible_documents
from kb.library.models import Chunk, Document
from kb.text import embedding
from search.memory import passage_at

PERMISSION = "chat.curate_answer"
MARKER = re.compile(r"\[(\d{1,3})\]")
MAX_QUESTIONS = 20
MAX_CITATIONS = 20
MAX_TEXT = 4000
MAX_QUESTION = 1000  # CuratedQuestion.text


class CurationDenied(ChatError):
    """The user may not curate answers (no chat.curate_answer)."""


def may_curate(user: Any) -> bool:
    """Support staff granted chat.curate_answer (superusers hold every permission)."""
    return bool(is_active_user(user) and user.has_perm(PERMISSION))


def _require(user: Any) -> None:
    if not may_curate(user):
        raise CurationDenied(gettext("you may not curate answers (the permission chat.curate_answer is needed)"))


def curated_visible(user: Any) -> QuerySet[CuratedAnswer]:
    """Curated answers `user` may see: those all of whose cited documents they may read now. A citation whose
    document was deleted counts as unreadable, except to superusers (the admin's rule for a deleted document)."""
    if not is_active_user(user):
        return CuratedAnswer.objects.none()
    unreadable = CuratedCitation.objects.filter(answer=OuterRef("pk")).exclude(
        document__in=visible_documents(user).order_by().values("pk"))
    if user.is_superuser:
        unreadable = unreadable.exclude(document__isnull=True)
    return CuratedAnswer.objects.exclude(Exists(unreadable))


# --------------------------------------------------------------------------- writing


@dataclass(frozen=True)
class _Cited:
    number: int
    document: Document
    chunk: Chunk
    start: int
    end: int
    quote: str


def _questions(questions: Sequence[str]) -> list[str]:
    cleaned, seen = [], set()
    for question in questions:
        text = " ".join(str(question).replace("\x00", "").split())
        if text and text.lower() not in seen:
            seen.add(text.lower())
            cleaned.append(text)
    if not cleaned:
        raise ChatError(gettext("give at least one example question the answer answers"))
    if len(cleaned) > MAX_QUESTIONS:
        raise ChatError(gettext("at most %(max)s example questions") % {"max": MAX_QUESTIONS})
    if any(len(q) > MAX_QUESTION for q in cleaned):
        raise ChatError(gettext("an example question is longer than %(max)s characters") % {"max": MAX_QUESTION})
    return cleaned


def _cited(author: Any, citations: Sequence[tuple[int, int, int]]) -> list[_Cited]:
    """Each (document id, start, end) as the passage of the document's current version it lies in, the range
    clipped to that passage; a document the author may not read is not found (as a missing one)."""
    if not citations:
        raise ChatError(gettext("cite at least one passage: the citations decide who may receive the answer"))
    if len(citations) > MAX_CITATIONS:
        raise ChatError(gettext("at most %(max)s citations") % {"max": MAX_CITATIONS})
    ids = {int(c[0]) for c in citations}
    readable = {d.pk: d for d in visible_documents(author).filter(pk__in=ids).only("pk", "title", "canonical_text")}
    cited = []
    for number, (document_id, start, end) in enumerate(citations, start=1):
        document = readable.get(int(document_id))
        if document is None:
            raise NotFound(gettext("citation [%(n)s]: no such document") % {"n": number})
        chunk = passage_at(document.pk, int(start), int(end))
        if chunk is None:
            raise ChatError(gettext("citation [%(n)s]: the range %(start)s-%(end)s lies in no passage of “%(title)s” "
                                    "as it is now") % {"n": number, "start": start, "end": end, "title": document.title})
        chunk = Chunk.objects.get(pk=chunk.pk)
        low, high = max(int(start), chunk.start), min(int(end), chunk.end)
        quote = document.canonical_text[low:high]
        if not quote.strip():
            raise ChatError(gettext("citation [%(n)s]: the quoted range is empty") % {"n": number})
        cited.append(_Cited(number, document, chunk, low, high, quote))
    return cited


def _checked_text(text: str, count: int) -> str:
    text = text.replace("\x00", "").strip()
    if not text:
        raise ChatError(gettext("the answer's text is empty"))
    if len(text) > MAX_TEXT:
        raise ChatError(gettext("the answer is longer than %(max)s characters") % {"max": MAX_TEXT})
    used = {int(n) for n in MARKER.findall(text)}
    unknown = sorted(n for n in used if not 1 <= n <= count)
    if unknown:
        raise ChatError(gettext("the text cites %(markers)s, but there is no such citation")
                        % {"markers": " ".join(f"[{n}]" for n in unknown)})
    unused = [n for n in range(1, count + 1) if n not in used]
    if unused:
        raise ChatError(gettext("citation %(markers)s is not cited in the text: cite it as [n] or remove it")
                        % {"markers": " ".join(f"[{n}]" for n in unused)})
    return text


def _write(answer: CuratedAnswer, *, text: str, questions: Sequence[str], cited: Sequence[_Cited]) -> None:
    answer.citations.all().delete()
    answer.questions.all().delete()
    CuratedCitation.objects.bulk_create(
        CuratedCitation(answer=answer, number=c.number, document=c.document, stable_id=c.chunk.stable_id,
                        start=c.start, end=c.end, quote=c.quote) for c in cited)
    CuratedQuestion.objects.bulk_create(
        CuratedQuestion(answer=answer, text=q, embedding=embedding.embed_query(q)[0]) for q in questions)


def curated_create(*, author: Any, text: str, questions: list[str], citations: list[tuple[int, int, int]],
                   statement: str = "", from_message_id: int | None = None, from_topic: str = "",
                   approve: bool = False) -> CuratedAnswer:
    """A new curated answer (a draft, or approved at once with `approve`). Every [n] in `text` must name one of
    `citations` ((document id, start, end): the range quoted) and every citation be cited; the author must be able
    to read every cited document."""
    _require(author)
    cited = _cited(author, citations)
    text = _checked_text(text, len(cited))
    examples = _questions(questions)
    from_message = None
    if from_message_id is not None:
        from_message = Message.objects.filter(pk=from_message_id, role=Message.Role.ASSISTANT).first()
        if from_message is None or withheld_from_reviewer(from_message, reviewer=author):
            raise NotFound(gettext("no such answer"))
    with transaction.atomic():
        answer = CuratedAnswer.objects.create(text=text, statement=statement.replace("\x00", "").strip(),
                                              from_message=from_message, from_topic=from_topic[:300],
                                              created_by=author)
        _write(answer, text=text, questions=examples, cited=cited)
    return curated_approve(approver=author, answer_id=answer.pk) if approve else answer


def _visible(user: Any, answer_id: int, *, lock: bool = False) -> CuratedAnswer:
    qs = curated_visible(user).filter(pk=answer_id)
    found = (qs.select_for_update() if lock else qs).first()
    if found is None:
        raise NotFound(gettext("no such curated answer"))
    return found


def curated_update(*, editor: Any, answer_id: int, text: str, questions: list[str],
                   citations: list[tuple[int, int, int]], statement: str = "", approve: bool = False) -> CuratedAnswer:
    """Replace an answer's text, questions, citations and statement. It goes back to draft (an edit is approved
    anew), unless `approve`."""
    _require(editor)
    cited = _cited(editor, citations)
    text = _checked_text(text, len(cited))
    examples = _questions(questions)
    with transaction.atomic():
        answer = _visible(editor, answer_id, lock=True)
        answer.text, answer.statement = text, statement.replace("\x00", "").strip()
        answer.state, answer.stale_reason, answer.approved_by, answer.approved_at = (
            CuratedAnswer.State.DRAFT, "", None, None)
        answer.save()
        _write(answer, text=text, questions=examples, cited=cited)
    return curated_approve(approver=editor, answer_id=answer.pk) if approve else answer


def curated_approve(*, approver: Any, answer_id: int) -> CuratedAnswer:
    """Approve (again): every cited passage must still be in its document unchanged; each quote is found again in
    its passage's current text (the passage may have moved in the document), so the stored range is current."""
    _require(approver)
    with transaction.atomic():
        answer = _visible(approver, answer_id, lock=True)
        citations = list(answer.citations.select_related("document"))
        if not citations:
            raise ChatError(gettext("the answer cites no passage; edit it to cite one"))
        for citation in citations:
            if citation.document is None:
                raise ChatError(gettext("citation [%(n)s]: its document was deleted; edit the answer to cite another "
                                        "passage") % {"n": citation.number})
            chunk = Chunk.objects.filter(document_id=citation.document.pk, stable_id=citation.stable_id).first()
            if chunk is None:
                raise ChatError(gettext("citation [%(n)s]: the passage changed in “%(title)s” since it was cited; edit "
                                        "the answer to cite it as it is now") % {"n": citation.number,
                                                                                 "title": citation.document.title})
            start, end = _located(chunk, citation)
            if (start, end) != (citation.start, citation.end):
                citation.start, citation.end = start, end
                citation.save(update_fields=["start", "end"])
        answer.state, answer.stale_reason = CuratedAnswer.State.APPROVED, ""
        answer.approved_by, answer.approved_at = approver, timezone.now()
        answer.save()
    return answer


def curated_retire(*, user: Any, answer_id: int) -> CuratedAnswer:
    """Take an answer out of service (back to draft), kept for editing or approving again."""
    _require(user)
    with transaction.atomic():
        answer = _visible(user, answer_id, lock=True)
        answer.state, answer.approved_by, answer.approved_at = CuratedAnswer.State.DRAFT, None, None
        answer.save()
    return answer


def curated_delete(*, user: Any, answer_id: int) -> None:
    """Delete an answer for good (answers it served keep their text; their link to it goes)."""
    _require(user)
    _visible(user, answer_id).delete()


def _located(chunk: Chunk, citation: CuratedCitation) -> tuple[int, int]:
    """The quote's range in the document as the passage stands now: found again in the chunk's text (its
    position in the document may have moved); the whole passage where the quote is not in it."""
    at = chunk.content.find(citation.quote) if citation.quote else -1
    if at < 0:
        return chunk.start, chunk.end
    return chunk.start + at, chunk.start + at + len(citation.quote)


# --------------------------------------------------------------------------- serving


@dataclass(frozen=True)
class CuratedMatch:
    answer: CuratedAnswer
    question: str  # the example question it matched
    distance: float


def curated_for(*, user: Any, vector: np.ndarray | Sequence[float] | None,
                first: Sequence[int] = ()) -> CuratedMatch | None:
    """The approved answer with the example question nearest `vector`, among those all of whose cited passages exist
    now with an access list naming one of `user`'s principals: one SQL, so an answer whose passage changed, went, or
    was narrowed away from the user is never served (not even partly). Its example question is within
    KB_CURATED_ALONE of the question, or within KB_CURATED_DISTANCE and one of the passages it cites is among `first`
    (the chunk ids of retrieval's first KB_CURATED_RANK passages for the question): two different questions about one
    document are often as near as two phrasings of one question (docs/LEARNING.md), so a looser match must agree
    with retrieval."""
    principals = user_principals(user)
    if vector is None or not principals:
        return None
    present = Chunk.objects.filter(document_id=OuterRef("document_id"), stable_id=OuterRef("stable_id"),
                                   acl__overlap=principals)
    unservable = CuratedCitation.objects.filter(answer=OuterRef("answer_id")).exclude(Exists(present))
    cited = CuratedCitation.objects.filter(answer=OuterRef("answer_id"))
    passages = Chunk.objects.filter(pk__in=list(first)[: settings.KB_CURATED_RANK]).values_list("document_id",
                                                                                                 "stable_id")
    retrieved = Q()
    for document_id, stable_id in passages:
        retrieved |= Q(document_id=document_id, stable_id=stable_id)
    agreeing = CuratedCitation.objects.filter(retrieved, answer=OuterRef("answer_id")) if retrieved else None
    near = Q(distance__lte=settings.KB_CURATED_ALONE)
    if agreeing is not None:
        near |= Q(Exists(agreeing), distance__lte=settings.KB_CURATED_DISTANCE)
    found = (CuratedQuestion.objects.filter(answer__state=CuratedAnswer.State.APPROVED)
             .annotate(distance=CosineDistance("embedding", list(map(float, vector))))
             .filter(near, Exists(cited), ~Exists(unservable))
             .select_related("answer__created_by", "answer__approved_by").order_by("distance", "pk").first())
    if found is None:
        return None
    return CuratedMatch(found.answer, found.text, float(found.distance))


@dataclass(frozen=True)
class CuratedSource:
    """A cited passage as it stands now, for the answer stream (chat.prompts.Source's fields)."""

    number: int
    chunk: Chunk
    document_title: str
    start: int
    end: int
    quote: str


def curated_sources(answer: CuratedAnswer) -> list[CuratedSource] | None:
    """The answer's citations as their passages stand now, each quote found again in its chunk; None when a
    passage is gone (re-indexed since curated_for matched)."""
    sources = []
    for citation in answer.citations.select_related("document").order_by("number"):
        chunk = (Chunk.objects.filter(document_id=citation.document_id, stable_id=citation.stable_id)
                 .select_related("document").first()) if citation.document_id else None
        if chunk is None:
            return None
        start, end = _located(chunk, citation)
        sources.append(CuratedSource(citation.number, chunk, chunk.document.title, start, end,
                                     chunk.content[start - chunk.start : end - chunk.start]))
    return sources


def display_name(user: Any) -> str:
    if user is None:
        return gettext("support")
    return str(user.get_full_name() or user.get_username())


def curated_payload(answer: CuratedAnswer | None, *, question: str = "",
                    vector: np.ndarray | Sequence[float] | None = None) -> dict[str, Any]:
    """What the reader is told of a curated answer: by whom, approved when, support's own statement, and the question
    support answered (`question`, or the example nearest the asker's `vector` on replay): a neighbouring question
    whose answer sits in the same passage can be matched, and the reader sees which one was answered."""
    if answer is None:  # deleted since it was served
        return {"by": gettext("support"), "approved_at": None, "statement": "", "question": ""}
    if not question and vector is not None:
        nearest = (answer.questions.annotate(distance=CosineDistance("embedding", list(map(float, vector))))
                   .order_by("distance", "pk").first())
        question = nearest.text if nearest else ""
    return {"by": display_name(answer.created_by),
            "approved_at": answer.approved_at.isoformat() if answer.approved_at else None,
            "statement": answer.statement, "question": question}


# --------------------------------------------------------------------------- staleness


def _quote_head(quote: str) -> str:
    words = " ".join(quote.split())
    return words if len(words) <= 60 else words[:59].rsplit(" ", 1)[0] + "…"


def stale_changed(document_ids: Iterable[int]) -> int:
    """Approved answers citing a passage of these documents that is no longer there become stale, with the
    reason; how many."""
    ids = list(document_ids)
    if not ids:
        return 0
    present = Chunk.objects.filter(document_id=OuterRef("document_id"), stable_id=OuterRef("stable_id"))
    gone = (CuratedCitation.objects.filter(document_id__in=ids, answer__state=CuratedAnswer.State.APPROVED)
            .exclude(Exists(present)).select_related("document").order_by("answer_id", "number"))
    reasons: dict[int, str] = {}
    for citation in gone:
        title = citation.document.title if citation.document else ""
        reasons.setdefault(citation.answer_id, gettext("The passage [%(n)s] “%(quote)s” changed in %(title)s.") % {
            "n": citation.number, "quote": _quote_head(citation.quote), "title": title})
    return _make_stale(reasons)


def _make_stale(reasons: dict[int, str]) -> int:
    count = 0
    for answer_id, reason in reasons.items():
        count += CuratedAnswer.objects.filter(pk=answer_id, state=CuratedAnswer.State.APPROVED).update(
            state=CuratedAnswer.State.STALE, stale_reason=reason[:500], updated_at=timezone.now())
    return count


def on_document_indexed(sender: object, *, document_ids: Sequence[int], **kwargs: object) -> None:
    """kb.library.events.document_indexed: a new version may have changed or dropped cited passages."""
    stale_changed(document_ids)


def on_document_deleted(sender: object, *, instance: Document, **kwargs: object) -> None:
    """pre_delete of a document: the approved answers citing it go stale (their citations lose the document)."""
    cited = CuratedCitation.objects.filter(document_id=instance.pk, answer__state=CuratedAnswer.State.APPROVED)
    reasons = {answer_id: gettext("The document %(title)s, cited as [%(n)s], was deleted.") % {
        "title": instance.title, "n": number} for answer_id, number in cited.values_list("answer_id", "number")}
    _make_stale(reasons)


# --------------------------------------------------------------------------- the desk


@dataclass(frozen=True)
class CuratedDesk:
    answers: list[CuratedAnswer]  # citations and questions prefetched
    counts: dict[str, int]  # per state, of those shown
    hidden: int  # answers citing a document the viewer may not read: only this number


def curated_desk(*, viewer: Any, state: str = "") -> CuratedDesk:
    """The desk's list for a curator: answers they may see in full (optionally of one state), the counts per
    state, and how many are hidden from them."""
    _require(viewer)
    visible = curated_visible(viewer)
    counts = visible.aggregate(**{s: Count("pk", filter=Q(state=s)) for s in CuratedAnswer.State.values})
    shown = visible.filter(state=state) if state in CuratedAnswer.State.values else visible
    answers = list(shown.select_related("created_by", "approved_by")
                   .prefetch_related("questions", "citations__document")[:200])
    return CuratedDesk(answers, counts, CuratedAnswer.objects.count() - visible.count())
