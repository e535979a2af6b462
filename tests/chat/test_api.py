"""POST /api/ask, the owner's conversations, and the support review API."""

from __future__ import annotations

import json
from typing import Any

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from accounts.tokens import token_create
from chat.models import Feedback, Message
from chat.review.desk_api import PREVIEW_CHARS
from chat.selectors import conversation_replay
from chat.services import answer_produce, question_ask
from kb.library.models import Document
from tests.chat.conftest import EXPORT_QUESTION, VAULT_QUESTION
from tests.chat.openai_stub import StubOpenAI
from tests.chat.test_answering import use_stub


def answered(user: Any, question: str) -> Message:
    asked = question_ask(user=user, question=question, enqueue=False)
    answer_produce(message_id=asked.answer.pk)
    return Message.objects.get(pk=asked.answer.pk)


def test_ask_returns_ids_at_once_and_queues_the_answer(
    people: dict[str, Any], client: Client, django_capture_on_commit_callbacks: Any
) -> None:
    assert client.post("/api/ask", {"question": "hi"}, content_type="application/json").status_code == 401
    client.force_login(people["alice"])
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post("/api/ask", {"question": EXPORT_QUESTION}, content_type="application/json")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["stream"] == f"/ws/chat/{body['conversation']}/"
    answer = Message.objects.get(pk=body["message"])
    assert answer.status == Message.Status.PENDING and answer.question_id == body["question"]
    assert answer.conversation.owner == people["alice"] and answer.conversation.title == EXPORT_QUESTION
    assert len(callbacks) == 3  # question and queued events, then the Celery job, all after commit

    follow = client.post("/api/ask", {"question": "And PDF?", "conversation": body["conversation"]},
                         content_type="application/json")
    assert follow.status_code == 202 and follow.json()["conversation"] == body["conversation"]
    assert client.post("/api/ask", {"question": " "}, content_type="application/json").status_code == 422
    assert client.post("/api/ask", {"question": "x" * 2001}, content_type="application/json").status_code == 422


def test_nobody_else_can_continue_or_read_a_conversation(people: dict[str, Any], client: Client) -> None:
    asked = question_ask(user=people["alice"], question=EXPORT_QUESTION, enqueue=False)
    _, token = token_create(user=people["bob"])
    bearer = {"Authorization": f"Bearer {token}"}
    response = client.post("/api/ask", {"question": "mine now", "conversation": asked.conversation.pk},
                           content_type="application/json", headers=bearer)
    assert response.status_code == 404
    assert client.get(f"/api/conversations/{asked.conversation.pk}", headers=bearer).status_code == 404
    assert client.get("/api/conversations", headers=bearer).json() == []
    client.force_login(people["alice"])
    assert [c["id"] for c in client.get("/api/conversations").json()] == [asked.conversation.pk]


def test_the_owner_reads_a_conversation_with_its_citations(
    corpus: dict[str, Document], people: dict[str, Any], client: Client
) -> None:
    answer = answered(people["carol"], EXPORT_QUESTION)
    client.force_login(people["carol"])
    body = client.get(f"/api/conversations/{answer.conversation_id}").json()
    question, reply = body["messages"]
    assert question["role"] == "user" and question["text"] == EXPORT_QUESTION
    assert reply["status"] == "done" and reply["text"] == answer.text and not reply["withheld"]
    [citation] = reply["citations"]
    assert citation["quote"] == answer.citations.get().chunk.content
    assert citation["link"].startswith(f"/documents/{corpus['shipments'].pk}/#char=")
    assert '<a class="cite"' in reply["html"] and reply["timings"]["total_ms"] > 0


