"""Writes: asking a question, producing (storing and publishing) its answer; reviewers' feedback is chat.review.feedback."""

from __future__ import annotations

import gc
import logging
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any, cast

from django.conf import settings
from django.db import reset_queries, transaction
from django.db.models import Count, Exists, OuterRef, Q, QuerySet, Value
from django.db.models.functions import Concat
from django.utils import timezone, translation
from django.utils.translation import gettext, gettext_noop

from accounts.acl import is_active_user
from accounts.language import language_for
from chat.answer_counters import answer_finished
from chat.answering import AnswerRecord, answer_stream
from chat.events import CitationPayload, Event, publish
from chat.models import Citation, Conversation, Message
from chat.selectors import earlier_questions
from kb import queues
from kb.upkeep import Ended, Lease

log = logging.getLogger(__name__)

MAX_QUESTION = 2000


class ChatError(ValueError):
    """A request the chat cannot take; the message is for the user, in their language (the active one)."""


class NotFound(ChatError):
    """No such conversation or message for this user (missing and foreign look the same)."""


class TooManyQuestions(ChatError):
    """The user asked more than KB_ASKS_PER_MINUTE questions in the last minute."""


class QueueUnavailable(ChatError):
    """The answer's job could not be queued (the broker is out of reach); the question is kept, its answer
    failed with the reason."""


QUEUE_DOWN = gettext_noop("The answer queue is unavailable, so this question was not answered; ask again in a moment.")


@dataclass(frozen=True)
class Asked:
    conversation: Conversation
    question: Message
    answer: Message


@transaction.atomic
def question_ask(*, user: Any, question: str, conversation_id: int | None = None, enqueue: bool = True) -> Asked:
    """Store the question and an empty answer, and queue the answer's production after commit.

    Returns at once; the answer streams to the conversation's group. `enqueue=False`
    leaves producing it to the caller (`answer_produce`), as tests and the bench do. The answer's
    own sentences (a refusal, an error) will be in the active language: the asker's.
    """
    question = question.strip()
    if not question:
        raise ChatError(gettext("the question is empty"))
    if len(question) > MAX_QUESTION:
        raise ChatError(gettext("the question is longer than %(max)s characters") % {"max": MAX_QUESTION})
    if not is_active_user(user):
        raise NotFound(gettext("no such conversation"))
    _check_rate(user)
    if conversation_id is None:
        conversation = Conversation.objects.create(owner=user, title=_title(question))
    else:
        found = Conversation.objects.select_for_update().filter(pk=conversation_id, owner=user).first()
        if found is None:
            raise NotFound(gettext("no such conversation"))
        conversation = found
        conversation.save(update_fields=["updated_at"])
    asked = Message.objects.create(conversation=conversation, role=Message.Role.USER, text=question)
    answer = Message.objects.create(
        conversation=conversation, role=Message.Role.ASSISTANT, question=asked, status=Message.Status.PENDING
    )
    events: list[Event] = [{"type": "question", "message": asked.pk, "text": question},
                           {"type": "status", "message": answer.pk, "state": "queued"}]
    for event in events:
        transaction.on_commit(partial(publish, conversation.pk, event))
    if enqueue:
        transaction.on_commit(partial(_answer_send, answer, translation.get_language()))
    return Asked(conversation, asked, answer)


def _answer_send(answer: Message, language: str | None = None) -> None:
    """Queue the answer's job. When the broker does not take it (Redis restarting) the answer fails now,
    with the reason, rather than waiting out its lease as a pending answer that nothing will produce."""
    if not queues.send("chat.answer_message", answer.pk, str(answer.job_id), language):
        told = gettext(QUEUE_DOWN)
        _fail_lost(answer.pk, answer.conversation_id, Message.Status.PENDING, reason="not queued", told=told,
                   now=timezone.now())
        raise QueueUnavailable(told)


