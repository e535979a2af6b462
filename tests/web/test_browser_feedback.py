"""Feedback that fits the employee (issue 49 item 3), in Chromium against the real Daphne: under an answer, thumbs
up ("Helpful") or down with a reason chip and words of their own, stored as the verdict kind the reason maps to
(chat.review.judgements.feedback_kind); the chosen thumb and chip are pressed (aria-pressed), survive a reload, can be
changed and taken back. A refusal offers "The documents do answer this" and never "Should have said it doesn't
know"; the four verdict kinds and the document picker stay on the review desk (tests.web.test_browser_judgements).
Answers are produced in this process with the real services (tests.web.test_browser_ask.answered)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chat.conftest import EXPORT_QUESTION, SHIPMENTS
from tests.factories import ingested_document
from tests.web.conftest import assert_clean, assert_labelled, screenshot
from tests.web.test_browser_ask import answered
from tests.web.test_browser_judgements import TABS_QUESTION, refused

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

COMMENT = "The Export dialog has a third tab since the May release."
PRESSED = "el => el.getAttribute('aria-pressed')"


def chips(page: Any, group: str) -> list[str]:
    return page.get_by_role("group", name=group).get_by_role("button").all_inner_texts()


def test_an_employee_says_an_answer_is_wrong_or_outdated_and_a_refusal_could_have_answered(
    open_page: Any, people: dict[str, Any], settings: Any
) -> None:
    from chat.models import Judgement, Message

    ingested_document(SHIPMENTS, "shipments.md")
    answer = answered(people["carol"], EXPORT_QUESTION)
    assert answer.status == "done"
    refusal = refused(people["carol"], TABS_QUESTION, settings)

    page = open_page(people["carol"])
    page.goto(f"/?c={answer.conversation_id}")
    thumbs = page.get_by_role("group", name="Judge this answer")
    up, down = (thumbs.get_by_role("button", name=name, exact=True) for name in ("Helpful", "Not helpful"))
    assert [up.evaluate(PRESSED), down.evaluate(PRESSED)] == ["false", "false"]
    assert page.get_by_role("button", name="Should have answered").count() == 0  # the desk's kinds are not here

    # Thumbs down opens the reasons an answer can have; nothing is sent before one is chosen.
    down.click()
    assert down.get_attribute("aria-expanded") == "true"
    assert chips(page, "What went wrong?") == ["Doesn't answer my question", "Wrong or outdated",
                                              "Should have said it doesn't know"]
    send = page.get_by_role("button", name="Send feedback")
    assert send.is_disabled() and not Judgement.objects.exists()
    page.get_by_role("button", name="Wrong or outdated").click()
    assert page.get_by_role("button", name="Wrong or outdated").evaluate(PRESSED) == "true"
    page.get_by_label("Anything else? (optional)").fill(COMMENT)
    assert_labelled(page)
    screenshot(page, "feedback-reasons")
    send.click()
    page.locator('.turn-rating [data-thumb="down"][aria-pressed="true"]').wait_for()
    assert up.evaluate(PRESSED) == "false"
    said = page.locator(".feedback-given")
    assert "Wrong or outdated" in said.inner_text() and COMMENT in said.inner_text()
    stored = Judgement.objects.get()
    assert (stored.message_id, stored.role, stored.kind, stored.reason, stored.note) == (
        answer.pk, "asker", "wrong", "wrong_or_outdated", COMMENT)
    assert Message.objects.get(pk=answer.pk).rating == -1
    screenshot(page, "feedback-given")

    # Reloaded: the same thumb pressed, the same reason and words; "Change" opens them as they were.
    page.reload()
    page.locator('.turn-rating [data-thumb="down"][aria-pressed="true"]').wait_for()
    assert "Wrong or outdated" in page.locator(".feedback-given").inner_text()
    page.locator(".feedback-given").get_by_role("button", name="Change").click()
    assert page.get_by_role("button", name="Wrong or outdated").evaluate(PRESSED) == "true"
    assert page.get_by_label("Anything else? (optional)").input_value() == COMMENT
    page.locator(".feedback-panel").get_by_role("button", name="Cancel").click()

    # Changed to helpful, then taken back by pressing the chosen thumb again.
    up.click()
    page.locator('.turn-rating [data-thumb="up"][aria-pressed="true"]').wait_for()
    assert (Judgement.objects.get().kind, Judgement.objects.get().reason) == ("helpful", "")
    up.click()
    page.locator('.turn-rating [data-thumb="up"][aria-pressed="false"]').wait_for()
    assert not Judgement.objects.exists() and Message.objects.get(pk=answer.pk).rating == 0
    assert_clean(page)

    # A refusal: the one reason is that the documents do answer it, with no document picker here.
    page.goto(f"/?c={refusal.conversation_id}")
    page.get_by_role("group", name="Judge this refusal").get_by_role("button", name="Not helpful").click()
    assert chips(page, "What should it have done?") == ["The documents do answer this"]
    assert page.get_by_role("button", name="Should have said it doesn't know").count() == 0
    assert page.get_by_role("button", name="The documents do answer this").evaluate(PRESSED) == "true"
    assert page.locator(".judge-document").count() == 0
    page.get_by_role("button", name="Send feedback").click()
    page.locator('.turn-rating [data-thumb="down"][aria-pressed="true"]').wait_for()
    verdict = Judgement.objects.get(message=refusal)
    assert (verdict.kind, verdict.reason, verdict.document_id) == ("should_answer", "should_answer", None)
    assert_labelled(page)
    assert_clean(page)