def test_only_support_staff_review_and_flag_answers(
    corpus: dict[str, Document], people: dict[str, Any], client: Client
) -> None:
    answer = answered(people["carol"], EXPORT_QUESTION)
    client.force_login(people["alice"])
    assert client.get("/api/review/answers").status_code == 404
    assert client.post(f"/api/review/answers/{answer.pk}/feedback", {"kind": "outdated"},
                       content_type="application/json").status_code == 404

    client.force_login(people["sam"])
    [item] = client.get("/api/review/answers").json()
    assert item["id"] == answer.pk and item["owner"] == "carol" and item["question"] == EXPORT_QUESTION
    quote = answer.citations.get().quote
    assert quote.startswith(item["citations"][0]["quote"].rstrip("…")) and item["feedback"] == []
    assert client.get("/api/review/answers", {"flagged": "true"}).json() == []

    response = client.post(f"/api/review/answers/{answer.pk}/feedback",
                           {"kind": "wrong_source", "citation": 1, "note": "the PDF tab moved"},
                           content_type="application/json")
    assert response.status_code == 201, response.content
    assert response.json()["citation"] == 1 and response.json()["reviewer"] == "sam"
    assert client.post(f"/api/review/answers/{answer.pk}/feedback", {"kind": "unsupported", "citation": 9},
                       content_type="application/json").status_code == 422
    assert client.post(f"/api/review/answers/{answer.pk}/feedback", {"kind": "rude"},
                       content_type="application/json").status_code == 422
    [flagged] = client.get("/api/review/answers", {"flagged": "true"}).json()
    assert flagged["feedback"][0]["kind"] == "wrong_source" and flagged["feedback"][0]["note"] == "the PDF tab moved"
    assert client.get("/api/review/answers", {"flagged": "false"}).json() == []
    assert client.get(f"/api/review/answers/{answer.pk}").json()["id"] == answer.pk
    conversation = client.get(f"/api/review/conversations/{answer.conversation_id}").json()
    assert [m["role"] for m in conversation["messages"]] == ["user", "assistant"]
    assert Feedback.objects.get().citation == answer.citations.get()


def test_a_reviewer_never_sees_quotes_from_documents_they_cannot_read(
    corpus: dict[str, Document], people: dict[str, Any], client: Client
) -> None:
    answer = answered(people["alice"], VAULT_QUESTION)  # cites the engineering-only document
    assert answer.status == Message.Status.DONE
    client.force_login(people["sam"])
    raw = client.get("/api/review/answers").content.decode()
    item = json.loads(raw)[0]
    assert item["withheld"] and item["citations"] == [] and item["restricted_citations"] == [1]
    for secret in ("ZX-4412", "every ninety days", "on-call engineer", f"/documents/{corpus['vault'].pk}/", f'"{corpus["vault"].title}"'):
        assert secret not in raw
    # A reviewer who may read it sees it all.
    people["sam"].groups.add(people["groups"]["engineering"])
    item = client.get("/api/review/answers").json()[0]
    assert not item["withheld"] and "ZX-4412-QUARTZ" in item["citations"][0]["quote"]


def test_the_review_list_costs_the_same_queries_for_more_answers(
    corpus: dict[str, Document], people: dict[str, Any], client: Client
) -> None:
    def review_queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get("/api/review/answers").status_code == 200
        return len(captured)

    client.force_login(people["sam"])
    Feedback.objects.create(message=answered(people["carol"], EXPORT_QUESTION), kind="outdated")
    few = review_queries()
    for question in ("Where do saved filters appear?", "Which tabs does the Export dialog have?"):
        Feedback.objects.create(message=answered(people["dave"], question), kind="unsupported")
    assert review_queries() == few


def test_the_review_list_sends_a_page_of_trimmed_answers_and_the_detail_sends_them_whole(
    corpus: dict[str, Document], people: dict[str, Any], client: Client
) -> None:
    answers = [answered(people["carol"], EXPORT_QUESTION) for _ in range(3)]
    long_quote = "The Export dialog " + "lists every column of the Shipments table in order. " * 30
    answers[-1].citations.update(quote=long_quote)
    client.force_login(people["sam"])

    first = client.get("/api/review/answers", {"limit": 2})
    newest, second = first.json()
    assert [newest["id"], second["id"]] == [answers[2].pk, answers[1].pk]
    cited = newest["citations"][0]
    assert cited["quote_truncated"] and len(cited["quote"]) <= PREVIEW_CHARS + 1 and long_quote.startswith(cited["quote"][:-1])
    assert "html" not in newest
    assert second["citations"][0]["quote_truncated"] == (len(answers[1].citations.get().quote) > PREVIEW_CHARS)
    [last] = client.get("/api/review/answers", {"limit": 2, "before": second["id"]}).json()
    assert last["id"] == answers[0].pk
    assert client.get("/api/review/answers", {"limit": 101}).status_code == 422

    whole = client.get(f"/api/review/answers/{answers[2].pk}").json()
    assert whole["citations"][0]["quote"] == long_quote
    assert len(first.content) < len(client.get(f"/api/review/answers/{answers[2].pk}").content) * 2


