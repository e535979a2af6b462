"""A reviewer sees nothing of an answer withheld from them, on any page of the review list, and cannot judge it
(issue 28, item 2): no note (their own confirmation would file the unsupported sentence as one), no error, no
verdict, and an out-of-range claim says nothing of how many claims there are."""

from __future__ import annotations

import json
from typing import Any

from django.test import Client

from chat.models import Feedback, Message
from chat.services import answer_produce, question_ask
from tests.chat.conftest import EXPORT_QUESTION, VAULT, VAULT_QUESTION
from tests.chat.openai_stub import StubOpenAI
from tests.chat.test_answering import use_stub
from tests.factories import ingested_document
from tests.security.conftest import signed_in

SECRET = "ZX-4412-QUARTZ"
# The quote says "every ninety days": "30" is not in it, so the sentence is flagged unsupported.
TOKENS = ("The", " code", " is", " " + SECRET, " and", " it", " changes", " every", " 30", " days", " [1].")


def answered(user: Any, question: str) -> Message:
    asked = question_ask(user=user, question=question, enqueue=False)
    answer_produce(message_id=asked.answer.pk)
    return Message.objects.get(pk=asked.answer.pk)


def every_page(client: Client, **filters: Any) -> list[dict[str, Any]]:
    """The whole review list, one answer a page, following `before` to the end."""
    listed: list[dict[str, Any]] = []
    while True:
        query = {"limit": 1, **filters} | ({"before": listed[-1]["id"]} if listed else {})
        response = client.get("/api/review/answers", query)
        assert response.status_code == 200, response.content
        page = response.json()
        if not page:
            return listed
        listed += page


def test_a_withheld_answer_shows_no_note_or_error_on_any_page_and_takes_no_verdict(
    people: dict[str, Any], settings: Any
) -> None:
    ingested_document(VAULT, "vault.md", public=False, groups=[people["groups"]["engineering"]])
    with StubOpenAI(TOKENS) as stub:
        use_stub(settings, stub)
        secret = answered(people["alice"], VAULT_QUESTION)  # alice may read the vault; sam (support) may not
    [claim] = secret.unsupported
    assert SECRET in claim["sentence"] and claim["verdict"] == "open"

    sam = signed_in(people["sam"])
    claim_url = f"/api/review/answers/{secret.pk}/unsupported/0"
    # Sam cannot judge what is hidden from him: his own confirmation would file the sentence as a note.
    for verdict in ("confirmed", "dismissed"):
        refused = sam.post(claim_url, {"verdict": verdict}, content_type="application/json")
        assert refused.status_code == 404 and refused.json() == {"detail": "no such answer"}, refused.content
    far = sam.post(f"/api/review/answers/{secret.pk}/unsupported/9", {"verdict": "confirmed"},
                   content_type="application/json")
    assert far.status_code == 404 and far.json() == {"detail": "no such answer"}
    flag = sam.post(f"/api/review/answers/{secret.pk}/feedback", {"kind": "wrong_source", "citation": 1},
                    content_type="application/json")
    assert flag.status_code == 404 and flag.json() == {"detail": "no such answer"}
    assert not Feedback.objects.filter(message=secret).exists()
    assert Message.objects.get(pk=secret.pk).unsupported == [claim]

    # A reviewer who may read it confirms the claim: the note quotes the secret sentence.
    people["dave"].groups.add(people["groups"]["support"])  # engineering too
    dave = signed_in(people["dave"])
    assert dave.post(claim_url, {"verdict": "confirmed"}, content_type="application/json").status_code == 200
    assert SECRET in Feedback.objects.get(message=secret).note
    # Newer answers push it off the first page (the claim is judged, so it no longer leads the list).
    newer = [answered(people["carol"], EXPORT_QUESTION) for _ in range(2)]

    # Positive control: the same walk shows the note to a reviewer who may read the vault.
    assert SECRET in json.dumps(every_page(dave))

    for filters in ({}, {"flagged": True}):
        listed = every_page(sam, **filters)
        [entry] = [a for a in listed if a["id"] == secret.pk]
        assert entry["withheld"] and [f["note"] for f in entry["feedback"]] == [""]
        assert SECRET not in json.dumps(listed), filters
    assert [a["id"] for a in every_page(sam)] == [newer[1].pk, newer[0].pk, secret.pk]
    assert SECRET not in sam.get("/api/review/answers", {"limit": 100}).content.decode()
    detail = sam.get(f"/api/review/answers/{secret.pk}").json()
    assert detail["withheld"] and detail["feedback"][0]["note"] == "" and SECRET not in json.dumps(detail)
    for desk in ("/review/", "/review/?filter=flagged"):
        page = sam.get(desk)
        assert page.status_code == 200 and SECRET not in page.content.decode()

    # A failed answer's error may echo its prompt (a model server's message): withheld with the answer.
    Message.objects.filter(pk=secret.pk).update(
        status=Message.Status.FAILED, error=f"the model server reported an error: bad token near {SECRET}")
    failed = every_page(sam)
    [entry] = [a for a in failed if a["id"] == secret.pk]
    assert entry["error"] and SECRET not in json.dumps(failed)
    assert SECRET not in sam.get(f"/api/review/answers/{secret.pk}").content.decode()
    assert SECRET in json.dumps(every_page(dave))


def test_an_out_of_range_claim_is_not_found_without_the_count(people: dict[str, Any], settings: Any) -> None:
    ingested_document(VAULT, "vault.md", public=False, groups=[people["groups"]["engineering"]])
    with StubOpenAI(TOKENS) as stub:
        use_stub(settings, stub)
        answer = answered(people["alice"], VAULT_QUESTION)
    reviewer = signed_in(people["alice"])
    people["alice"].groups.add(people["groups"]["support"])
    for index in (1, 2, 1000):
        response = reviewer.post(f"/api/review/answers/{answer.pk}/unsupported/{index}", {"verdict": "dismissed"},
                              content_type="application/json")
        assert response.status_code == 404 and response.json() == {"detail": "no such claim"}, response.content
    assert Message.objects.get(pk=answer.pk).unsupported[0]["verdict"] == "open"
