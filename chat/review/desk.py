"""The review desk's reads: its queues and counts, one answer or a conversation as a reviewer sees it.

What a reviewer sees of an answer is what they would see as its reader (chat.selectors.message_views), except that
here, on the desk alone, their grants (chat.review.scope) count as reading the documents they cover; each answer
shown through a grant is written to the access log as it is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.postgres.expressions import ArraySubquery
from django.db.models import BooleanField, Count, Exists, ExpressionWrapper, OuterRef, Prefetch, Q, QuerySet, Subquery

from chat.match import CLOSEST
from chat.models import Citation, Conversation, Feedback, Judgement, Message, ReviewAccess
from chat.review.scope import ReviewScope, access_log, review_scope
from chat.selectors import MESSAGES_PAGE, MessagePage, MessageView, conversation_page, message_views
from kb.library.access import visible_documents, visible_folders
from kb.library.models import Document, Folder


def review_conversation_page(conversation: Conversation, *, viewer: Any, before: int | None = None,
                             limit: int = MESSAGES_PAGE) -> MessagePage:
    """A page of any conversation as the review desk shows it to the reviewer `viewer` (their grants count),
    each answer shown through a grant written to the access log."""
    page = conversation_page(conversation, viewer=viewer, before=before, limit=limit, scope=review_scope(viewer))
    _logged(page.views, viewer=viewer, surface=ReviewAccess.Surface.REVIEW_CONVERSATION)
    return page


def _logged(views: Sequence[MessageView], *, viewer: Any, surface: str) -> None:
    access_log(viewer, [(v.message.pk, v.grants) for v in views if v.grants], surface=surface)


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
    tests/chat/review/test_review_queue.py checks it against is_withheld answer by answer."""
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