def test_conversations_come_a_page_at_a_time(people: dict[str, Any], client: Client) -> None:
    asked = [question_ask(user=people["alice"], question=f"question {i}", enqueue=False) for i in range(3)]
    client.force_login(people["alice"])
    newest_first = [a.conversation.pk for a in reversed(asked)]
    assert [c["id"] for c in client.get("/api/conversations", {"limit": 2}).json()] == newest_first[:2]
    assert [c["id"] for c in client.get("/api/conversations", {"limit": 2, "offset": 2}).json()] == newest_first[2:]


def test_the_project_api_mounts_the_chat_router(people: dict[str, Any]) -> None:
    from django.urls import reverse

    assert reverse("api:ask") == "/api/ask"
    client = Client()
    client.force_login(people["alice"])
    assert client.post("/api/ask", {"question": EXPORT_QUESTION}, content_type="application/json").status_code == 202


def test_the_admin_lists_and_shows_answers(corpus: dict[str, Document], people: dict[str, Any], client: Client) -> None:
    answer = answered(people["carol"], EXPORT_QUESTION)
    Feedback.objects.create(message=answer, citation=answer.citations.get(), kind="outdated", note="moved")
    client.force_login(people["admin"])
    for url in ("/admin/chat/message/", f"/admin/chat/message/{answer.pk}/change/", "/admin/chat/conversation/",
                f"/admin/chat/conversation/{answer.conversation_id}/change/", "/admin/chat/feedback/"):
        response = client.get(url)
        assert response.status_code == 200, url
    assert answer.citations.get().quote[:40] in client.get(f"/admin/chat/message/{answer.pk}/change/").content.decode()


def test_the_asker_rates_their_own_answer_and_nobody_else_can(
    corpus: dict[str, Document], people: dict[str, Any], client: Client
) -> None:
    answer = answered(people["carol"], EXPORT_QUESTION)
    url = f"/api/messages/{answer.pk}/rating"
    client.force_login(people["bob"])
    assert client.post(url, {"rating": 1}, content_type="application/json").status_code == 404
    client.force_login(people["carol"])
    assert client.post(url, {"rating": 2}, content_type="application/json").status_code == 422
    response = client.post(url, {"rating": -1}, content_type="application/json")
    assert response.status_code == 200 and response.json() == {"rating": -1}
    assert Message.objects.get(pk=answer.pk).rating == -1
    body = client.get(f"/api/conversations/{answer.conversation_id}").json()
    assert body["messages"][1]["rating"] == -1
    assert client.post(f"/api/messages/{answer.question_id}/rating", {"rating": 1},
                       content_type="application/json").status_code == 404  # a question is not an answer


UNSUPPORTED_TOKENS = ("The", " Export", " dialog", " offers", " XLSX", " and", " JSON", " [1].", " The", " Export",
                      " button", " opens", " the", " Export", " dialog", " [1].")


def answered_unsupported(user: Any, settings: Any) -> Message:
    """An answer (from a model server speaking the OpenAI protocol) whose first sentence its quote does not back."""
    with StubOpenAI(UNSUPPORTED_TOKENS) as stub:
        use_stub(settings, stub)
        return answered(user, EXPORT_QUESTION)


def test_an_unsupported_claim_is_stored_and_shown_in_replay_rest_and_html(
    corpus: dict[str, Document], people: dict[str, Any], client: Client, settings: Any
) -> None:
    answer = answered_unsupported(people["carol"], settings)
    [claim] = answer.unsupported
    assert claim["sentence"].startswith("The Export dialog offers XLSX and JSON") and claim["numbers"] == [1]
    assert {"xlsx", "json"} <= set(claim["missing"]) and claim["verdict"] == "open"
    client.force_login(people["carol"])
    reply = client.get(f"/api/conversations/{answer.conversation_id}").json()["messages"][1]
    assert [c["sentence"] for c in reply["unsupported"]] == [claim["sentence"]]
    assert reply["html"].count("not found in source") == 1 and 'class="unsupported"' in reply["html"]
    done = conversation_replay(answer.conversation, viewer=people["carol"])[-1]
    assert done["type"] == "done" and done["unsupported"] == [claim] and done["html"] == reply["html"]
    # An answer withheld from its reader keeps its sentences to itself, the flagged one included.
    answer.source_documents = [*answer.source_documents, corpus["vault"].pk]
    answer.save(update_fields=["source_documents"])
    hidden = client.get(f"/api/conversations/{answer.conversation_id}").json()["messages"][1]
    assert hidden["withheld"] and hidden["unsupported"] == [] and "XLSX" not in json.dumps(hidden)


