"""answer_stream and the producer on a real index: refusal before any model, server-side citations, ACL at answer time."""

from __future__ import annotations

import json
import re
import socket
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from django.utils import timezone

from chat.answering import ACCESS_CHANGED, answer_stream
from chat.models import Citation, Message
from chat.selectors import WITHHELD, conversation_replay, message_views
from chat.services import answer_produce, question_ask
from kb.library.models import Chunk, Document
from tests.chat.conftest import EXPORT_QUESTION, OOD_QUESTION, VAULT_QUESTION, received
from tests.chat.openai_stub import StubOpenAI
from tests.factories import ingested_document


def use_stub(settings: Any, stub: StubOpenAI, read_timeout: float = 5.0) -> None:
    settings.KB_ANSWER_BACKEND = "openai"
    settings.KB_OPENAI_BASE_URL = stub.url
    settings.KB_OPENAI_MODEL = "stub-model"
    settings.KB_OPENAI_API_KEY = "sk-test"
    settings.KB_OPENAI_READ_TIMEOUT = read_timeout


def ask_and_produce(user: Any, question: str, conversation_id: int | None = None) -> Message:
    asked = question_ask(user=user, question=question, conversation_id=conversation_id, enqueue=False)
    answer_produce(message_id=asked.answer.pk)
    return Message.objects.get(pk=asked.answer.pk)


def test_events_come_in_order_and_every_quote_is_the_chunks_content(corpus: dict[str, Document], people: dict[str, Any]) -> None:
    events = received(answer_stream(user=people["carol"], question=EXPORT_QUESTION))
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["status", "status"] and [e["state"] for e in events[:2]] == ["retrieving", "generating"]
    assert set(kinds[2:-2]) == {"token"} and kinds[-2:] == ["citations", "done"]
    done = events[-1]
    assert "".join(e["text"] for e in events if e["type"] == "token") == done["text"]
    assert done["intent"] == "screen" and done["backend"] == "extractive"
    assert "CSV and PDF [1]" in done["text"]
    citations = events[-2]["citations"]
    assert [c["number"] for c in citations] == [1]
    for c in citations:
        chunk = Chunk.objects.get(pk=c["chunk_id"])
        assert c["quote"] == chunk.content
        base = f"/documents/{chunk.document_id}/#char={chunk.start},{chunk.end}"
        focus = re.fullmatch(re.escape(base) + r"&focus=(\d+),(\d+)", c["link"])  # the sentence quoted from it
        assert focus, c["link"]
        start, end = map(int, focus.groups())
        unmarked = re.sub(r"\s*\[\d+\]", "", done["text"])
        assert chunk.start <= start < end <= chunk.end and chunk.document.canonical_text[start:end] in unmarked
        assert c["label"] == chunk.breadcrumb and c["document_title"] == chunk.document.title
    assert '<a class="cite" href="/documents/' in done["html"]
    timings = done["timings"]
    assert 0 < timings["retrieval_ms"] <= timings["first_token_ms"] <= timings["total_ms"]


def test_the_producer_stores_the_answer_and_its_citations(corpus: dict[str, Document], people: dict[str, Any]) -> None:
    answer = ask_and_produce(people["carol"], EXPORT_QUESTION)
    assert answer.status == Message.Status.DONE and answer.intent == "screen" and answer.backend == "extractive"
    assert answer.text.endswith("[1].") and answer.first_token_ms and answer.total_ms and answer.finished_at
    citation = answer.citations.get()
    assert citation.quote == citation.chunk.content and citation.document == corpus["shipments"]
    assert answer_produce(message_id=answer.pk) is None  # produced once; a redelivered job does nothing
    # What a refit from verdicts and the content-gap topics read back: the signals and the question's embedding.
    assert answer.signals["nearest"] == answer.nearest_distance and set(answer.signals) >= {"gap", "weakest"}
    vector = np.asarray(answer.query_vector)
    assert vector.shape == (384,) and abs(float(np.linalg.norm(vector)) - 1) < 1e-3


