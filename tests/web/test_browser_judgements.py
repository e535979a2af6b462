"""Judging answers in Chromium against a real Daphne: an employee says a refused question should have been
answered ("The documents do answer this", the Ask page's feedback, tests.web.test_browser_feedback); a support
reviewer, on the review desk, keeps the four verdict kinds and names the document that answers it from the
documents he may read, and judges an answer. Answers are produced in this process with the real services
(tests.web.test_browser_ask)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chat.conftest import EXPORT_QUESTION, SHIPMENTS, VAULT
from tests.factories import ingested_document
from tests.web.conftest import assert_clean, assert_labelled, screenshot
from tests.web.test_browser_ask import answered

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TABS_QUESTION = "Which two tabs does the dialog for exporting shipments have?"
# The first search a fresh Daphne serves loads the embedding model (tests.web.test_browser_ask.closest_links).
FIRST_SEARCH_MS = 120_000


def refused(user: Any, question: str, settings: Any) -> Any:
    before = settings.KB_ANSWERABILITY
    settings.KB_ANSWERABILITY = {**before, "cutoff": 0.999999}  # refused, whatever is found
    try:
        answer = answered(user, question)
    finally:
        settings.KB_ANSWERABILITY = before
    assert answer.status == "refused", answer.status
    return answer


def name_the_document(scope: Any, title: str) -> None:
    """In an open "which document answers it" search: choose `title` and save."""
    scope.locator(".judge-choice").first.wait_for(timeout=FIRST_SEARCH_MS)
    scope.get_by_label(title, exact=True).check()
    scope.get_by_role("button", name="Save: should have answered").click()


def test_an_employee_says_a_refusal_should_have_answered(open_page: Any, people: dict[str, Any], settings: Any) -> None:
    from chat.models import Judgement, Message

    ingested_document(SHIPMENTS, "shipments.md")
    refusal = refused(people["carol"], TABS_QUESTION, settings)

    page = open_page(people["carol"])
    page.goto(f"/?c={refusal.conversation_id}")
    group = page.get_by_role("group", name="Judge this refusal")
    group.get_by_role("button", name="Not helpful").wait_for()  # the turn is drawn from the socket's replay
    # The employee's thumbs, not the review desk's four kinds; no document picker on the Ask page.
    assert group.get_by_role("button").all_inner_texts() == ["Helpful", "Not helpful"]
    group.get_by_role("button", name="Not helpful").click()
    page.get_by_role("button", name="The documents do answer this").wait_for()
    assert_labelled(page)
    screenshot(page, "judge-should-answer")
    page.get_by_role("button", name="Send feedback").click()
    page.locator('.turn-rating button[data-thumb="down"][aria-pressed="true"]').wait_for()
    assert page.locator(".judge-document").count() == 0

    judgement = Judgement.objects.get()
    assert (judgement.message_id, judgement.judge, judgement.role, judgement.kind, judgement.document_id) == (
        refusal.pk, people["carol"], "asker", "should_answer", None)
    assert Message.objects.get(pk=refusal.pk).rating == -1

    # Reloaded, the verdict is shown as given; pressing it again takes it back.
    page.reload()
    pressed = page.locator('.turn-rating button[data-thumb="down"][aria-pressed="true"]')
    pressed.wait_for()
    assert "The documents do answer this" in page.locator(".feedback-given").inner_text()
    pressed.click()
    page.locator('.turn-rating button[data-thumb="down"][aria-pressed="false"]').wait_for()
    assert not Judgement.objects.exists() and Message.objects.get(pk=refusal.pk).rating == 0
    assert_clean(page)


def test_a_reviewer_marks_a_refusal_answerable_from_a_document_and_judges_an_answer(
    open_page: Any, people: dict[str, Any], settings: Any
) -> None:
    from chat.models import Judgement

    shipments = ingested_document(SHIPMENTS, "shipments.md")
    vault = ingested_document(VAULT, "vault.md", public=False, groups=[people["groups"]["engineering"]])
    refusal = refused(people["carol"], TABS_QUESTION, settings)
    answer = answered(people["alice"], EXPORT_QUESTION)
    assert answer.status == "done"

    page = open_page(people["sam"])
    page.goto("/review/")
    item = page.locator(f".review-item[data-message='{refusal.pk}']")
    item.wait_for()
    group = item.get_by_role("group", name="Judge this refusal")
    assert group.get_by_role("button").all_inner_texts() == ["Right not to answer", "Should have answered"]
    group.get_by_role("button", name="Should have answered").click()
    picker = item.locator(".judge-document")
    assert picker.get_by_label("Which document answers it? (optional)").input_value() == TABS_QUESTION
    picker.locator(".judge-choice").first.wait_for(timeout=FIRST_SEARCH_MS)
    assert vault.title not in picker.inner_text()  # only documents sam may read are offered
    name_the_document(picker, shipments.title)
    listed = item.locator(".review-judgement[data-kind='should_answer']")
    listed.wait_for()
    assert "by sam (reviewer)" in listed.inner_text() and shipments.title in listed.inner_text()
    verdict = Judgement.objects.get(message=refusal)
    assert (verdict.judge, verdict.role, verdict.document_id) == (people["sam"], "reviewer", shipments.pk)

    judged = page.locator(f".review-item[data-message='{answer.pk}']")
    kinds = judged.get_by_role("group", name="Judge this answer")
    kinds.get_by_role("button", name="Should have refused").wait_for()
    assert kinds.get_by_role("button").all_inner_texts() == ["Helpful", "Wrong", "Should have refused",
                                                             "Should have answered"]
    kinds.get_by_role("button", name="Helpful").click()
    judged.locator(".review-judgement[data-kind='helpful']").wait_for()
    assert Judgement.objects.get(message=answer).kind == "helpful"
    assert_labelled(page)
    assert_clean(page)
    screenshot(page, "review-judgements")
