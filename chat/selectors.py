"""Reads: who may open a conversation or review answers, and what a given reader may see of a message.

The rule for stored answers: a citation is shown only while its document is visible to
the reader (kb.library.access, checked at read time), and an answer citing anything the
reader may not see is withheld whole, since its text may quote that document. On the
review desk alone a reviewer's grants (chat.review_scope) count as reading the documents
they cover; each answer shown through one is written to the access log as it is read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from django.contrib.postgres.expressions import ArraySubquery
from django.db.models import BooleanField, Count, Exists, ExpressionWrapper, OuterRef, Prefetch, Q, QuerySet, Subquery
from django.utils.html import escape
from django.utils.translation import gettext, gettext_noop

from accounts.acl import is_active_user
from chat.citations import render_html
from chat.events import CitationPayload, ClaimPayload, CuratedPayload, DoneEvent, Event, Timings, citation_from_stored
from chat.match import CLOSEST
from chat.models import Citation, Conversation, Feedback, Judgement, Message, ReviewAccess
from chat.review_scope import ReviewScope, access_log, review_scope
from chat.review_scope import is_reviewer as is_reviewer  # where the API, the pages and judgements ask it
from kb.library.access import visible_documents, visible_folders
from kb.library.models import Document, Folder

# English; translated where they are shown (gettext), into the reader's language.
WITHHELD = gettext_noop("This answer is hidden because it draws on a document you cannot read (any more).")
WITHHELD_ERROR = gettext_noop("The answer could not be finished.")


def conversation_for_user(user: Any, pk: int) -> Conversation | None:
    """The conversation if `user` owns it, else None (missing and foreign look the same)."""
    if not is_active_user(user):
        return None
    return Conversation.objects.filter(pk=pk, owner=user).first()


def sees_signals(user: Any) -> bool:
    """Who reads why a question was refused in numbers (distances, threshold, confidence): staff and
    reviewers, who tune and judge the product. Employees get the plain words of the answer's text."""
    return bool(is_active_user(user) and user.is_staff) or is_reviewer(user)


def earlier_questions(message: Message, *, limit: int = 3) -> list[str]:
    """The user's previous questions in the conversation, oldest first (never earlier answers)."""
    before = message.question_id or message.pk
    rows = (
        Message.objects.filter(conversation_id=message.conversation_id, role=Message.Role.USER, pk__lt=before)
        .order_by("-pk")
        .values_list("text", flat=True)[:limit]
    )
    return list(reversed(rows))


@dataclass
class MessageView:
    """A message as one reader may see it."""

    message: Message
    text: str
    html: str
    withheld: bool
    citations: list[CitationPayload] = field(default_factory=list)
    restricted: list[int] = field(default_factory=list)  # numbers of citations hidden from this reader
    unsupported: list[ClaimPayload] = field(default_factory=list)  # chat.support's flags, with verdicts
    error: str = ""
    refusal_reason: str = ""  # the signals behind a refusal: for staff and reviewers only
    grants: list[str] = field(default_factory=list)  # shown in full through these review grants (their scopes)

    @property
    def timings(self) -> Timings:
        m = self.message
        return {"retrieval_ms": m.retrieval_ms, "first_token_ms": m.first_token_ms, "total_ms": m.total_ms}


def message_sources(message: Message) -> set[int]:
    """Every document the message drew on: those handed to the generator and those it cited
    (citations prefetched; a cited document whose row is gone counts as unreadable)."""
    return {*message.source_documents, *(c.document_id or 0 for c in message.citations.all())}


def readable_document_ids(viewer: Any, messages: Iterable[Message]) -> set[int]:
    """Of the documents the messages drew on, those `viewer` may read now (one query)."""
    sources = {pk for m in messages for pk in message_sources(m) if pk}
    if not sources:
        return set()
    return set(visible_documents(viewer).filter(pk__in=sources).values_list("pk", flat=True))


def messages_readable(user: Any) -> QuerySet[Message]:
    """Messages all of whose source documents `user` may read: message_views' rule as a
    query, for lists such as the admin (questions have none and are always readable)."""
    readable = ArraySubquery(visible_documents(user).order_by().values("pk"))
    return Message.objects.filter(source_documents__contained_by=readable)


