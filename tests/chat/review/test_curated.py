"""Curated answers (chat.review.curated) on a real index: the rules of writing one, matching a question in other words,
withholding it whole from someone who may not read a cited passage, and going stale when a passage changes."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.contrib.auth.models import Permission

from chat.answering import answer_stream
from chat.models import CuratedAnswer, Message
from chat.review import curated
from chat.selectors import conversation_replay
from chat.services import ChatError, NotFound, answer_produce, question_ask
from kb.library.events import document_indexed
from kb.library.ingest.pipeline import ingest
from kb.library.models import Chunk, Document
from kb.library.services import document_delete, document_upload
from kb.text import embedding
from tests.chat.conftest import SHIPMENTS, received

EXAMPLE = "How do I export the Shipments list to a file?"
PARAPHRASE = "How can I export my list of shipments to a file?"
SENTENCE = "The CSV tab exports the rows that match the current filters"
VAULT_SENTENCE = "The vault rotation code for the Oslo depot is ZX-4412-QUARTZ"


def curator(user: Any) -> Any:
    user.user_permissions.add(Permission.objects.get(codename="curate_answer", content_type__app_label="chat"))
    return type(user).objects.get(pk=user.pk)  # a fresh user: permissions are cached


def span(document: Document, sentence: str) -> tuple[int, int, int]:
    start = document.canonical_text.index(sentence)
    return document.pk, start, start + len(sentence)


def reupload(document: Document, text: str) -> None:
    """A new version of the document, indexed as a worker indexes it (document_indexed is sent)."""
    data = text.encode()
    document_upload(name=document.filename, stream=io.BytesIO(data), size=len(data), enqueue=False)
    assert ingest(document.pk) == Document.Status.READY
    document_indexed.send(sender=reupload, document_ids=[document.pk], sync=True)


@pytest.fixture
def sam(people: dict[str, Any]) -> Any:
    return curator(people["sam"])


@pytest.fixture
def approved(corpus: dict[str, Document], sam: Any) -> CuratedAnswer:
    return curated.curated_create(author=sam, text="Open the Export dialog: the CSV tab exports what you filtered [1].",
                                  questions=[EXAMPLE], citations=[span(corpus["shipments"], SENTENCE)],
                                  statement="There is no Excel export.", approve=True)


def served(user: Any, question: str = PARAPHRASE) -> dict[str, Any]:
    return received(answer_stream(user=user, question=question))[-1]


def test_writing_one_checks_permission_access_markers_ranges_and_questions(
    corpus: dict[str, Document], people: dict[str, Any], sam: Any
) -> None:
    shipments, vault = corpus["shipments"], corpus["vault"]
    good = {"text": "Use the CSV tab [1].", "questions": [EXAMPLE], "citations": [span(shipments, SENTENCE)]}
    with pytest.raises(curated.CurationDenied, match="chat.curate_answer"):
        curated.curated_create(author=people["carol"], **good)
    with pytest.raises(NotFound, match=r"citation \[1\]: no such document"):  # sam may not read the vault
        curated.curated_create(author=sam, **good | {"citations": [span(vault, VAULT_SENTENCE)]})
    with pytest.raises(ChatError, match=r"the text cites \[2\], but there is no such citation"):
        curated.curated_create(author=sam, **good | {"text": "Use the CSV tab [1] [2]."})
    with pytest.raises(ChatError, match=r"citation \[2\] is not cited in the text"):
        curated.curated_create(author=sam, **good | {"citations": [span(shipments, SENTENCE)] * 2})
    with pytest.raises(ChatError, match="at least one example question"):
        curated.curated_create(author=sam, **good | {"questions": ["  "]})
    with pytest.raises(ChatError, match="cite at least one passage"):
        curated.curated_create(author=sam, **good | {"citations": [], "text": "Use the CSV tab."})
    with pytest.raises(ChatError, match="lies in no passage"):
        curated.curated_create(author=sam, **good | {"citations": [(shipments.pk, 10**6, 10**6 + 5)]})
    assert not CuratedAnswer.objects.exists()

    answer = curated.curated_create(author=sam, **good)
    citation = answer.citations.get()
    assert answer.state == CuratedAnswer.State.DRAFT and citation.quote == SENTENCE
    assert citation.quote == shipments.canonical_text[citation.start : citation.end]
    assert Chunk.objects.filter(document=shipments, stable_id=citation.stable_id, start__lte=citation.start).exists()
    assert list(answer.questions.values_list("text", flat=True)) == [EXAMPLE]


def test_an_approved_answer_reaches_a_question_in_other_words_and_a_draft_does_not(
    corpus: dict[str, Document], people: dict[str, Any], sam: Any
) -> None:
    answer = curated.curated_create(author=sam, text="The CSV tab exports what you filtered [1].", questions=[EXAMPLE],
                                    citations=[span(corpus["shipments"], SENTENCE)])
    vector, _ = embedding.embed_query(PARAPHRASE)
    assert curated.curated_for(user=people["carol"], vector=vector) is None  # a draft is never served
    assert served(people["carol"]).get("match") != "curated"

    curated.curated_approve(approver=sam, answer_id=answer.pk)
    match = curated.curated_for(user=people["carol"], vector=vector)
    assert match is not None and match.answer.pk == answer.pk and match.distance <= 0.3
    unrelated, _ = embedding.embed_query("Which carriers does the filter bar list?")
    assert curated.curated_for(user=people["carol"], vector=unrelated) is None

    events = received(answer_stream(user=people["carol"], question=PARAPHRASE))
    done, citations = events[-1], events[-2]["citations"]
    assert done["match"] == "curated" and done["backend"] == "curated" and done["text"] == answer.text
    assert "".join(e["text"] for e in events if e["type"] == "token") == answer.text
    assert done["curated"]["by"] == "sam" and done["curated"]["approved_at"] and done["curated"]["question"] == EXAMPLE
    assert [c["quote"] for c in citations] == [SENTENCE]
    shipments = corpus["shipments"]
    assert citations[0]["link"].startswith(f"/documents/{shipments.pk}/#char={span(shipments, SENTENCE)[1]},")
    assert citations[0]["document_title"] == shipments.title and '<a class="cite"' in done["html"]


def test_a_looser_match_is_served_only_where_retrieval_agrees(
    approved: CuratedAnswer, corpus: dict[str, Document], people: dict[str, Any]
) -> None:
    """"Can I download shipments as a spreadsheet?" is 0.35 from the example question: past KB_CURATED_ALONE, so the
    curated answer needs one of its passages first in retrieval's order; another passage first, and it is not served."""
    vector, _ = embedding.embed_query("Can I download shipments as a spreadsheet?")
    cited = approved.citations.get()
    assert cited.document_id is not None
    passage = Chunk.objects.get(document_id=cited.document_id, stable_id=cited.stable_id)
    other = Chunk.objects.filter(document=corpus["shipments"]).exclude(pk=passage.pk).first()
    assert other is not None
    assert curated.curated_for(user=people["carol"], vector=vector) is None
    assert curated.curated_for(user=people["carol"], vector=vector, first=[other.pk, passage.pk]) is None  # not first
    found = curated.curated_for(user=people["carol"], vector=vector, first=[passage.pk, other.pk])
    assert found is not None and found.answer.pk == approved.pk and 0.15 < found.distance <= 0.6
    far, _ = embedding.embed_query("Which carriers does the filter bar list?")  # agreeing retrieval is not enough
    assert curated.curated_for(user=people["carol"], vector=far, first=[passage.pk]) is None


