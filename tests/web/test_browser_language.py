"""The interface in the reader's language, in Chromium against the real Daphne (issue 48 item 6): a Polish-speaking
employee (the browser's locale pl-PL) reads the Ask page in Polish, its script's sentences included, switches to
German in the user menu, and German sticks: after a reload, and in a new session of a browser that still asks
for Polish."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.chat.conftest import OOD_QUESTION
from tests.web.conftest import assert_clean, assert_labelled, screenshot

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def refused_conversation(user: Any) -> int:
    from chat.models import Message
    from chat.services import answer_produce, question_ask

    asked = question_ask(user=user, question=OOD_QUESTION, enqueue=False)
    answer_produce(message_id=asked.answer.pk, job_id=str(asked.answer.job_id))
    assert Message.objects.get(pk=asked.answer.pk).status == Message.Status.REFUSED
    return asked.conversation.pk


def shown(page: Any, conversation: int) -> dict[str, str]:
    page.goto(f"/?c={conversation}")
    page.wait_for_selector("#ask[data-state=connected] .answer-refused-title")
    return page.evaluate("""() => ({
        lang: document.documentElement.lang,
        title: document.getElementById('ask-title').textContent,
        refusal: document.querySelector('.answer-refused-title').textContent,
        verdict: document.querySelector('.turn-rating').getAttribute('aria-label'),
    })""")


def test_a_polish_employee_reads_polish_and_switches_to_german_for_good(
    reader: Callable[..., Any], people: dict[str, Any]
) -> None:
    from accounts.models import Profile

    alice = people["alice"]
    conversation = refused_conversation(alice)
    page = reader(alice)
    assert shown(page, conversation) == {
        "lang": "pl", "title": "Zapytaj bazę wiedzy",
        "refusal": "Nie udało się tego znaleźć w dokumentach, które możesz czytać",  # written by ask.js
        "verdict": "Oceń tę odmowę",  # written by dom.js
    }
    assert page.get_by_label("Twoje pytanie").get_attribute("placeholder").startswith("np. ")

    page.click("details.usermenu > summary")
    menu = page.get_by_label("Język")
    options = menu.locator("option").evaluate_all("os => os.map(o => [o.value, o.lang, o.textContent])")
    assert options == [["en", "en", "English"], ["pl", "pl", "polski"], ["de", "de", "Deutsch"],
                       ["zh-hans", "zh-hans", "简体中文"]]
    assert menu.input_value() == "pl"
    assert_labelled(page)
    screenshot(page, "language-menu-polish")
    menu.select_option("de")
    with page.expect_navigation():
        page.get_by_role("button", name="Zmień", exact=True).click()

    german = {"lang": "de", "title": "Die Wissensdatenbank fragen",
              "refusal": "Ich habe dazu nichts in den Dokumenten gefunden, die Sie lesen dürfen",
              "verdict": "Diese Ablehnung bewerten"}
    page.wait_for_selector("#ask[data-state=connected] .answer-refused-title")
    assert page.url.endswith(f"/?c={conversation}")
    assert shown(page, conversation) == german
    page.reload()
    page.wait_for_selector("#ask[data-state=connected] .answer-refused-title")
    assert page.evaluate("document.documentElement.lang") == "de"
    assert Profile.objects.get(user=alice).language == "de"
    assert_clean(page)

    # A new session on a browser that still asks for Polish: the choice is hers, not the browser's.
    elsewhere = reader(alice)
    assert shown(elsewhere, conversation) == german
    assert elsewhere.get_by_label("Sprache").input_value() == "de"
    assert_clean(elsewhere)