def message_views(messages: Sequence[Message], *, viewer: Any, scope: ReviewScope | None = None) -> list[MessageView]:
    """Views of `messages` (citations prefetched) for `viewer`, with one ACL query for all of them.

    An answer is withheld whole when any document it drew on is unreadable to `viewer`,
    cited or not: its text, finished, failed or still running, may quote any of them, and
    so may its error (a model server's message can echo the prompt). With a review `scope`
    (the review desk only), a document its grants cover counts as readable, and the view
    names the grants it was shown through.
    """
    readable = readable_document_ids(viewer, messages)
    sources = {pk for m in messages for pk in message_sources(m) if pk}
    granted = scope.covering(sources - readable) if scope else {}
    signals = sees_signals(viewer)
    views = []
    for message in messages:
        missing = message_sources(message) - readable  # every cited document is a source
        through = sorted({g for pk in missing for g in granted.get(pk, [])}) if missing <= granted.keys() else []
        shown_to = readable | granted.keys() if through else readable
        shown: list[Citation] = []
        hidden: list[Citation] = []
        for citation in message.citations.all():
            (shown if citation.document_id in shown_to else hidden).append(citation)
        if missing and not through:
            withheld = gettext(WITHHELD)
            views.append(MessageView(message, withheld, f"<p>{escape(withheld)}</p>", True,
                                     [citation_from_stored(c) for c in shown], [c.number for c in hidden],
                                     error=gettext(WITHHELD_ERROR) if message.error else ""))
            continue
        html = (render_html(message.text, {c.number: c for c in shown}, unsupported=message.unsupported)
                if message.role == Message.Role.ASSISTANT else "")
        views.append(MessageView(message, message.text, html, False, [citation_from_stored(c) for c in shown],
                                 unsupported=message.unsupported, error=message.error,
                                 refusal_reason=message.refusal_reason if signals else "", grants=through))
    return views


def is_withheld(message: Message, *, viewer: Any, scope: ReviewScope | None = None) -> bool:
    """message_views' rule for one message: whether `viewer` is kept from it (and so from judging it);
    with a review `scope`, on the review desk, its grants count."""
    missing = message_sources(message) - readable_document_ids(viewer, [message])
    return bool(missing) and not (scope is not None and missing <= scope.covering(missing).keys())


def withheld_from_reviewer(message: Message, *, reviewer: Any) -> bool:
    """is_withheld on the review desk: whether `reviewer`, with their grants, is kept from judging the answer."""
    return is_withheld(message, viewer=reviewer, scope=review_scope(reviewer))


# Even, so that a page of a conversation (questions and answers alternate) holds whole turns.
MESSAGES_PAGE = 50


def conversation_messages(conversation: Conversation, *, since: int | None = None, before: int | None = None,
                          limit: int = MESSAGES_PAGE) -> list[Message]:
    """The latest `limit` messages with an id above `since` and below `before`, oldest first (citations prefetched)."""
    qs = conversation.messages.select_related("curated__created_by").prefetch_related("citations").order_by("-pk")
    if since:
        qs = qs.filter(pk__gt=since)
    if before:
        qs = qs.filter(pk__lt=before)
    return list(reversed(qs[:limit]))


@dataclass(frozen=True)
class MessagePage:
    """One page of a conversation as a reader may see it, oldest first."""

    views: list[MessageView]
    before: int | None  # the cursor for the page before this one; None when this page starts the conversation


def conversation_page(conversation: Conversation, *, viewer: Any, since: int | None = None,
                      before: int | None = None, limit: int = MESSAGES_PAGE,
                      scope: ReviewScope | None = None) -> MessagePage:
    """The latest `limit` messages (after `since`, before `before`) as `viewer` may see them: a request's
    work stays bounded however long the conversation grows; `before` of the result leads to the earlier ones."""
    messages = conversation_messages(conversation, since=since, before=before, limit=limit + 1)
    more = len(messages) > limit
    messages = messages[1:] if more else messages
    return MessagePage(message_views(messages, viewer=viewer, scope=scope), messages[0].pk if more else None)


