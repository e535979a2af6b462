"""Verdicts that teach retrieval (chat.remembering, search.memory): which verdict remembers a question for which
passage, which forgets it, and what a remembered question does for the next person who asks in other words (real
database, real retrieval and answers, the extractive backend)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from chat.claim_support import quoted_spans
from chat.models import Judgement, Message
from chat.review.feedback import feedback_add
from chat.review.judgements import message_judge, message_rate, message_unjudge
from chat.services import ChatError, NotFound
from kb.library.models import Chunk, Document
from kb.library.tasks import ingest_document
from search.memory import passage_at
from search.models import RememberedQuestion
from search.retrieval import hybrid_search
from tests.chat.conftest import EXPORT_QUESTION, SHIPMENTS
from tests.chat.test_api import answered
from tests.factories import ingested_document, uploaded_document

pytestmark = pytest.mark.django_db

# A handbook whose words are not the askers': "notebooks ... exchanged" answers a cracked laptop screen.
HANDBOOK = """# Workplace help

## Equipment swaps

Damaged notebooks are exchanged at the service desk on floor 2 within one business day; bring the asset tag.
A loan device is yours for as long as the exchange takes.

## Monitors and docks

External monitors and docking stations are ordered through the equipment portal and arrive within a week.
Each desk may have two monitors and one dock.

## Printing