def _check_rate(user: Any) -> None:
    """Each question costs an embedding, searches and a generation (money, with a paid model):
    a per-user budget, counted from the stored questions so that every web node agrees."""
    limit = settings.KB_ASKS_PER_MINUTE
    recent = Message.objects.filter(
        conversation__owner=user, role=Message.Role.USER, created_at__gte=timezone.now() - timedelta(minutes=1)
    )
    if limit and recent.count() >= limit:
        raise TooManyQuestions(gettext("more than %(limit)s questions in a minute; wait a moment and ask again")
                               % {"limit": limit})


def _title(question: str) -> str:
    line = " ".join(question.split())
    return line if len(line) <= 120 else line[:119].rsplit(" ", 1)[0] + "…"


TITLE_MAX = 200  # Conversation.title
SEARCH_WORDS = 8  # words of a conversation search that count: each one is a condition


def _summaries(conversations: QuerySet[Conversation]) -> QuerySet[Conversation]:
    """With `questions`: how many the owner asked in each (the history list tells look-alike titles apart by it)."""
    return conversations.annotate(questions=Count("messages", filter=Q(messages__role=Message.Role.USER)))


def conversation_search(*, user: Any, query: str = "", limit: int = 50, offset: int = 0) -> list[Conversation]:
    """`user`'s own conversations, most recently active first, `questions` counted; with `query`, only those whose
    title or one of whose questions holds every word of it (ignoring case). The owner is the first condition, so
    nobody's search reaches another person's conversations, reviewers' included (they read them on the desk)."""
    if not is_active_user(user):
        return []
    found = Conversation.objects.filter(owner=user)
    for word in query.split()[:SEARCH_WORDS]:
        asked = Message.objects.filter(conversation=OuterRef("pk"), role=Message.Role.USER, text__icontains=word)
        found = found.filter(Q(title__icontains=word) | Exists(asked))
    # A list, not a lazy queryset: a database lost while serialising would be a 500, not the API's 503.
    return list(_summaries(found).order_by("-updated_at", "-pk")[offset : offset + limit])


def conversation_rename(*, user: Any, conversation_id: int, title: str) -> Conversation:
    """Give one of `user`'s conversations a title of their own (one line; it was their first question). It keeps
    its place in the history: renaming is not activity, so `updated_at` stays."""
    title = " ".join(title.split())
    if not title:
        raise ChatError(gettext("the title is empty"))
    if len(title) > TITLE_MAX:
        raise ChatError(gettext("the title is longer than %(max)s characters") % {"max": TITLE_MAX})
    owned = Conversation.objects.filter(pk=conversation_id, owner=user) if is_active_user(user) else None
    if owned is None or not owned.update(title=title):
        raise NotFound(gettext("no such conversation"))
    return _summaries(owned).get()


def conversation_delete(*, user: Any, conversation_id: int) -> None:
    """Delete one of `user`'s conversations for good: its questions, answers, citations, flags and verdicts.

    A real delete, not one hidden from the owner only: the questions are the employee's own words, and "Delete"
    on the Ask page promises they are gone, from the review desk and the content gaps too, which read the same
    rows and so simply no longer list them (a reviewer acting on one gets "no such answer"). The verdicts on its
    answers go with them: the evaluation set they would join (`export_judgements`) needs the question, which is
    what the owner took back. Nothing else holds a key to them: the review access log keeps an answer's number by
    design. Its stream refuses from then on (the consumer finds no conversation of theirs, 4403), as does asking
    in it; a worker still writing one of its answers updates no row (its claim, and every write, match nothing).
    """
    owned = Conversation.objects.filter(pk=conversation_id, owner=user) if is_active_user(user) else None
    if owned is None or not owned.delete()[0]:  # one transaction, cascades included
        raise NotFound(gettext("no such conversation"))