def test_an_answer_abandoned_mid_stream_starts_over_clean(corpus: dict[str, Document], people: dict[str, Any]) -> None:
    """A job redelivered after its worker died long ago reclaims the answer: the half-written text and the
    citations of the dead attempt go, and only the new attempt's remain. One still within its lease is left alone."""
    asked = question_ask(user=people["carol"], question=EXPORT_QUESTION, enqueue=False)
    stale = Citation.objects.create(message=asked.answer, number=7, quote="half an answer's quote", start=0, end=5,
                                    distance=0.5)
    Message.objects.filter(pk=asked.answer.pk).update(status=Message.Status.RUNNING, text="Half an ans",
                                                      started_at=timezone.now())
    assert answer_produce(message_id=asked.answer.pk) is None  # its worker may still be at it
    Message.objects.filter(pk=asked.answer.pk).update(started_at=timezone.now() - timedelta(hours=1))
    assert answer_produce(message_id=asked.answer.pk) == Message.Status.DONE
    answer = Message.objects.get(pk=asked.answer.pk)
    assert not answer.text.startswith("Half") and "CSV and PDF [1]" in answer.text
    assert not Citation.objects.filter(pk=stale.pk).exists()
    assert [c.number for c in answer.citations.all()] == [1]


def test_an_out_of_domain_question_is_refused_and_no_backend_is_called(
    corpus: dict[str, Document], people: dict[str, Any], settings: Any
) -> None:
    with StubOpenAI() as stub:
        use_stub(settings, stub)
        events = received(answer_stream(user=people["alice"], question=OOD_QUESTION))
        answer = ask_and_produce(people["alice"], OOD_QUESTION)
        assert stub.requests == []  # the backend's call count stays 0
    assert [e["type"] for e in events] == ["status", "refused"]
    assert "NO ANSWER" in events[-1]["reason"] and "above the threshold" in events[-1]["reason"]
    assert events[-1]["text"].startswith("I couldn't find this in the documents you can read, so I won't guess.")
    assert not any(c.isdigit() for c in events[-1]["text"])  # the signals are the reviewers', never the asker's
    assert answer.status == Message.Status.REFUSED and answer.refused
    assert answer.refusal_reason.startswith("NO ANSWER") and answer.backend == "" and not answer.citations.exists()
    assert answer.signals["nearest"] > answer.threshold and answer.query_vector is not None  # a refusal keeps both too


def test_a_model_answer_gets_server_citations_only_for_numbers_it_used(
    corpus: dict[str, Document], people: dict[str, Any], settings: Any
) -> None:
    tokens = ["Use", " the", " Export", " dialog", " [", "1", "]", " or", " [9]", " see", " https://evil", ".example/x",
              " and", " [the", " wiki](http://evil.example/w)", "."]
    with StubOpenAI(tokens) as stub:
        use_stub(settings, stub)
        answer = ask_and_produce(people["carol"], EXPORT_QUESTION)
        request = stub.requests[0]
    assert request["path"] == "/v1/chat/completions" and request["auth"] == "Bearer sk-test"
    body = request["body"]
    assert body["stream"] is True and body["model"] == "stub-model"
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    exporting = Chunk.objects.get(document=corpus["shipments"], content__startswith="The Export button")
    assert f"## [1] {exporting.breadcrumb}\n" in body["messages"][1]["content"]
    assert answer.status == Message.Status.DONE, answer.error
    assert answer.text == "Use the Export dialog [1] or see `https://evil.example/x` and the wiki (`http://evil.example/w`)."
    assert list(answer.citations.values_list("number", flat=True)) == [1]
    html = message_views([answer], viewer=people["carol"])[0].html
    assert html.count("<a ") == 1 and "evil.example" in html and 'href="http' not in html


