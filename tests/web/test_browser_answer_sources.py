"""Each answer keeps its own sources (issue 49 item 1), in Chromium against the real Daphne: a three-turn
conversation, each answer from a different document, shows under every answer its own sources list numbered
1..n in the order that answer first cites them, every chip of every answer links to that answer's passage, and
a reload (the conversation replayed from the API) shows the same.

The page asks as a person would (POST /api/ask, then the websocket); the answer is produced in this process by
the service a worker runs (chat.services.answer_produce), whose events reach the page over the websocket:
no worker to start, the live stream all the same. The stored [n] are the retrieval's numbers; the extractive
backend cites in that order, so the third answer is written by a stand-in for a language model that leads with
the runner-up passage ([2] before [1]), as a model may: the page shows it as [1] and lists it first."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from chat.backends.extractive import ExtractiveBackend, compose
from chat.prompts import Prompt
from tests.factories import ingested_document
from tests.web.conftest import assert_clean, assert_labelled, screenshot
from tests.web.test_browser import text_of_marks

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PARKING = """# Parking

## Visitors

Visitors park on level minus two of the east garage; the barrier opens with the code printed on their badge.
"""
TAXIS = """# Travel expenses

## Taxi receipts

Taxi receipts are submitted in the expenses tool within thirty days of the ride, with the reason for the trip.
"""
LAPTOPS = """# Lost equipment

## Laptops

A lost or stolen laptop is reported to the security hotline within one hour, so that its disk can be locked.
"""
HOTLINE = """# Security hotline

## Calling the hotline

The security hotline answers around the clock on extension 4400; a stolen laptop, a lost badge or a phishing mail \
is reported there.

## After the call