def review_conversation_page(conversation: Conversation, *, viewer: Any, before: int | None = None,
                             limit: int = MESSAGES_PAGE) -> MessagePage:
    """A page of any conversation as the review desk shows it to the reviewer `viewer` (their grants count),
    each answer shown through a grant written to the access log."""
    page = conversation_page(conversation, viewer=viewer, before=before, limit=limit, scope=review_scope(viewer))
    _logged(page.views, viewer=viewer, surface=ReviewAccess.Surface.REVIEW_CONVERSATION)
    return page


def _logged(views: Sequence[MessageView], *, viewer: Any, surface: str) -> None:
    access_log(viewer, [(v.message.pk, v.grants) for v in views if v.grants], surface=surface)


def message_events(view: MessageView) -> list[Event]:
    """The events that bring a reader up to date with one stored message: the websocket replay,
    the REST API and the Ask page all show a stored message through these.

    A running answer's stored text comes as one token event at offset 0; the producer
    stores text before publishing it, so live events after this only ever add to it.
    """
    m = view.message
    if m.role == Message.Role.USER:
        return [{"type": "question", "message": m.pk, "text": m.text}]
    text: list[Event] = [{"type": "token", "message": m.pk, "at": 0, "text": m.text}] if not view.withheld else []
    if m.status == Message.Status.PENDING:
        return [{"type": "status", "message": m.pk, "state": "queued"}]
    if m.status == Message.Status.RUNNING:
        status: Event = {"type": "status", "message": m.pk, "state": "generating", "backend": m.backend,
                         "model": m.model, "notice": m.notice, "intent": m.intent} if m.backend else {
                         "type": "status", "message": m.pk, "state": "retrieving"}
        # Written, cited, not yet done (the match level is being read): a reader who arrives now gets the
        # citations the live stream already sent, or the `done` that follows would show no sources.
        cited: list[Event] = ([{"type": "citations", "message": m.pk, "citations": view.citations}]
                              if view.citations and not view.withheld else [])
        return [status, *(text if m.text else []), *cited]
    if m.status == Message.Status.REFUSED:
        return [{"type": "refused", "message": m.pk, "reason": view.refusal_reason, "text": m.text, "intent": m.intent,
                 "timings": view.timings}]
    if m.status == Message.Status.FAILED:
        return [*(text if m.text else []), {"type": "error", "message": m.pk, "error": view.error}]
    done: DoneEvent = {"type": "done", "message": m.pk, "text": view.text, "html": view.html, "intent": m.intent,
                       "backend": m.backend, "model": m.model, "notice": m.notice, "timings": view.timings,
                       "withheld": view.withheld, "unsupported": view.unsupported, "match": m.match}
    if m.match == "curated" and not view.withheld:
        from chat.curated import curated_payload  # chat.curated reads this module

        done["curated"] = cast(CuratedPayload, curated_payload(m.curated, vector=m.query_vector))
    return [*text, {"type": "citations", "message": m.pk, "citations": view.citations}, done]


def conversation_replay(conversation: Conversation, *, viewer: Any, since: int | None = None,
                        limit: int = MESSAGES_PAGE) -> list[Event]:
    """The events a reader connecting now gets first: the latest `limit` messages (after `since`), as stored.
    Earlier ones come from the REST API, a page at a time."""
    page = conversation_page(conversation, viewer=viewer, since=since, limit=limit)
    return [event for view in page.views for event in message_events(view)]


def _answers() -> QuerySet[Message]:
    """Answers with what a review page shows, prefetched: a fixed number of queries for any number. `follows` is
    the question asked before the answer's own in its conversation (a follow-up reads wrong without it)."""
    before = Message.objects.filter(conversation_id=OuterRef("conversation_id"), role=Message.Role.USER,
                                    pk__lt=OuterRef("question_id")).order_by("-pk").values("text")[:1]
    return (
        Message.objects.filter(role=Message.Role.ASSISTANT)
        .select_related("conversation__owner", "question")
        .prefetch_related("citations", Prefetch("feedback", queryset=Feedback.objects.select_related("citation", "reviewer")))
        .annotate(follows=Subquery(before))
    )


OPEN_CLAIMS = Q(unsupported__contains=[{"verdict": Message.Verdict.OPEN.value}])


