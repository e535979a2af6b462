"""What verdicts on an answer teach retrieval (search.memory): the passage an answer's citation stands for, and the
remembered questions a verdict adds or contradicts. chat.review.judgements (the asker's and reviewers' verdicts) and
chat.review.feedback.feedback_add (support's confirmed or wrong citations) call these; who may give which verdict is
theirs to check.
"""

from __future__ import annotations

import re
from typing import Any

from chat.claim_support import quoted_spans
from chat.models import Citation, Message
from search import memory
from search.models import RememberedQuestion

MARKER = re.compile(r"\[(\d{1,3})\]")  # an answer's stored [n] (chat.citations writes them so)
FOCUS = re.compile(r"[#&]focus=(\d+),(\d+)(?:&|$)")  # the sentence the answer quoted (kb.library.models.passage_link)


def first_citation(message: Message) -> Citation | None:
    """The citation the answer's text cites first (its first [n] that names one), else its lowest number."""
    citations = {c.number: c for c in message.citations.all()}
    for match in MARKER.finditer(message.text):
        found = citations.get(int(match.group(1)))
        if found is not None:
            return found
    return citations[min(citations)] if citations else None


def cited_passage(citation: Citation, answer: str = "") -> tuple[int, str, tuple[int, int]] | None:
    """The passage (document id, stable id) a citation quotes, and the document's range that answered: from the first
    to the last of the `answer`'s sentences citing it that stand in its quote (chat.claim_support.quoted_spans), else the
    quoted sentence (`&focus=` in its link), else the quote. The citation's chunk while it exists; after a re-index,
    the passage of the document's current version at the quote (search.memory.passage_at); None when there is none."""
    if citation.document_id is None:
        return None
    quoted = quoted_spans(answer, citation.number, citation.quote) if answer else []
    focus = FOCUS.search(citation.link)
    if quoted:
        span = (citation.start + min(a for a, _ in quoted), citation.start + max(b for _, b in quoted))
    else:
        span = (int(focus.group(1)), int(focus.group(2))) if focus else (citation.start, citation.end)
    chunk = citation.chunk if citation.chunk_id is not None else None
    if chunk is None:
        chunk = memory.passage_at(citation.document_id, citation.start, citation.end)
    return (citation.document_id, chunk.stable_id, span) if chunk is not None else None


def question_of(message: Message) -> str:
    return message.question.text if message.question_id and message.question else ""


def remember_cited(message: Message, citation: Citation | None, *, kind: str, judge: Any,
                   judgement_id: int | None = None) -> RememberedQuestion | None:
    """Remember the answer's question for the passage `citation` quotes (nothing when it has none any more)."""
    passage = cited_passage(citation, message.text) if citation is not None else None
    if passage is None:
        return None
    document_id, stable_id, span = passage
    return memory.remember(document_id=document_id, stable_id=stable_id, question=question_of(message), kind=kind,
                           message_id=message.pk, judge=judge, judgement_id=judgement_id, span=span)


def forget_contradicted(message: Message) -> int:
    """A verdict against the answer: the remembered questions that led retrieval to it were wrong to."""
    led = [int(i) for i in (message.signals or {}).get("remembered", []) if isinstance(i, int)]
    return memory.forget(ids=led) if led else 0


def remember_confirmed(message: Message, citation: Citation | None, *, judge: Any) -> RememberedQuestion | None:
    """Support confirmed the citation: the answer's question is remembered for the passage it quotes."""
    return remember_cited(message, citation, kind=RememberedQuestion.Kind.CONFIRMED, judge=judge)


def forget_cited(message: Message, citation: Citation | None) -> int:
    """Support flagged the answer's source as wrong: forget what this answer taught about the passage the citation
    quotes (every passage, flagged as a whole) and the remembered questions that led to it."""
    passage = cited_passage(citation) if citation is not None else None
    if citation is not None and passage is None:
        forgotten = 0
    else:
        forgotten = memory.forget(message_id=message.pk, passage=passage[:2] if passage else None)
    return forgotten + forget_contradicted(message)