def test_access_is_checked_again_for_every_answer_and_every_read(
    corpus: dict[str, Document], people: dict[str, Any]
) -> None:
    alice = people["alice"]
    first = ask_and_produce(alice, VAULT_QUESTION)
    assert first.status == Message.Status.DONE and "ZX-4412-QUARTZ" in first.text
    assert first.citations.get().document == corpus["vault"]

    alice.groups.remove(people["groups"]["engineering"])  # mid-conversation
    second = ask_and_produce(alice, VAULT_QUESTION, conversation_id=first.conversation_id)
    assert second.status == Message.Status.REFUSED and "ZX-4412" not in second.text
    assert not Citation.objects.filter(message=second).exists()

    # Re-reading the conversation: the earlier answer quoted a document she may no longer see.
    replay = json.dumps(conversation_replay(first.conversation, viewer=alice))
    for secret in ("ZX-4412-QUARTZ", "vault rotation code for the Oslo depot is", f"/documents/{corpus['vault'].pk}/", f'"{corpus["vault"].title}"'):
        assert secret not in replay
    assert WITHHELD in replay
    view = message_views([first], viewer=alice)[0]
    assert view.withheld and view.citations == [] and view.restricted == [1]


def test_a_split_section_is_one_source_of_all_its_parts(people: dict[str, Any]) -> None:
    steps = " ".join(
        f"Step {i}: on the Carrier onboarding screen the {w} field must be filled in before the Save button is enabled."
        for i, w in enumerate(["Legal name", "VAT number", "IBAN", "Contact email", "Insurance expiry", "Fleet size",
                               "Depot code", "Hazmat licence", "Tariff zone", "Invoice address", "Payment terms",
                               "Signing officer", "Emergency phone", "Customs number", "Driver roster"], 1)
    )
    document = ingested_document(f"# Carriers\n\n## Onboarding a carrier\n\n{steps}\n", "carriers.md")
    document.refresh_from_db()
    parts = list(Chunk.objects.filter(document=document).order_by("ordinal"))
    assert len(parts) > 1 and parts[0].parts == len(parts)
    events = received(answer_stream(user=people["carol"], question="Which field must be filled in about the Hazmat licence on the Carrier onboarding screen?"))
    citations = next(e for e in events if e["type"] == "citations")["citations"]
    assert len(citations) == 1
    cited = citations[0]
    assert cited["parts"] == len(parts) and (cited["start"], cited["end"]) == (parts[0].start, parts[-1].end)
    assert cited["quote"] == document.canonical_text[parts[0].start : parts[-1].end]
    assert "Hazmat licence" in events[-1]["text"]


def test_a_split_sections_text_is_stitched_from_its_overlapping_parts_and_never_across_a_gap() -> None:
    from chat.answering import _stitched

    text = "Open the Carrier onboarding screen. Fill in every field. Press Save when the button is enabled."
    parts = [Chunk(start=0, end=40, content=text[0:40]), Chunk(start=30, end=70, content=text[30:70]),
             Chunk(start=60, end=len(text), content=text[60:])]
    assert _stitched(parts) == text
    assert _stitched([parts[0], parts[2]]) is None  # 40..60 is in no part: only the document has it


@pytest.mark.parametrize(
    ("mode", "message"),
    [("stall", "stalled: nothing for 1s"), ("die", "closed the stream before the answer was complete"), ("http500", "HTTP 500: model overloaded")],
)
def test_a_failing_model_server_yields_an_error_and_a_stored_failed_message(
    corpus: dict[str, Document], people: dict[str, Any], settings: Any, mode: str, message: str
) -> None:
    with StubOpenAI(mode=mode) as stub:
        use_stub(settings, stub, read_timeout=1.0)
        events = received(answer_stream(user=people["carol"], question=EXPORT_QUESTION))
        answer = ask_and_produce(people["carol"], EXPORT_QUESTION)
    assert events[-1]["type"] == "error" and message in events[-1]["error"], events[-1]
    assert "citations" not in [e["type"] for e in events]
    assert answer.status == Message.Status.FAILED and message in answer.error
    assert not answer.citations.exists()


