"""Curated answers in Chromium against the session's Daphne (issue 50): sam, support with the permission, writes an
answer from a content-gap topic, citing a passage found with the form's search, and approves it; carol, asking in
other words, receives it with the "Answer from support" badge and support's statement apart from the quotes. The
cited document is then uploaded again with that passage changed: the answer shows as stale on the desk, with why,
and carol's next question no longer gets it.

Answers are produced in this process as a worker would (tests.web.test_browser_answer_sources.produce_pending)."""

from __future__ import annotations

import io
from typing import Any

import pytest

from tests.chat.conftest import SHIPMENTS
from tests.factories import ingested_document
from tests.web.conftest import assert_clean, assert_labelled, screenshot
from tests.web.test_browser_answer_sources import produce_pending
from tests.web.test_browser_judgements import FIRST_SEARCH_MS, TABS_QUESTION, refused

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PARAPHRASE = "What are the two tabs of the dialog for exporting shipments?"
SENTENCE = "The Export button at the top right of the Shipments screen opens the Export dialog, which has two tabs, CSV and PDF."
CHANGED = "The Export button at the top right of the Shipments screen opens the Export dialog, which has one tab, CSV."


def test_sam_curates_from_a_gap_carol_receives_it_and_a_changed_passage_makes_it_stale(
    open_page: Any, people: dict[str, Any], settings: Any
) -> None:
    from django.contrib.auth.models import Permission

    from chat.models import CuratedAnswer, Message
    from kb.library.events import document_indexed
    from kb.library.ingest.pipeline import ingest
    from kb.library.services import document_upload

    shipments = ingested_document(SHIPMENTS, "shipments.md")
    refused(people["carol"], TABS_QUESTION, settings)  # a content gap
    sam = people["sam"]
    sam.is_staff = True
    sam.save(update_fields=["is_staff"])
    sam.user_permissions.add(*Permission.objects.filter(codename__in=["curate_answer", "view_contentgaps"],
                                                        content_type__app_label="chat"))

    desk = open_page(sam)
    desk.goto("/gaps/")
    topic = desk.locator("article.gap-topic").filter(has_text=TABS_QUESTION)
    topic.get_by_role("link", name="Write an answer for this").click()
    desk.wait_for_url("**/review/curated/?topic=*")
    assert desk.get_by_label("Example questions (one a line)").input_value() == TABS_QUESTION
    desk.get_by_role("button", name="Search", exact=True).click()
    hit = desk.locator(".curated-hit").filter(has_text="two tabs, CSV and PDF").first
    hit.wait_for(timeout=FIRST_SEARCH_MS)
    hit.get_by_role("button", name=f"Cite only: {SENTENCE}").click()
    assert desk.locator("#curated-cited li").inner_text().startswith(f"[1] {shipments.title}")
    desk.get_by_label("Answer (cite each claim as [1], [2]…)").fill("The Export dialog has two tabs, CSV and PDF [1].")
    desk.get_by_label("Support's statement (optional, shown apart from the quotes, cites nothing)").fill(
        "There is no Excel export: open the CSV file in Excel.")
    desk.get_by_role("button", name="Save and approve").click()
    item = desk.locator(".curated-item[data-state='approved']")
    item.wait_for()
    answer = CuratedAnswer.objects.get()
    assert answer.from_topic == TABS_QUESTION and answer.citations.get().quote == SENTENCE
    assert item.get_by_role("link", name=f"[1] {shipments.title}").get_attribute("href", timeout=0).startswith(
        f"/documents/{shipments.pk}/#char=")
    assert_labelled(desk)
    screenshot(desk, "curated-desk")

    carol = people["carol"]
    page = open_page(carol)
    page.goto("/")
    page.wait_for_selector("#ask[data-state=connected]")
    page.get_by_label("Your question").fill(PARAPHRASE)
    page.click("#ask-submit")
    served = produce_pending(carol, 2)
    assert served.curated_id == answer.pk
    page.wait_for_function("() => window.__kbAsk.events.filter(e => e === 'done').length === 1")
    turn = page.locator("#answer .turn").last
    badge = turn.locator(".backend-badge").inner_text()
    assert badge.startswith("Answer from support · sam · "), badge
    statement = turn.get_by_role("complementary", name="Support's statement")
    assert "There is no Excel export" in statement.inner_text() and "[1]" not in statement.inner_text()
    assert turn.locator(".source-item").count() == 1
    answered_question = turn.locator(".curated-question").inner_text()  # the question support answered, not carol's
    assert answered_question.startswith("Support's answer to:") and TABS_QUESTION in answered_question, answered_question
    screenshot(page, "curated-answer")
    page.reload()  # the replay shows the same
    page.wait_for_function("() => window.__kbAsk.events.filter(e => e === 'done').length >= 1")
    assert page.locator("#answer .turn").last.locator(".backend-badge").inner_text() == badge
    assert page.locator("#answer .turn").last.locator(".curated-question").inner_text() == answered_question

    # The document again, with the cited passage changed: indexed as a worker indexes it.
    data = SHIPMENTS.replace(SENTENCE, CHANGED).encode()
    document_upload(name="shipments.md", stream=io.BytesIO(data), size=len(data), enqueue=False)
    assert ingest(shipments.pk) == "ready"
    document_indexed.send(sender=test_sam_curates_from_a_gap_carol_receives_it_and_a_changed_passage_makes_it_stale,
                          document_ids=[shipments.pk], sync=True)
    desk.goto("/review/curated/")
    stale = desk.locator(".curated-item[data-state='stale']")
    stale.wait_for()
    assert "changed in Shipments console" in stale.locator(".curated-stale").inner_text()
    assert desk.locator("#curated-states [data-count='stale']").inner_text() == "1"

    page.get_by_label("Your question").fill(PARAPHRASE)
    page.click("#ask-submit")
    again = produce_pending(carol, 3)
    assert again.curated_id is None and Message.objects.get(pk=again.pk).backend != "curated"
    page.wait_for_function("() => window.__kbAsk.events.filter(e => e === 'done').length >= 2")
    assert not page.locator("#answer .turn").last.locator(".backend-badge").inner_text().startswith("Answer from support")
    assert_clean(desk)
    assert_clean(page)