def _review_page(qs: QuerySet[Message], *, flagged: bool | None, status: str | None, limit: int,
                 before: int | None) -> list[Message]:
    """Answers with unsupported claims no reviewer has judged yet first, then the rest; newest first within each.
    `before` is the last answer of the previous page (the keyset follows the same order)."""
    qs = qs.alias(open_claims=ExpressionWrapper(OPEN_CLAIMS, output_field=BooleanField())).order_by(
        "-open_claims", "-pk")
    if flagged is not None:
        has_feedback = Exists(Feedback.objects.filter(message=OuterRef("pk")))
        qs = qs.filter(has_feedback) if flagged else qs.exclude(has_feedback)
    if status:
        qs = qs.filter(status=status)
    if before:
        # Read from `qs`: whether an answer outside it has open claims must not shape the page (review_queue).
        after_open = qs.filter(OPEN_CLAIMS, pk=before).exists()
        qs = qs.filter(Q(open_claims=True, pk__lt=before) | Q(open_claims=False)) if after_open else qs.filter(
            open_claims=False, pk__lt=before)
    return list(qs[:limit])


def review_answers(*, flagged: bool | None = None, status: str | None = None, limit: int = 50,
                   before: int | None = None) -> list[Message]:
    """Every answer, those withheld from the reader included (review_views withholds them), in _review_page's order."""
    return _review_page(_answers(), flagged=flagged, status=status, limit=limit, before=before)


def review_answer(pk: int) -> Message | None:
    return _answers().filter(pk=pk).first()


@dataclass(frozen=True)
class FeedbackView:
    feedback: Feedback
    note: str  # blank while the answer is withheld: a note may quote it (confirming a claim files its sentence)


@dataclass(frozen=True)
class ReviewView:
    """An answer as a reviewer may see it: the review list, the detail and the desk all show this."""

    answer: MessageView
    feedback: list[FeedbackView]


def review_views(answers: Sequence[Message], *, viewer: Any, surface: str,
                 scope: ReviewScope | None = None) -> list[ReviewView]:
    """Views of `answers` (as `_answers()` prefetches them) for the reviewer `viewer`, reading on `surface`
    (a ReviewAccess.Surface): what is withheld from them as a reader of the answer is withheld from them as its
    reviewer, notes included, unless their grants cover it; each answer shown through a grant is logged.
    `scope`: the reviewer's grants when already read in this request (review_queue)."""
    views = message_views(answers, viewer=viewer, scope=scope or review_scope(viewer))
    _logged(views, viewer=viewer, surface=surface)
    return [ReviewView(view, [FeedbackView(f, "" if view.withheld else f.note) for f in view.message.feedback.all()])
            for view in views]


# --------------------------------------------------------------------------- the review queue
#
# The desk's queues, counts and search read only the answers the reviewer may see in full (is_withheld's rule,
# with their grants, written as a query): the others are one number, `hidden`, which no filter, folder or
# search term changes, so that nothing about them (their text, status, folder or verdicts) can be probed.

QUEUES = ("unreviewed", "closest", "rated_down", "refused", "flagged", "all")
SEARCH_WORDS = 8  # of a search, the first words; each must appear in the question or the answer
SEARCH_MAX = 200  # characters of a search


def _queue_condition(queue: str) -> Q:
    """Which answers a queue holds: unreviewed, a finished answer or refusal no reviewer has judged (a verdict
    takes it out); closest, an answer chat.match labelled "may not answer your question" (where wrong answers
    gather: docs/CHAT.md); rated_down, the asker's thumbs down (any reason); refused; flagged, a reviewer's flag on
    it or one of its citations; all."""
    if queue not in QUEUES:
        raise ValueError(f"unknown review queue {queue!r}; one of {', '.join(QUEUES)}")
    judged = Judgement.objects.filter(message=OuterRef("pk"), role=Judgement.Role.REVIEWER)
    return {
        "unreviewed": Q(status__in=(Message.Status.DONE, Message.Status.REFUSED)) & ~Q(Exists(judged)),
        "closest": Q(status=Message.Status.DONE, match=CLOSEST),
        "rated_down": Q(rating=-1),
        "refused": Q(status=Message.Status.REFUSED),
        "flagged": Q(Exists(Feedback.objects.filter(message=OuterRef("pk")))),
        "all": Q(),
    }[queue]


