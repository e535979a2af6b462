"""Reads: who may open a conversation or review answers, and what a given reader may see of a message.

The rule for stored answers: a citation is shown only while its document is visible to
the reader (kb.library.access, checked at read time), and an answer citing anything the
reader may not see is withheld whole, since its text may quote that document. On the
review desk alone a reviewer's grants (chat.review.scope) count as reading the documents
they cover (`scope`); the desk's own reads, which log each answer shown through a grant, are chat.review.desk.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from django.contrib.postgres.expressions import ArraySubquery
from django.db.models import QuerySet
from django.utils.html import escape
from django.utils.translation import gettext, gettext_noop

from accounts.acl import is_active_user
from chat.citations import render_html
from chat.events import CitationPayload, ClaimPayload, CuratedPayload, DoneEvent, Event, Timings, citation_from_stored
from chat.models import Citation, Conversation, Message
from chat.review.scope import ReviewScope, review_scope
from chat.review.scope import is_reviewer as is_reviewer  # where the API, the pages and judgements ask it
from kb.library.access import visible_documents

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
    unsupported: list[ClaimPayload] = field(default_factory=list)  # chat.claim_support's flags, with verdicts
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
        from chat.review.curated import curated_payload  # chat.review.curated reads this module

        done["curated"] = cast(CuratedPayload, curated_payload(m.curated, vector=m.query_vector))
    return [*text, {"type": "citations", "message": m.pk, "citations": view.citations}, done]


def conversation_replay(conversation: Conversation, *, viewer: Any, since: int | None = None,
                        limit: int = MESSAGES_PAGE) -> list[Event]:
    """The events a reader connecting now gets first: the latest `limit` messages (after `since`), as stored.
    Earlier ones come from the REST API, a page at a time."""
    page = conversation_page(conversation, viewer=viewer, since=since, limit=limit)
    return [event for view in page.views for event in message_events(view)]
