"""The review queue in Chromium against a real Daphne (issue 49 item 4): sam (support) clears ten answers from the
unreviewed queue by keyboard alone, each verdict moving to the next answer, until its count is 0; an answer drawing on
a document he may not read is only a count, whatever he searches; a follow-up shows the question before it, and an
employee's thumbs down its reason in words. Answers are produced in this process with the real services
(tests.web.test_browser_ask)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chat.conftest import EXPORT_QUESTION, OOD_QUESTION, SHIPMENTS, VAULT, VAULT_QUESTION
from tests.factories import ingested_document
from tests.web.conftest import assert_clean, assert_fits_width, assert_labelled, screenshot
from tests.web.test_browser_ask import answered

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SECRET = "ZX-4412-QUARTZ"
QUESTIONS = [
    EXPORT_QUESTION,
    "Which two tabs does the Export dialog have?",
    "Where do saved filters appear?",
    "What is in the filter bar above the table?",
    "What happens to exports larger than 50,000 rows?",
    "What does the PDF tab print?",
    "Which rows does the CSV tab export?",
    OOD_QUESTION,
    "Who won the football world cup in 1954?",
]
FOLLOW_UP = "And which formats does it offer?"


def focused(page: Any) -> str | None:
    value: str | None = page.evaluate("document.activeElement.getAttribute('data-message')")
    return value


def test_sam_clears_ten_answers_from_the_unreviewed_queue_by_keyboard(open_page: Any, people: dict[str, Any]) -> None:
    from chat.models import Judgement
    from chat.review import judgements
    from chat.services import answer_produce, question_ask

    ingested_document(SHIPMENTS, "shipments.md")
    ingested_document(VAULT, "vault.md", public=False, groups=[people["groups"]["engineering"]])
    hidden = answered(people["alice"], VAULT_QUESTION)
    assert SECRET in hidden.text
    answers = [answered(people["carol"], question) for question in QUESTIONS]
    follow = question_ask(user=people["carol"], question=FOLLOW_UP, conversation_id=answers[1].conversation_id,
                          enqueue=False)
    answer_produce(message_id=follow.answer.pk, job_id=str(follow.answer.job_id))
    assert {a.status for a in answers} == {"done", "refused"}
    rated = answers[0]
    judgements.message_rate(user=people["carol"], message_id=rated.pk, rating=-1, reason="off_topic",
                            comment="I wanted the keyboard shortcut")

    page = open_page(people["sam"])
    page.goto("/review/")
    page.wait_for_selector("#review-list[data-loaded=true] .review-item")
    unreviewed = page.locator('.review-count[data-count="unreviewed"]')
    assert unreviewed.inner_text() == "10"
    assert page.locator('.review-queues a[aria-current="page"]').get_attribute("data-queue") == "unreviewed"
    # The hidden answer is one number: no row, none of its words anywhere in the page.
    assert page.locator("#review-hidden").inner_text() == (
        "1 answer draws on documents you cannot read, so it is not listed here.")
    assert page.locator(f".review-item[data-message='{hidden.pk}']").count() == 0
    assert SECRET not in page.content() and VAULT_QUESTION not in page.content()
    # The keys are listed on the page; the first answer has the focus; no flag form is open.
    keys = page.locator("#review-keys").inner_text()
    assert "next / previous" in keys and "Should have answered" in keys and "flag a citation" in keys
    assert page.locator(".review-item").count() == 10
    assert page.locator(".flag-form:visible").count() == 0
    first = page.locator(".review-item").first.get_attribute("data-message")
    assert focused(page) == first and "is-focused" in (page.locator(".review-item").first.get_attribute("class") or "")
    # A follow-up shows the question before it; the employee's thumbs down its reason and comment in words.
    assert page.locator(f".review-item[data-message='{follow.answer.pk}'] .review-follows").inner_text() == (
        f"Follow-up to: “{QUESTIONS[1]}”")
    asker = page.locator(f".review-item[data-message='{rated.pk}'] .review-judgement[data-role='asker']")
    assert "Rated down" in asker.inner_text() and "Doesn't answer my question" in asker.inner_text()
    assert "I wanted the keyboard shortcut" in asker.inner_text()
    assert_labelled(page)
    screenshot(page, "review-queue")

    # j / k move the focus; ? shows every key; f opens the focused answer's first flag form, Esc goes back.
    page.keyboard.press("j")
    second = focused(page)
    assert second not in (None, first)
    page.keyboard.press("k")
    assert focused(page) == first
    page.keyboard.press("?")
    assert page.locator("#review-help").is_visible()
    page.keyboard.press("?")
    assert not page.locator("#review-help").is_visible()
    item = page.locator(f".review-item[data-message='{first}']")
    assert first == str(follow.answer.pk)  # the newest first
    page.keyboard.press("c")  # the conversation beside the answer: the question before it, and its answer
    conversation = item.locator(".review-conversation[data-loaded=true]")
    conversation.wait_for()
    assert conversation.locator(".review-turn-user .review-turn-text").all_inner_texts() == [QUESTIONS[1], FOLLOW_UP]
    assert conversation.locator(".review-turn.is-current").count() == 1
    page.keyboard.press("c")
    assert not conversation.is_visible()
    if item.locator(".flag-toggle").count():
        page.keyboard.press("f")
        assert item.locator(".flag-form").first.is_visible()
        assert page.evaluate("document.activeElement.tagName") == "SELECT"
        page.keyboard.press("Escape")
        assert focused(page) == first and not item.locator(".flag-form").first.is_visible()

    # One key a verdict: each answer leaves the queue, the next has the focus, the count drops to 0.
    for done in range(1, 11):
        before = focused(page)
        page.keyboard.press("1")
        page.locator(".review-item.is-judged").nth(done - 1).wait_for()
        page.wait_for_function(f"() => document.querySelector('.review-count[data-count=unreviewed]').textContent === '{10 - done}'")
        assert page.locator(f".review-item[data-message='{before}']").get_attribute("class").count("is-judged") == 1
        if done < 10:
            assert focused(page) not in (None, before)
    assert unreviewed.inner_text() == "0"
    page.locator(".review-done").wait_for()
    screenshot(page, "review-queue-cleared")
    verdicts = Judgement.objects.filter(judge=people["sam"], role="reviewer")
    assert verdicts.count() == 10 and set(verdicts.values_list("kind", flat=True)) == {"helpful"}
    assert not verdicts.filter(message=hidden).exists()
    assert_clean(page)

    # Reloaded, the queue is empty; a search for the hidden answer's words finds nothing and moves no count.
    page.reload()
    page.wait_for_selector("#review-list[data-loaded=true]")
    assert page.locator(".review-item").count() == 0
    page.keyboard.press("/")
    page.keyboard.type(SECRET)
    page.keyboard.press("Enter")
    page.wait_for_url(lambda url: f"q={SECRET}" in url)
    page.wait_for_selector("#review-list[data-loaded=true]")
    assert page.locator(".review-item").count() == 0
    assert [c.inner_text() for c in page.locator(".review-count").all()] == ["0"] * 6
    assert "1 answer draws on documents you cannot read" in page.locator("#review-hidden").inner_text()
    assert SECRET not in page.locator("#review-list").inner_text()
    assert_clean(page)

    # The closest-match queue: an answer chat.match labelled closest, with the label its asker saw (a verdict does
    # not take it out); the hidden answer, labelled too, is not listed there either.
    from chat.models import Message

    closest = next(a for a in answers if a.status == "done")
    Message.objects.filter(status="done").update(match="quoted")  # as labelled, whatever the small corpus gave
    Message.objects.filter(pk__in=[closest.pk, hidden.pk]).update(match="closest")
    page.goto("/review/?filter=closest")
    page.wait_for_selector("#review-list[data-loaded=true] .review-item")
    items = page.locator(".review-item")
    assert items.count() == 1 and items.first.get_attribute("data-message") == str(closest.pk)
    assert items.first.locator(".match-closest").inner_text() == "Closest passage — may not answer your question"
    assert page.locator('.review-count[data-count="closest"]').inner_text() == "1"
    assert SECRET not in page.locator("#review-list").inner_text()

    # At phone width the queue, its counts and the keys fit the screen.
    phone = open_page(people["sam"], width=390, height=844)
    phone.goto("/review/?filter=all")
    phone.wait_for_selector("#review-list[data-loaded=true] .review-item")
    assert_fits_width(phone)
    screenshot(phone, "review-queue-390")
    assert_clean(phone)