The hotline locks the laptop's disk and the service desk hands out a replacement laptop within two days.
"""
DOCUMENTS = {"parking.md": PARKING, "taxis.md": TAXIS, "laptops.md": LAPTOPS, "hotline.md": HOTLINE}
# (question, the document its answer cites first, words of that answer, the stored numbers in first-cited order)
TURNS = [
    ("Where do visitors park in the east garage?", "parking.md", "level minus two", [1]),
    ("Within how many days are taxi receipts submitted?", "taxis.md", "within thirty days", [1]),
    ("Who locks the disk of a lost laptop?", "hotline.md", "The hotline locks the laptop's disk", [2, 1]),
]
MODEL = "tests.web.test_browser_answer_sources.RunnerUpFirst"


class RunnerUpFirst(ExtractiveBackend):
    """A stand-in for a language model (the hosted backend): the extractive answer's passages, the runner-up's
    first, each still cited by the number the prompt gave its source."""

    name = "stand-in"
    model = "a language model's stand-in"

    def generate(self, prompt: Prompt) -> Iterator[str]:
        yield "\n\n".join(" ".join(paragraph) for paragraph in reversed(compose(prompt)))
# The same markers the page turns into chips (ask.js renderInline): [n], with `code` spans left as text.
MARKER = re.compile(r"\[(\d{1,3})\]|`[^`\n]+`")

# Every answer on the page: its chips and its own sources list, as the reader gets them.
TURNS_SHOWN = """() => Array.from(document.querySelectorAll('#answer .turn')).map(turn => ({
  message: Number(turn.dataset.message),
  chips: Array.from(turn.querySelectorAll('.turn-answer .cite-chip')).map(c => ({
    text: c.textContent, number: Number(c.dataset.number), href: c.getAttribute('href'), label: c.getAttribute('aria-label')})),
  lists: Array.from(turn.querySelectorAll('ol.source-list')).map(ol => ({
    name: ol.getAttribute('aria-label'),
    items: Array.from(ol.children).map(li => ({number: Number(li.dataset.number),
      href: li.querySelector('a.source-title').getAttribute('href'), title: li.querySelector('.source-title').textContent}))})),
}))"""


def cited_in_order(answer: Any) -> list[Any]:
    """The answer's citations in the order its text first cites them: the page's sources 1..n."""
    by_number = {c.number: c for c in answer.citations.all()}
    order: list[Any] = []
    for match in MARKER.finditer(answer.text):
        citation = by_number.get(int(match.group(1))) if match.group(1) else None
        if citation is not None and citation not in order:
            order.append(citation)
    return order


def produce_pending(user: Any, count: int) -> Any:
    """The answer the page just asked for (the `count`th of `user`), produced here as a worker would."""
    from chat.models import Message
    from chat.services import answer_produce

    answers = Message.objects.filter(conversation__owner=user, role=Message.Role.ASSISTANT).order_by("pk")
    deadline = time.monotonic() + 15
    while answers.count() < count:
        assert time.monotonic() < deadline, "the page's question never reached the server"
        time.sleep(0.1)
    answer = answers[count - 1]
    assert answer_produce(message_id=answer.pk, job_id=str(answer.job_id)) == "done", answer.text
    return Message.objects.get(pk=answer.pk)


def test_every_answer_of_a_conversation_keeps_its_own_numbered_sources(
    open_page: Any, people: dict[str, Any], settings: Any
) -> None:
    documents = {name: ingested_document(text, name) for name, text in DOCUMENTS.items()}
    alice = people["alice"]
    page = open_page(alice)
    page.goto("/")
    page.wait_for_selector("#ask[data-state=connected]")

    answers = []
    for count, (question, name, words, numbers) in enumerate(TURNS, start=1):
        page.get_by_label("Your question").fill(question)
        page.click("#ask-submit")
        if count == len(TURNS):
            settings.KB_ANSWER_BACKEND = MODEL
        answer = produce_pending(alice, count)
        page.wait_for_function("n => window.__kbAsk.events.filter(e => e === 'done').length === n", arg=count)
        assert words in answer.text, answer.text
        cited = cited_in_order(answer)
        assert [c.number for c in cited] == numbers, answer.text
        assert cited[0].document_id == documents[name].pk, [(c.number, c.document_id) for c in cited]
        answers.append((answer, cited))
    assert len({answer.conversation_id for answer, _ in answers}) == 1

    def check(shown: list[dict[str, Any]]) -> None:
        assert [turn["message"] for turn in shown] == [answer.pk for answer, _ in answers]
        for turn, (answer, cited) in zip(shown, answers, strict=True):
            # One list per answer, under it, named for screen readers, numbered 1..n in first-cited order.
            assert len(turn["lists"]) == 1, turn
            listed = turn["lists"][0]
            assert listed["name"] == "Sources for this answer"
            # Each link names the answer it belongs to, for the viewer's "Back to the answer".
            assert listed["items"] == [{"number": n, "href": f"{c.link}&answer={answer.pk}", "title": c.document.title}
                                       for n, c in enumerate(cited, start=1)], (answer.text, listed)
            # Every chip says the number its passage has in this answer's list and opens that passage.
            assert turn["chips"], answer.text
            assert turn["chips"][0]["number"] == 1
            seen = 0
            for chip in turn["chips"]:
                assert chip["number"] <= seen + 1, turn["chips"]  # a new source takes the next number
                seen = max(seen, chip["number"])
                source = cited[chip["number"] - 1]
                assert chip["text"] == f"[{chip['number']}]"
                assert chip["href"] == f"{source.link}&answer={answer.pk}", (chip, source.link)
                assert chip["label"] == f"Source {chip['number']}: {source.document.title}"
            assert seen == len(cited)

    live = page.evaluate(TURNS_SHOWN)
    check(live)
    assert page.get_by_role("list", name="Sources for this answer").count() == len(TURNS)
    assert_labelled(page)
    screenshot(page, "answer-sources-live", full_page=True)

    # The same conversation reloaded: the earlier answers come from the API, shown through the same rendering.
    page.reload()
    page.wait_for_function("n => window.__kbAsk.events.filter(e => e === 'done').length === n", arg=len(TURNS))
    replayed = page.evaluate(TURNS_SHOWN)
    assert replayed == live
    check(replayed)
    assert_clean(page)

    # The oldest answer's first chip still opens its own passage, three turns later.
    first, cited = answers[0]
    page.locator(f".turn[data-message='{first.pk}'] .turn-answer .cite-chip").first.click()
    page.wait_for_url(f"**/documents/{documents['parking.md'].pk}/#char={cited[0].start},{cited[0].end}*")
    page.wait_for_selector("#doc-text mark.hl")
    assert text_of_marks(page) == cited[0].quote
    assert "level minus two" in cited[0].quote
    assert_clean(page)