def test_a_served_answer_is_stored_as_curated_and_replayed_with_its_badge(
    approved: CuratedAnswer, corpus: dict[str, Document], people: dict[str, Any]
) -> None:
    asked = question_ask(user=people["carol"], question=PARAPHRASE, enqueue=False)
    assert answer_produce(message_id=asked.answer.pk) == Message.Status.DONE
    message = Message.objects.get(pk=asked.answer.pk)
    assert message.curated_id == approved.pk and message.backend == "curated" and message.match == "curated"
    assert message.source_documents == [corpus["shipments"].pk] and message.total_ms is not None
    done = conversation_replay(asked.conversation, viewer=people["carol"])[-1]
    assert done["type"] == "done" and done.get("curated", {}).get("statement") == "There is no Excel export."
    assert done["curated"]["question"] == EXAMPLE  # on replay: the example nearest the asker's question


def test_one_unreadable_passage_withholds_the_whole_answer(corpus: dict[str, Document], people: dict[str, Any]) -> None:
    admin = people["admin"]
    admin.groups.add(people["groups"]["engineering"])
    admin = type(admin).objects.get(pk=admin.pk)
    curated.curated_create(author=admin, text="Export with the CSV tab [1]; the vault code is read out by phone [2].",
                           questions=[EXAMPLE], citations=[span(corpus["shipments"], SENTENCE),
                                                           span(corpus["vault"], VAULT_SENTENCE)], approve=True)
    vector, _ = embedding.embed_query(PARAPHRASE)
    assert curated.curated_for(user=people["alice"], vector=vector) is not None  # engineering reads both
    assert curated.curated_for(user=people["carol"], vector=vector) is None
    events = received(answer_stream(user=people["carol"], question=PARAPHRASE))
    assert events[-1].get("match") != "curated" and "ZX-4412" not in str(events) and "vault" not in str(events)
    assert events[-1]["type"] == "done" and corpus["shipments"].title in str(events)  # answered from what she may read