class _Writer:
    """Stores each event of one answer, then publishes it: a reader who connects late
    reads the stored part and receives only what comes after (chat.consumers).

    Every piece the citation filter releases is written and sent at once: it already
    comes a word at a time, and a piece held back for batching would sit unseen for as
    long as the model pauses.
    """

    def __init__(self, message: Message) -> None:
        self.message = message
        self.conversation_id = message.conversation_id

    def send(self, event: Event) -> None:
        publish(self.conversation_id, event)

    def update(self, **fields: Any) -> None:
        Message.objects.filter(pk=self.message.pk).update(**fields)

    def finish(self, event: Event, **fields: Any) -> None:
        fields.setdefault("finished_at", timezone.now())
        self.update(**fields)
        answer_finished(fields["status"], first_token_ms=fields.get("first_token_ms"), total_ms=fields.get("total_ms"))
        self.send(event)


def answer_produce(*, message_id: int, job_id: str | uuid.UUID | None = None, worker: str = "",
                   language: str | None = None) -> str | None:
    """Produce the answer stored as `message_id`: its final status, or None when it was not ours to produce.

    Claims the row (pending → running, in the name of `worker`) so a redelivered or stale job does
    nothing; never raises for a failed answer (the reader gets an `error` event and the row says why).
    Its own sentences are in `language` (the asker's when they asked), else the one the asker chose.
    """
    now = timezone.now()
    claim = Message.objects.filter(pk=message_id, role=Message.Role.ASSISTANT)
    if job_id is not None:
        claim = claim.filter(job_id=job_id)
    running = {"status": Message.Status.RUNNING, "started_at": now, "worker": worker[:255]}
    # A pending answer has never run, so it has nothing to clear: the common case costs one statement.
    if not claim.filter(status=Message.Status.PENDING).update(**running):
        # A running answer whose worker died long ago (acks_late redelivers its job) starts over.
        abandoned = claim.filter(ANSWER_LEASE.lapsed(now))
        if not abandoned.update(**running, text="", error="", source_documents=[]):
            return None
        Citation.objects.filter(message_id=message_id).delete()
    message = Message.objects.select_related("conversation__owner", "question").get(pk=message_id)
    with translation.override(language or language_for(message.conversation.owner)):
        return _produce(message)


def _produce(message: Message) -> str | None:
    message_id = message.pk
    writer = _Writer(message)
    status: str | None = None
    try:
        question = message.question.text if message.question else ""
        stream = answer_stream(user=message.conversation.owner, question=question, message=message.pk,
                               earlier=earlier_questions(message))
        for event in stream:
            status = _store(writer, event, stream.record) or status
        if status is None:
            raise RuntimeError("the answer stream ended without done, refused or error")
    except Exception:
        log.exception("answer %s failed", message_id)
        status = Message.Status.FAILED
        writer.finish({"type": "error", "message": message_id,
                       "error": gettext("The answer could not be finished: an internal error occurred.")},
                      status=status, error="internal error (see the worker log)")
    finally:
        # Request-scoped memory goes now: the generator (sources, prompt, backend state),
        # the query log DEBUG keeps, and a young-generation sweep for the cycles they leave.
        del writer
        reset_queries()
        gc.collect(0)
    return status


LOST = gettext_noop("The answer was lost (the server stopped while producing it); please ask again.")


def answers_end(answers: QuerySet[Message], why: str) -> Ended:
    """Fail the `answers` whose work was lost (`why`: "lease expired", "worker lost", ...), each one conditional on
    the status read; their readers get an `error` event now."""
    now = timezone.now()
    return +Counter(failed=sum(_fail_lost(pk, conversation_id, status, reason=why, now=now) for pk, conversation_id, status
                               in answers.values_list("pk", "conversation_id", "status")))