def test_a_model_server_that_is_down_yields_an_error(corpus: dict[str, Document], people: dict[str, Any], settings: Any) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    settings.KB_ANSWER_BACKEND = "openai"
    settings.KB_OPENAI_BASE_URL = f"http://127.0.0.1:{port}/v1"
    answer = ask_and_produce(people["carol"], EXPORT_QUESTION)
    assert answer.status == Message.Status.FAILED and "unreachable" in answer.error


def test_access_lost_while_the_model_writes_withdraws_the_answer(
    corpus: dict[str, Document], people: dict[str, Any], settings: Any
) -> None:
    alice = people["alice"]
    with StubOpenAI(["The", " code", " is", " ZX-4412-QUARTZ", " [1]", "."], pause_after=3) as stub:
        use_stub(settings, stub)
        events = answer_stream(user=alice, question=VAULT_QUESTION)
        seen = []
        for event in events:
            seen.append(event)
            if event["type"] == "token":
                alice.groups.remove(people["groups"]["engineering"])
                stub.resume()
                break
        seen += list(events)
    assert seen[-1] == {"type": "error", "message": 0, "error": ACCESS_CHANGED}
    assert events.record.withdrawn  # the producer clears the stored text (next test)
    assert "citations" not in [e["type"] for e in seen]


@pytest.mark.django_db(transaction=True)
def test_the_answer_row_is_withdrawn_when_access_is_lost_mid_answer(
    corpus: dict[str, Document], people: dict[str, Any], settings: Any, producer: Any
) -> None:
    # The producer path, as a worker runs it: the stored text is cleared, so no replay ever shows it.
    alice = people["alice"]
    with StubOpenAI(["The", " code", " is", " ZX-4412-QUARTZ", " [1]", "."], pause_after=3) as stub:
        use_stub(settings, stub)
        asked = question_ask(user=alice, question=VAULT_QUESTION, enqueue=False)
        producer.start(asked.answer.pk)
        assert stub.paused.wait(30)
        alice.groups.remove(people["groups"]["engineering"])
        stub.resume()
        producer.join()
    answer = Message.objects.get(pk=asked.answer.pk)
    assert answer.status == Message.Status.FAILED and answer.error == ACCESS_CHANGED and answer.text == ""
    assert not answer.citations.exists()


def test_a_source_that_ends_in_a_colon_brings_the_code_it_introduces_from_the_document(people: dict[str, Any]) -> None:
    from dataclasses import replace

    from chat.answering import sources_for
    from search.retrieval import hybrid_search

    code = "\n".join(f"depotctl keys rotate --depot D-{i:02d} --confirm" for i in range(1, 6))
    document = ingested_document("# Depot keys\n\n## Rotating the signing key\n\nBefore rotating the depot signing "
                                 "key, record the approver in the incident record. Then run, for each depot:"
                                 f"\n\n```\n{code}\n```\n\nThe new key is live within a minute.\n", "depot-keys.md")
    result = hybrid_search(query="What must be recorded before rotating the depot signing key?", user=people["carol"])
    hit = next(h for h in result.hits if h.document_id == document.pk)
    # A passage the chunker ended at the colon (a long section's cut), as the chunk before the code would be.
    colon = document.canonical_text.index("for each depot:") + len("for each depot:")
    cut = replace(hit, end=colon, content=document.canonical_text[hit.start:colon])
    source = sources_for([cut])[0]
    assert source.text.rstrip().endswith("depotctl keys rotate --depot D-05 --confirm\n```"), source.text[-200:]
    assert "live within a minute" not in source.text
    assert source.text == document.canonical_text[source.start:source.end]
    # A passage that does not end in a colon is left as it is.
    assert sources_for([hit])[0].text == hit.content
