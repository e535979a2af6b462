"""Conversations one can find again (issue 49 item 7), in Chromium against the real Daphne: the history grouped by
day with whole titles on hover, searched over the reader's own titles and questions, the open conversation renamed
and deleted; reopening lands on the latest answer and the question box stays in view in a long thread; at phone
width the history is one tap away; after signing in the focus is in the question box.

Conversations are stored here as the service and a worker store them (question_ask, then the answer's row
finished): the page only reads them, through the API and the stream, as it reads any conversation."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from tests.web.conftest import assert_clean, assert_fits_width, assert_labelled, screenshot
from tests.web.test_accessibility import axe_page, violations
from tests.web.test_browser import PHONE

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

FAILOVER = "How do I fail over the planning database to the standby in the {} region when the primary is down?"
ANSWER = ("The standby is promoted with the runbook's promote step, then the application's connection string is "
          "pointed at it; the old primary is rebuilt from a fresh base backup before it rejoins as a standby. ") * 3

# Each conversation in the history as the reader sees it: its group heading, link text, tooltip and line count.
HISTORY = """() => Array.from(document.querySelectorAll('#history .history-group')).map(g => ({
  heading: g.querySelector('.history-group-title').textContent,
  items: Array.from(g.querySelectorAll('.history-link')).map(a => {
    const shown = a.querySelector('.history-title'), tail = a.querySelector('.history-tail');
    return {id: Number(a.dataset.conversation), text: shown.textContent, title: a.getAttribute('title'),
      tail: tail ? tail.textContent : null, tailInView: tail ? tail.scrollWidth <= tail.clientWidth + 1 : null,
      lines: Math.round(shown.getBoundingClientRect().height / parseFloat(getComputedStyle(shown).lineHeight)),
      clamped: shown.scrollHeight > shown.clientHeight + 1};
  }),
}))"""
# Where an element is in the window: wholly in view or not.
IN_VIEW = """sel => { const r = document.querySelector(sel).getBoundingClientRect();
  return r.top >= 0 && r.bottom <= window.innerHeight && r.height > 0; }"""


def conversation(user: Any, questions: list[str], *, days_ago: float = 0, answer: str = ANSWER) -> Any:
    """A conversation of `user`'s with these questions, each answered (as a worker leaves it), last active
    `days_ago` days ago."""
    from chat.models import Conversation, Message
    from chat.services import question_ask

    found = None
    for question in questions:
        asked = question_ask(user=user, question=question, enqueue=False, conversation_id=found.pk if found else None)
        found = asked.conversation
        Message.objects.filter(pk=asked.answer.pk).update(status=Message.Status.DONE, text=answer,
                                                          finished_at=timezone.now(), backend="extractive")
    assert found is not None
    Conversation.objects.filter(pk=found.pk).update(updated_at=timezone.now() - timedelta(days=days_ago))
    return Conversation.objects.get(pk=found.pk)


def history(page: Any) -> list[dict[str, Any]]:
    return page.evaluate(HISTORY)


def group_of(when: datetime, now: datetime) -> str:
    """The heading ask.js gives a conversation last active at `when` (both in the page's time zone)."""
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if when >= today:
        return "Today"
    if when >= today - timedelta(days=1):
        return "Yesterday"
    if when >= today - timedelta(days=7):
        return "Previous 7 days"
    return when.strftime("%B %Y")


def open_ask(page: Any, query: str = "") -> None:
    page.goto(f"/{query}")
    page.wait_for_selector("#ask[data-state=connected]")


# --------------------------------------------------------------------------- the history


def test_the_history_is_grouped_by_day_with_whole_titles_and_searches_only_the_readers_own(
    open_page: Any, people: dict[str, Any]
) -> None:
    alice, bob = people["alice"], people["bob"]
    regions = ["Frankfurt", "Dublin", "Virginia"]
    # The case: three titles that begin alike, cut to the same words by one-line ellipsis.
    alike = [conversation(alice, [FAILOVER.format(region)], days_ago=0.001 * i) for i, region in enumerate(regions)]
    ages = {"yesterday": 1, "three days": 3, "forty days": 40, "seventy days": 70}
    older = {name: conversation(alice, [f"Where is the {name} checklist?", f"Who signs the {name} form off?"],
                                days_ago=days) for name, days in ages.items()}
    conversation(bob, ["Where is the payroll calendar for the Frankfurt office?"])

    page = axe_page(open_page, alice)
    open_ask(page)
    page.wait_for_selector("#history .history-link")
    zone = ZoneInfo(page.evaluate("window.KB.timeZone()"))  # the page's dates are in it
    now = timezone.now().astimezone(zone)
    shown = history(page)

    expected: list[tuple[str, list[int]]] = []
    for found in [*alike, *older.values()]:
        heading = group_of(found.updated_at.astimezone(zone), now)
        if expected and expected[-1][0] == heading:
            expected[-1][1].append(found.pk)
        else:
            expected.append((heading, [found.pk]))
    assert [(g["heading"], [i["id"] for i in g["items"]]) for g in shown] == expected
    assert [g["heading"] for g in shown][:3] == ["Today", "Yesterday", "Previous 7 days"]

    items = {item["id"]: item for group in shown for item in group["items"]}
    for found in alike:  # the whole title on hover, two lines of it in the list
        item = items[found.pk]
        assert item["title"] == item["text"] == found.title == FAILOVER.format(regions[alike.index(found)])
        assert item["lines"] == 1 and item["clamped"], item  # one line of it, then where it parts from the others
    assert item["tail"] == "…" + FAILOVER.format(regions[alike.index(found)]).split(" the standby in the ")[1], item
    for found in older.values():  # titles unlike the others: up to two lines, whole here
        assert items[found.pk]["tail"] is None and not items[found.pk]["clamped"], items[found.pk]
    assert page.locator(f"#history [data-conversation='{older['three days'].pk}']").evaluate(
        "a => a.closest('li').querySelector('.history-when').textContent").endswith("2 questions")
    assert_labelled(page)
    assert violations(page) == []  # axe-core: no serious or critical violation
    screenshot(page, "conversations-history")

    search = page.get_by_label("Find a conversation")
    search.fill("dublin")
    page.wait_for_function("() => document.querySelectorAll('#history .history-link').length === 1")
    assert [i["id"] for g in history(page) for i in g["items"]] == [alike[1].pk]
    search.fill("signs forty")  # every word, one of them only in a later question
    page.wait_for_function(f"() => document.querySelector('#history .history-link')?.dataset.conversation === '{older['forty days'].pk}'")
    assert len([i for g in history(page) for i in g["items"]]) == 1
    search.fill("payroll calendar")  # bob's words: never alice's results
    page.wait_for_selector("#history .history-empty")
    assert page.locator("#history").inner_text() == "No conversation matches your search."
    search.fill("")
    page.wait_for_function("n => document.querySelectorAll('#history .history-link').length === n", arg=len(items))
    assert_clean(page)


def test_the_owner_renames_and_deletes_the_open_conversation(open_page: Any, people: dict[str, Any]) -> None:
    from chat.models import Conversation, Message

    alice = people["alice"]
    kept = conversation(alice, ["Where do visitors park?"], days_ago=1)
    found = conversation(alice, [FAILOVER.format("Frankfurt"), "And who approves it?"])
    page = axe_page(open_page, alice)
    open_ask(page, f"?c={found.pk}")
    page.wait_for_selector("#answer .turn[data-message]")
    assert page.locator("#conversation-title").inner_text() == found.title

    page.get_by_role("button", name="Rename").click()
    title = page.get_by_label("Conversation title")
    assert title.input_value() == found.title
    assert violations(page) == []
    title.fill("Frankfurt failover")
    title.press("Enter")
    page.wait_for_function("() => document.getElementById('conversation-title').textContent === 'Frankfurt failover'")
    page.wait_for_selector(f"#history .history-link[data-conversation='{found.pk}'][title='Frankfurt failover']")
    assert Conversation.objects.get(pk=found.pk).title == "Frankfurt failover"
    assert page.evaluate("document.activeElement.id") == "conversation-rename"

    page.get_by_role("button", name="Rename").click()  # Escape leaves it as it was
    page.get_by_label("Conversation title").fill("Not this")
    page.get_by_label("Conversation title").press("Escape")
    assert page.locator("#conversation-title").inner_text() == "Frankfurt failover"

    page.get_by_role("button", name="Delete").click()
    assert page.locator(".conversation-confirm").inner_text() == "Delete this conversation for good?"
    page.get_by_role("button", name="Cancel").click()
    assert Conversation.objects.filter(pk=found.pk).exists()
    page.get_by_role("button", name="Delete").click()
    page.locator(".conversation-actions .btn-danger").click()
    page.wait_for_function(f"() => !document.querySelector(\"#history [data-conversation='{found.pk}']\")")
    assert not Conversation.objects.filter(pk=found.pk).exists()
    assert not Message.objects.filter(conversation_id=found.pk).exists()
    assert page.locator("#ask-status").inner_text() == "The conversation was deleted."
    assert "?c=" not in page.url and page.locator("#answer .turn").count() == 0
    assert page.locator("#conversation-bar").is_hidden()
    assert page.evaluate("document.activeElement.id") == "question"
    assert [i["id"] for g in history(page) for i in g["items"]] == [kept.pk]
    assert_clean(page)


def test_nobody_opens_renames_or_deletes_another_persons_conversation(open_page: Any, people: dict[str, Any]) -> None:
    from chat.models import Conversation

    theirs = conversation(people["alice"], [FAILOVER.format("Dublin")])
    page = open_page(people["bob"])
    open_ask(page, f"?c={theirs.pk}")
    page.wait_for_selector("#ask-status.alert-error")
    assert "could not be opened" in page.locator("#ask-status").inner_text()
    assert page.locator("#conversation-bar").is_hidden() and page.locator("#answer .turn").count() == 0
    for method, body in (("PATCH", {"title": "Mine"}), ("DELETE", None)):
        status = page.evaluate("""([method, url, body]) => fetch(url, {method, credentials: "same-origin",
            headers: {"Content-Type": "application/json", "X-CSRFToken": window.KB.csrf()},
            body: body ? JSON.stringify(body) : undefined}).then(r => r.status)""",
                               [method, f"/api/conversations/{theirs.pk}", body])
        assert status == 404, method
    assert Conversation.objects.get(pk=theirs.pk).title == theirs.title


# --------------------------------------------------------------------------- a long thread


def test_reopening_a_long_conversation_shows_the_latest_answer_and_keeps_the_question_box_in_view(
    open_page: Any, people: dict[str, Any]
) -> None:
    alice = people["alice"]
    conversation(alice, ["Where do visitors park?"], days_ago=2)
    questions = [f"Question {n}: what does step {n} of the failover runbook do?" for n in range(1, 13)]
    long = conversation(alice, questions)
    page = axe_page(open_page, alice)
    open_ask(page)
    assert page.evaluate("window.scrollY") == 0
    page.locator(f"#history [data-conversation='{long.pk}']").click()
    page.wait_for_function("n => document.querySelectorAll('#answer .turn .turn-answer p').length === n",
                           arg=len(questions))
    page.wait_for_timeout(100)

    last = "#answer .turn:last-of-type"
    assert page.locator(f"{last} .turn-question").inner_text().endswith(questions[-1])
    assert page.evaluate("window.scrollY") > 1000  # not the top of a long thread
    top = page.evaluate(f"() => document.querySelector('{last}').getBoundingClientRect().top")
    # The latest turn starts near the top of the view (or the page is scrolled to its end), its answer under it.
    assert 0 <= top < page.evaluate("window.innerHeight / 2"), top
    assert page.evaluate(IN_VIEW, "#ask-form")
    assert page.locator("#ask-privacy").inner_text() == (
        "Support staff may read questions and answers to improve the knowledge base.")
    assert page.evaluate(IN_VIEW, "#ask-privacy")
    assert violations(page) == []
    screenshot(page, "conversations-long-thread")

    for y in (0, 2500):  # anywhere in the thread, the question box is in view
        page.evaluate(f"window.scrollTo(0, {y})")
        page.wait_for_timeout(50)
        assert page.evaluate(IN_VIEW, "#question"), y
    # A reload of the conversation's address lands there too.
    page.reload()
    page.wait_for_function("n => document.querySelectorAll('#answer .turn .turn-answer p').length === n",
                           arg=len(questions))
    page.wait_for_timeout(100)
    assert page.evaluate("window.scrollY") > 1000
    assert page.evaluate(IN_VIEW, f"{last} .turn-question") and page.evaluate(IN_VIEW, "#question")
    assert_clean(page)


# --------------------------------------------------------------------------- phone, keyboard


def test_at_phone_width_the_history_is_one_tap_away(open_page: Any, people: dict[str, Any]) -> None:
    alice = people["alice"]
    older = conversation(alice, ["Where do visitors park?"], days_ago=3)
    conversation(alice, [FAILOVER.format("Frankfurt")])
    page = axe_page(open_page, alice, **PHONE)
    open_ask(page)
    assert page.locator("#history .history-link").first.is_hidden()  # not a list below the question box
    toggle = page.get_by_role("button", name="History")
    assert toggle.is_visible() and page.get_by_label("Your question").is_visible()
    assert toggle.get_attribute("aria-expanded") == "false"
    assert_fits_width(page)
    screenshot(page, "conversations-ask-390")

    toggle.click()
    assert toggle.get_attribute("aria-expanded") == "true"
    page.wait_for_selector("#history .history-link")
    assert page.evaluate("document.activeElement.id") == "history-q"
    assert page.evaluate(IN_VIEW, f"#history [data-conversation='{older.pk}']")
    assert_fits_width(page)
    assert_labelled(page)
    assert violations(page) == []
    screenshot(page, "conversations-history-390")
    page.keyboard.press("Escape")
    assert page.locator("#history .history-link").first.is_hidden()
    assert page.evaluate("document.activeElement.id") == "history-toggle"

    toggle.click()
    page.locator(f"#history [data-conversation='{older.pk}']").click()  # one tap opens it, the panel closes
    page.wait_for_selector("#answer .turn[data-message]")
    assert page.url.endswith(f"?c={older.pk}")
    assert page.locator("#history .history-link").first.is_hidden()
    assert page.get_by_label("Your question").is_visible()
    assert_fits_width(page)
    assert_clean(page)


def test_after_signing_in_the_focus_is_in_the_question_box(open_page: Any, people: dict[str, Any]) -> None:
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    alice = people["alice"]
    alice.password = PBKDF2PasswordHasher().encode("alice", "testsalt1234", iterations=1000)
    alice.save(update_fields=["password"])
    for n in range(3):
        conversation(alice, [f"Earlier question {n}?"], days_ago=n)

    page = open_page()
    page.goto("/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice")
    page.click("button[type=submit]")
    page.wait_for_selector("#ask[data-state=connected]")
    assert page.evaluate("document.activeElement.id") == "question"
    page.keyboard.type("Where do visitors park?")
    assert page.get_by_label("Your question").input_value() == "Where do visitors park?"

    # From the top of the page the keyboard reaches the box before the history: skip link, brand, the main
    # navigation and the account menu come first.
    page.evaluate("""() => { document.body.tabIndex = -1; document.body.focus(); document.body.removeAttribute('tabindex'); }""")
    tabs = 0
    while page.evaluate("document.activeElement.id") != "question":
        page.keyboard.press("Tab")
        tabs += 1
        assert tabs <= 8, page.evaluate("document.activeElement.outerHTML.slice(0, 120)")
    assert_clean(page)