# Kept by kb.upkeep (registered in chat.apps): an answer running or pending for KB_ANSWER_LEASE_SECONDS, one whose
# worker was started again or fell silent, fails with its reason.
ANSWER_LEASE = Lease(work="answers", model=Message, running=Q(role=Message.Role.ASSISTANT, status=Message.Status.RUNNING),
                     moved="started_at", waiting=Q(role=Message.Role.ASSISTANT, status=Message.Status.PENDING),
                     waited="created_at", seconds=lambda: settings.KB_ANSWER_LEASE_SECONDS, end=answers_end)


def answer_job_lost(*, message_id: int, job_id: str | None) -> bool:
    """The job producing `message_id` ended without finishing it (its worker process was killed, or
    ran past the hard time limit): fail the answer now rather than when its lease runs out. False when
    the answer is finished, or is another job's (a newer attempt owns it)."""
    claim = ANSWER_LEASE.rows(ANSWER_LEASE.running | ANSWER_LEASE.waiting, pk=message_id)
    if job_id is not None:
        claim = claim.filter(job_id=job_id)
    return bool(answers_end(claim, "worker lost"))


def _fail_lost(pk: int, conversation_id: int, status: str, *, reason: str, now: datetime, told: str = LOST) -> bool:
    # Conditional on the status read: a worker that finishes it meanwhile wins.
    if not Message.objects.filter(pk=pk, status=status).update(status=Message.Status.FAILED,
                                                               error=f"{reason}: {told}", finished_at=now):
        return False
    answer_finished(Message.Status.FAILED)
    publish(conversation_id, {"type": "error", "error": told, "message": pk})
    return True


def _store(writer: _Writer, event: Event, record: AnswerRecord) -> str | None:
    """Store one event of the stream (with what `record` holds for it) and publish it; the answer's
    final status once it is finished, else None."""
    if event["type"] == "token":
        writer.update(text=Concat("text", Value(event["text"])))
        writer.send(event)
        return None
    if event["type"] == "status":
        if event["state"] == "generating":
            writer.update(backend=event["backend"], model=event["model"][:200], notice=event["notice"][:300],
                          source_documents=record.sources, **_search_facts(record))
        writer.send(event)
        return None
    if event["type"] == "refused":
        # The reason holds the signals (distances, confidence): stored for reviewers, never sent to the asker.
        writer.finish(event | {"reason": ""}, status=Message.Status.REFUSED, text=event["text"],
                      refusal_reason=event["reason"], **_search_facts(record), **event["timings"])
        return Message.Status.REFUSED
    if event["type"] == "citations":
        Citation.objects.bulk_create(_citation_row(writer.message.pk, c) for c in event["citations"])
        writer.send(event)
        return None
    if event["type"] == "done":
        claims = [claim | {"verdict": Message.Verdict.OPEN.value} for claim in event["unsupported"]]
        # The label goes to the reader; the numbers behind it stay with the evaluation (they are retrieval's).
        sent = cast(Event, {k: v for k, v in event.items() if k != "match_signals"})
        writer.finish(sent, status=Message.Status.DONE, text=event["text"], unsupported=claims,
                      match=event.get("match", ""), curated_id=record.curated, **event["timings"])
        return Message.Status.DONE
    if event["type"] == "error":
        fields: dict[str, Any] = {"status": Message.Status.FAILED, "error": event["error"]}
        if record.withdrawn:
            fields["text"] = ""  # what it drew on may now be hidden from its reader
        writer.finish(event, **fields)
        return Message.Status.FAILED
    raise ValueError(f"unexpected answer event {event['type']!r}")


def _search_facts(record: AnswerRecord) -> dict[str, Any]:
    return {"intent": record.intent, "nearest_distance": record.nearest_distance, "threshold": record.threshold,
            "signals": record.signals, "query_vector": record.vector}


def _citation_row(message_id: int, citation: CitationPayload) -> Citation:
    """The stored form of a citation the stream sent (chat.events.citation_from_stored reads it back)."""
    return Citation(message_id=message_id, **citation | {
        "document_title": citation["document_title"][:300], "label": citation["label"][:1000],
        "link": citation["link"][:300]})