def test_a_changed_passage_makes_it_stale_until_it_cites_the_new_text_and_is_approved_again(
    approved: CuratedAnswer, corpus: dict[str, Document], people: dict[str, Any], sam: Any
) -> None:
    shipments = corpus["shipments"]
    # A change elsewhere in the document leaves the cited passage, and the answer, as they were.
    reupload(shipments, SHIPMENTS.replace("Saved filters appear", "Your saved filters appear"))
    approved.refresh_from_db()
    assert approved.state == CuratedAnswer.State.APPROVED and served(people["carol"])["match"] == "curated"

    changed = SHIPMENTS.replace(SENTENCE, "The CSV tab exports every row, whatever the filters")
    reupload(shipments, changed)
    approved.refresh_from_db()
    assert approved.state == CuratedAnswer.State.STALE
    assert "changed in Shipments console" in approved.stale_reason and "[1]" in approved.stale_reason
    assert served(people["carol"]).get("match") != "curated"
    with pytest.raises(ChatError, match=r"citation \[1\]: the passage changed in “Shipments console”"):
        curated.curated_approve(approver=sam, answer_id=approved.pk)

    shipments.refresh_from_db()
    curated.curated_update(editor=sam, answer_id=approved.pk, text="The CSV tab exports every row [1].",
                           questions=[EXAMPLE], approve=True,
                           citations=[span(shipments, "The CSV tab exports every row, whatever the filters")])
    approved.refresh_from_db()
    assert approved.state == CuratedAnswer.State.APPROVED and approved.stale_reason == ""
    assert served(people["carol"])["text"] == "The CSV tab exports every row [1]."


def test_a_deleted_document_makes_it_stale_and_a_missing_passage_is_never_served(
    approved: CuratedAnswer, corpus: dict[str, Document], people: dict[str, Any]
) -> None:
    vector, _ = embedding.embed_query(PARAPHRASE)
    # Re-indexed without the signal (a race): still "approved", but the passage is gone, so it is not served.
    Chunk.objects.filter(document=corpus["shipments"]).update(stable_id="gone")
    assert CuratedAnswer.objects.get(pk=approved.pk).state == CuratedAnswer.State.APPROVED
    assert curated.curated_for(user=people["carol"], vector=vector) is None

    document_delete(document=corpus["shipments"])
    approved.refresh_from_db()
    assert approved.state == CuratedAnswer.State.STALE and "was deleted" in approved.stale_reason
    assert approved.citations.get().document_id is None
    with pytest.raises(ChatError, match="its document was deleted"):
        curated.curated_approve(approver=people["admin"], answer_id=approved.pk)


def test_retire_takes_it_out_of_service_and_delete_removes_it(approved: CuratedAnswer, people: dict[str, Any],
                                                              sam: Any) -> None:
    curated.curated_retire(user=sam, answer_id=approved.pk)
    assert served(people["carol"]).get("match") != "curated"
    desk = curated.curated_desk(viewer=sam)
    assert desk.counts == {"draft": 1, "approved": 0, "stale": 0} and desk.hidden == 0
    curated.curated_delete(user=sam, answer_id=approved.pk)
    assert not CuratedAnswer.objects.exists()