def test_the_review_desk_lists_unsupported_claims_first_and_staff_confirm_or_dismiss_them(
    corpus: dict[str, Document], people: dict[str, Any], client: Client, settings: Any
) -> None:
    older = answered_unsupported(people["carol"], settings)
    newer = [answered(people["carol"], EXPORT_QUESTION) for _ in range(2)]
    assert all(m.unsupported == [] for m in newer)
    client.force_login(people["sam"])
    listed = client.get("/api/review/answers").json()
    assert [a["id"] for a in listed] == [older.pk, newer[1].pk, newer[0].pk]
    assert listed[0]["unsupported"][0]["verdict"] == "open"
    # The keyset follows the same order, page after page.
    first = client.get("/api/review/answers", {"limit": 1}).json()
    second = client.get("/api/review/answers", {"limit": 1, "before": first[0]["id"]}).json()
    third = client.get("/api/review/answers", {"limit": 1, "before": second[0]["id"]}).json()
    assert [p[0]["id"] for p in (first, second, third)] == [older.pk, newer[1].pk, newer[0].pk]

    url = f"/api/review/answers/{older.pk}/unsupported/0"
    client.force_login(people["alice"])
    assert client.post(url, {"verdict": "confirmed"}, content_type="application/json").status_code == 404
    client.force_login(people["sam"])
    assert client.post(url, {"verdict": "maybe"}, content_type="application/json").status_code == 422
    assert client.post(f"/api/review/answers/{older.pk}/unsupported/1", {"verdict": "dismissed"},
                       content_type="application/json").status_code == 404
    confirmed = client.post(url, {"verdict": "confirmed"}, content_type="application/json")
    assert confirmed.status_code == 200, confirmed.content
    body = confirmed.json()
    assert body["unsupported"][0]["verdict"] == "confirmed" and body["unsupported"][0]["reviewer"] == "sam"
    [flag] = body["feedback"]
    assert flag["kind"] == "unsupported" and flag["citation"] == 1 and "XLSX" in flag["note"]
    # Judged claims no longer jump the queue; confirming twice files one flag.
    assert [a["id"] for a in client.get("/api/review/answers").json()] == [newer[1].pk, newer[0].pk, older.pk]
    client.post(url, {"verdict": "confirmed"}, content_type="application/json")
    assert Feedback.objects.filter(message=older).count() == 1
    dismissed = client.post(url, {"verdict": "dismissed"}, content_type="application/json").json()
    assert dismissed["unsupported"][0]["verdict"] == "dismissed"


def test_a_refusal_reads_in_plain_words_and_only_staff_and_reviewers_see_its_signals(
    corpus: dict[str, Document], people: dict[str, Any], client: Client, settings: Any
) -> None:
    """Carol is refused twice: a question far from anything (nothing near) and, with the answer cutoff out
    of reach, the export question (its passage is near: the middle state). Neither text holds a number;
    the distances and the confidence reach the admin and the support reviewer, never carol."""
    far = answered(people["carol"], "What is the airspeed velocity of an unladen swallow carrying a coconut?")
    settings.KB_ANSWERABILITY = {**settings.KB_ANSWERABILITY, "cutoff": 0.999999}
    near = answered(people["carol"], EXPORT_QUESTION)
    assert far.status == near.status == Message.Status.REFUSED
    assert far.text.startswith("I couldn't find this in the documents you can read")
    assert near.text.startswith("These passages may help, but none of them answers this directly")
    assert not any(c.isdigit() for c in far.text + near.text)
    assert "distance" in far.refusal_reason and "confidence" in near.refusal_reason  # stored for reviewers

    client.force_login(people["carol"])
    for answer in (far, near):
        body = client.get(f"/api/conversations/{answer.conversation_id}").json()
        reply = body["messages"][-1]
        assert reply["refusal_reason"] == "" and reply["text"] == answer.text
        [refused] = [e for e in reply["events"] if e["type"] == "refused"]
        assert refused["reason"] == ""
    [refused] = [e for e in conversation_replay(near.conversation, viewer=people["carol"]) if e["type"] == "refused"]
    assert refused["reason"] == "" and not any(c.isdigit() for c in json.dumps(refused["text"]))

    client.force_login(people["sam"])  # support: the review desk shows the signals
    assert client.get(f"/api/review/answers/{near.pk}").json()["refusal_reason"] == near.refusal_reason
    client.force_login(people["admin"])
    assert client.get(f"/api/review/answers/{far.pk}").json()["refusal_reason"] == far.refusal_reason