def _shown_in_full(reviewer: Any, scope: ReviewScope) -> Q:
    """is_withheld's rule with the reviewer's grants as a condition on answers: every document it drew on (and
    every one it cites: a citation whose document is gone counts as unreadable) is one they read or a grant covers.
    tests/chat/test_review_queue.py checks it against is_withheld answer by answer."""
    readable = Q(pk__in=visible_documents(reviewer).values("pk"))
    if scope.grants:
        readable |= Q(pk__in=scope.documents().values("pk"))
    documents = Document.objects.filter(readable).order_by().values("pk")
    unreadable_citation = Citation.objects.filter(message=OuterRef("pk")).exclude(document_id__in=documents)
    return Q(source_documents__contained_by=ArraySubquery(documents)) & ~Q(Exists(unreadable_citation))


def _narrowed(*, folder: int | None, search: str) -> Q:
    """A folder (answers drawing on a document in it) and a search (each word in the question or the answer)."""
    condition = Q()
    if folder is not None:
        in_folder = Document.objects.filter(folder_id=folder).order_by().values("pk")
        condition &= Q(source_documents__overlap=ArraySubquery(in_folder))
    for word in search[:SEARCH_MAX].split()[:SEARCH_WORDS]:
        condition &= Q(text__icontains=word) | Q(question__text__icontains=word)
    return condition


def review_queue(*, reviewer: Any, queue: str = "unreviewed", folder: int | None = None, search: str = "",
                 flagged: bool | None = None, status: str | None = None, limit: int = 20, before: int | None = None,
                 surface: str) -> list[ReviewView]:
    """A page of `queue` (QUEUES) as the desk lists it to `reviewer`, in review_answers' order: only answers they
    may see in full, never a withheld one (review_counts counts those); `folder` and `search` narrow it."""
    scope = review_scope(reviewer)
    qs = _answers().filter(_shown_in_full(reviewer, scope), _queue_condition(queue), _narrowed(folder=folder,
                                                                                               search=search))
    answers = _review_page(qs, flagged=flagged, status=status, limit=limit, before=before)
    # The query and the views read access apart: one that closed in between is left out, not shown withheld.
    return [view for view in review_views(answers, viewer=reviewer, surface=surface, scope=scope)
            if not view.answer.withheld]


@dataclass(frozen=True)
class FolderCount:
    id: int
    name: str
    count: int


@dataclass(frozen=True)
class ReviewCounts:
    """The desk's numbers for one reviewer: each queue's answers (in the folder and matching the search), each
    folder's answers (in the queue and matching the search), and `hidden`, the answers withheld from them, which
    no queue, folder or search changes."""

    queues: dict[str, int]
    folders: list[FolderCount]
    hidden: int


def review_counts(*, reviewer: Any, queue: str = "unreviewed", folder: int | None = None,
                  search: str = "") -> ReviewCounts:
    """The counts beside the desk's filters (ReviewCounts), in a fixed number of queries. Folders are named only where the
    reviewer knows of them (kb.library.access.visible_folders, or a grant names them)."""
    scope = review_scope(reviewer)
    shown = _shown_in_full(reviewer, scope)
    answers = Message.objects.filter(role=Message.Role.ASSISTANT)
    seen = answers.aggregate(total=Count("pk"), shown=Count("pk", filter=shown))
    narrowed = answers.filter(shown, _narrowed(folder=folder, search=search))
    queues = narrowed.aggregate(**{name: Count("pk", filter=_queue_condition(name) or None) for name in QUEUES})
    in_folder = Document.objects.filter(folder_id=OuterRef(OuterRef("pk"))).order_by().values("pk")
    per_folder = (answers.filter(shown, _queue_condition(queue), _narrowed(folder=None, search=search),
                                 source_documents__overlap=ArraySubquery(in_folder))
                  .order_by().values("role").annotate(n=Count("pk")).values("n"))
    known = Q(pk__in=visible_folders(reviewer).values("pk")) | Q(pk__in=scope.folder_ids())
    listed = Q(n__gt=0) | Q(pk=folder) if folder is not None else Q(n__gt=0)  # the chosen one stays, even at 0
    folders = Folder.objects.filter(known).annotate(n=Subquery(per_folder)).filter(listed).order_by("name")
    return ReviewCounts(queues={name: queues[name] for name in QUEUES},
                        folders=[FolderCount(f.pk, f.name, f.n or 0) for f in folders],
                        hidden=seen["total"] - seen["shown"])