Printers on every floor print double-sided by default; a badge tap releases the job.
"""
SWAP = "Damaged notebooks are exchanged at the service desk on floor 2 within one business day; bring the asset tag."
ASKED = "My laptop screen cracked, what should I do?"
# Another person's words for the same need (MiniLM cosine distance to ASKED 0.25: within KB_MEMORY_DISTANCE).
PARAPHRASE = "I dropped my laptop and the display broke, how do I get it repaired?"


@pytest.fixture
def handbook(people: dict[str, Any]) -> Document:
    return ingested_document(HANDBOOK, "handbook.md")


@pytest.fixture
def shipments(people: dict[str, Any]) -> Document:
    return ingested_document(SHIPMENTS, "shipments.md")


def refused(user: Any, question: str, settings: Any) -> Message:
    """Refused whatever was found: the answerability cutoff out of reach (a remembered question still answers)."""
    before = settings.KB_ANSWERABILITY
    settings.KB_ANSWERABILITY = {**before, "cutoff": 0.999999}
    try:
        answer = answered(user, question)
    finally:
        settings.KB_ANSWERABILITY = before
    return answer


def pick(document: Document, sentence: str) -> tuple[int, int]:
    start = (document.canonical_text or "").index(sentence)
    return start, start + len(sentence)


def swap_passage(document: Document) -> Chunk:
    return Chunk.objects.get(document=document, content__contains="notebooks are exchanged")


def first_cited(answer: Message) -> int:
    numbers = {c.number for c in answer.citations.all()}
    return next(int(n) for n in re.findall(r"\[(\d{1,3})\]", answer.text) if int(n) in numbers)


def link(user: Any, question: str, document: Document, sentence: str, settings: Any) -> RememberedQuestion:
    """`user` asks, is refused, and says it should have been answered from `sentence` of `document`."""
    refusal = refused(user, question, settings)
    assert refusal.status == Message.Status.REFUSED
    start, end = pick(document, sentence)
    message_judge(judge=user, message_id=refusal.pk, role=Judgement.Role.ASKER, kind=Judgement.Kind.SHOULD_ANSWER,
                  document_id=document.pk, start=start, end=end)
    return RememberedQuestion.objects.get(message_id=refusal.pk)


# --------------------------------------------------------------------------- verdicts that remember


def quoted_range(citation: Any, quoted: list[tuple[int, int]]) -> tuple[int, int]:
    """What answered, as offsets into the passage: from the first to the last sentence the answer quoted from it."""
    offset = citation.start - citation.chunk.start
    return offset + min(a for a, _ in quoted), offset + max(b for _, b in quoted)


def test_helpful_remembers_the_first_cited_passage_with_the_sentences_it_quoted(
    shipments: Document, people: dict[str, Any], settings: Any
) -> None:
    answer = answered(people["carol"], EXPORT_QUESTION)
    assert answer.status == Message.Status.DONE
    judgement = message_judge(judge=people["carol"], message_id=answer.pk, role=Judgement.Role.ASKER,
                              kind=Judgement.Kind.HELPFUL)

    citation = answer.citations.get(number=first_cited(answer))
    assert citation.chunk is not None
    quoted = quoted_spans(answer.text, citation.number, citation.quote)
    assert quoted, answer.text  # the extractive answer quotes its sentences word for word
    row = RememberedQuestion.objects.get()
    assert (row.kind, row.document_id, row.stable_id, row.question, row.judge, row.judgement_id, row.message_id) == (
        "helpful", shipments.pk, citation.chunk.stable_id, EXPORT_QUESTION, people["carol"], judgement.pk, answer.pk)
    assert (row.span_start, row.span_end) == quoted_range(citation, quoted)

    # "Helpful" on a refusal (right not to answer) remembers nothing.
    refusal = refused(people["carol"], "What colour are the office chairs?", settings)
    message_judge(judge=people["carol"], message_id=refusal.pk, role=Judgement.Role.ASKER, kind=Judgement.Kind.HELPFUL)
    assert RememberedQuestion.objects.count() == 1


def test_a_citation_whose_passage_was_re_indexed_is_remembered_for_the_passage_at_its_range(
    shipments: Document, people: dict[str, Any]
) -> None:
    answer = answered(people["carol"], EXPORT_QUESTION)
    citation = answer.citations.get(number=first_cited(answer))
    stable_id = citation.chunk.stable_id if citation.chunk else ""
    # A new version with another section edited: every chunk row is replaced, this passage's text is not.
    uploaded_document(SHIPMENTS.replace("a Carrier field", "a Carrier dropdown"), "shipments.md")
    assert ingest_document(shipments.pk) == "ready"
    citation.refresh_from_db()
    assert citation.chunk_id is None

    message_rate(user=people["carol"], message_id=answer.pk, rating=1)
    assert RememberedQuestion.objects.get().stable_id == stable_id


def test_should_answer_with_a_picked_passage_teaches_retrieval_and_a_later_wrong_verdict_forgets_it(
    handbook: Document, people: dict[str, Any], settings: Any
) -> None:
    swap = swap_passage(handbook)
    before = hybrid_search(user=people["bob"], query=PARAPHRASE)
    assert not before.answerable, before.probability  # refused: the handbook's words are not the asker's
    assert answered(people["bob"], PARAPHRASE).status == Message.Status.REFUSED

    row = link(people["alice"], ASKED, handbook, SWAP, settings)
    start, end = pick(handbook, SWAP)
    judgement = Judgement.objects.get(message_id=row.message_id)
    assert (judgement.kind, judgement.document_id, judgement.passage, judgement.start, judgement.end) == (
        "should_answer", handbook.pk, swap.stable_id, start, end)
    assert (row.kind, row.document_id, row.stable_id, row.question, row.judge, row.judgement_id) == (
        "linked", handbook.pk, swap.stable_id, ASKED, people["alice"], judgement.pk)
    assert (row.span_start, row.span_end) == (start - swap.start, end - swap.start)

    after = hybrid_search(user=people["bob"], query=PARAPHRASE)
    assert after.answerable and after.hits[0].chunk_id == swap.pk and after.hits[0].remembered == (row.pk,)
    assert after.hits[0].remembered_spans == ((start, end),)
    assert hybrid_search(user=people["bob"], query="What is the cafeteria menu on Fridays?").remembered == []

    # Bob's answer was led there by the remembered question; his "wrong" says it should not have been.
    answer = answered(people["bob"], PARAPHRASE)
    assert answer.status == Message.Status.DONE and answer.signals["remembered"] == [row.pk]
    assert answer.citations.get(number=1).document_id == handbook.pk
    message_judge(judge=people["bob"], message_id=answer.pk, role=Judgement.Role.ASKER, kind=Judgement.Kind.WRONG)
    assert not RememberedQuestion.objects.exists()
    assert not hybrid_search(user=people["bob"], query=PARAPHRASE).remembered


def test_wrong_with_a_picked_passage_remembers_it_and_forgets_what_led_to_the_answer(
    handbook: Document, people: dict[str, Any], settings: Any
) -> None:
    led = link(people["alice"], ASKED, handbook, SWAP, settings)
    answer = answered(people["bob"], PARAPHRASE)
    assert answer.signals["remembered"] == [led.pk]
    start, end = pick(handbook, "Each desk may have two monitors and one dock.")
    message_judge(judge=people["sam"], message_id=answer.pk, role=Judgement.Role.REVIEWER, kind=Judgement.Kind.WRONG,
                  document_id=handbook.pk, start=start, end=end)
    row = RememberedQuestion.objects.get()  # the one that led here is gone, the one just picked stays
    assert (row.kind, row.message_id, row.judge, row.question) == ("linked", answer.pk, people["sam"], PARAPHRASE)
    assert row.stable_id == Chunk.objects.get(document=handbook, content__contains="two monitors").stable_id


def test_a_picked_passage_is_checked_and_nothing_is_stored_on_an_error(
    handbook: Document, shipments: Document, people: dict[str, Any], settings: Any
) -> None:
    vault = ingested_document("# Vault\n\n## Codes\n\nThe vault code is kept by the on-call engineer.\n", "vault.md",
                              public=False, groups=[people["groups"]["engineering"]])
    refusal = refused(people["bob"], ASKED, settings)
    start, end = pick(handbook, SWAP)
    length = len(handbook.canonical_text or "")

    def judge(**given: Any) -> None:
        message_judge(judge=people["bob"], message_id=refusal.pk, role=Judgement.Role.ASKER,
                      kind=given.pop("kind", Judgement.Kind.SHOULD_ANSWER), **given)

    cases: list[tuple[dict[str, Any], str]] = [
        ({"document_id": handbook.pk, "start": start}, "both start and end"),
        ({"document_id": handbook.pk, "end": end}, "both start and end"),
        ({"start": start, "end": end}, "goes with the document"),
        ({"document_id": handbook.pk, "start": end, "end": start}, "not inside the document's text"),
        ({"document_id": handbook.pk, "start": start, "end": length + 1}, "not inside the document's text"),
        ({"document_id": handbook.pk, "start": start, "end": end, "kind": Judgement.Kind.HELPFUL},
         "only a 'should_answer' or 'wrong' judgement names a document"),
    ]
    for given, message in cases:
        with pytest.raises(ChatError, match=message):
            judge(**given)
    with pytest.raises(NotFound):  # bob (finance) may not read the vault: it does not exist for him
        judge(document_id=vault.pk, start=0, end=5)
    # A range that lies in no passage of the document as it is now (the passage moved since the page was read).
    Chunk.objects.filter(document=shipments).update(start=0, end=1)
    with pytest.raises(ChatError, match="lies in no passage"):
        judge(document_id=shipments.pk, start=10, end=20)
    assert not Judgement.objects.exists() and not RememberedQuestion.objects.exists()
    assert Message.objects.get(pk=refusal.pk).rating == 0


# --------------------------------------------------------------------------- verdicts that forget


def test_taking_back_or_changing_a_verdict_forgets_what_it_taught(
    shipments: Document, people: dict[str, Any]
) -> None:
    answer = answered(people["carol"], EXPORT_QUESTION)
    carol = people["carol"]
    message_rate(user=carol, message_id=answer.pk, rating=1)
    assert RememberedQuestion.objects.count() == 1
    message_unjudge(judge=carol, message_id=answer.pk, role=Judgement.Role.ASKER)
    assert not RememberedQuestion.objects.exists()

    message_rate(user=carol, message_id=answer.pk, rating=1)
    message_rate(user=carol, message_id=answer.pk, rating=-1, reason="should_refuse")  # a second verdict replaces it
    assert not RememberedQuestion.objects.exists()
    message_rate(user=carol, message_id=answer.pk, rating=1)
    assert RememberedQuestion.objects.count() == 1
    message_rate(user=carol, message_id=answer.pk, rating=0)
    assert not RememberedQuestion.objects.exists()


def test_support_confirms_a_citation_or_flags_it_as_the_wrong_source(
    shipments: Document, handbook: Document, people: dict[str, Any], settings: Any
) -> None:
    sam = people["sam"]
    answer = answered(people["carol"], EXPORT_QUESTION)
    citation = answer.citations.get(number=1)
    quoted = quoted_spans(answer.text, 1, citation.quote)
    feedback_add(reviewer=sam, message=answer, kind="right_source", citation_number=1)
    row = RememberedQuestion.objects.get()
    assert (row.kind, row.judge, row.message_id, row.judgement_id, row.question) == (
        "confirmed", sam, answer.pk, None, EXPORT_QUESTION)
    assert citation.chunk is not None and row.stable_id == citation.chunk.stable_id
    if quoted:
        assert (row.span_start, row.span_end) == quoted_range(citation, quoted)
    with pytest.raises(ChatError, match="confirms one citation"):
        feedback_add(reviewer=sam, message=answer, kind="right_source")

    feedback_add(reviewer=sam, message=answer, kind="wrong_source", citation_number=1, note="not this one")
    assert not RememberedQuestion.objects.exists()

    # A wrong source on an answer a remembered question led to forgets that question too.
    led = link(people["alice"], ASKED, handbook, SWAP, settings)
    led_answer = answered(people["bob"], PARAPHRASE)
    assert led_answer.signals["remembered"] == [led.pk]
    feedback_add(reviewer=sam, message=led_answer, kind="wrong_source", citation_number=1)
    assert not RememberedQuestion.objects.exists()


def test_one_judge_cannot_fill_the_memory(shipments: Document, people: dict[str, Any], settings: Any) -> None:
    settings.KB_MEMORY_JUDGE_FLOOR = 2
    answers = [answered(people["carol"], EXPORT_QUESTION) for _ in range(3)]
    for answer in answers:
        message_rate(user=people["carol"], message_id=answer.pk, rating=1)
    kept = RememberedQuestion.objects.filter(judge=people["carol"])
    assert sorted(kept.values_list("message_id", flat=True)) == [answers[1].pk, answers[2].pk]  # the oldest went
    other = answered(people["dave"], EXPORT_QUESTION)
    message_rate(user=people["dave"], message_id=other.pk, rating=1)
    assert RememberedQuestion.objects.filter(judge=people["dave"]).count() == 1
    assert kept.count() == 2


def test_a_changed_passage_forgets_its_questions_and_an_unchanged_one_keeps_them(
    handbook: Document, people: dict[str, Any], settings: Any
) -> None:
    row = link(people["alice"], ASKED, handbook, SWAP, settings)
    # Another section edited: the swap passage's text (its stable id) is the same, and the question stays.
    uploaded_document(HANDBOOK.replace("one dock", "one docking station"), "handbook.md")
    assert ingest_document(handbook.pk) == "ready"
    assert RememberedQuestion.objects.filter(pk=row.pk).exists()
    assert hybrid_search(user=people["bob"], query=PARAPHRASE).hits[0].remembered == (row.pk,)

    # The swap paragraph edited: the passage it was remembered for is gone, and so is the question.
    uploaded_document(HANDBOOK.replace("one dock", "one docking station").replace("floor 2", "floor 3"), "handbook.md")
    assert ingest_document(handbook.pk) == "ready"
    assert not RememberedQuestion.objects.exists()
    assert passage_at(handbook.pk, *pick(Document.objects.get(pk=handbook.pk), SWAP.replace("floor 2", "floor 3")))
