"""Picking the passage that answers a question in the document viewer (kb/library/static/kb/viewer.js, pick mode), in
Chromium against a real Daphne: alice's refused question, with the passage she picks from her feedback on the Ask page
(chat/static/chat/feedback.js), is remembered (search.memory),
and bob's question in other words is answered from that passage; a reviewer reaches pick mode from the review desk's
"Should have answered" (chat/static/chat/dom.js). Answers are produced in this process with the real services
(tests.web.test_browser_ask)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chat.test_memory import ASKED, HANDBOOK, PARAPHRASE, SWAP
from tests.factories import ingested_document
from tests.web.conftest import assert_clean, assert_fits_width, assert_labelled, screenshot
from tests.web.test_accessibility import AXE_SCRIPT, check_here
from tests.web.test_browser_ask import answered
from tests.web.test_browser_judgements import FIRST_SEARCH_MS

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PARAGRAPH = SWAP + "\nA loan device is yours for as long as the exchange takes."


def test_alice_picks_the_passage_for_her_refused_question_and_bob_asking_otherwise_is_answered_from_it(
    open_page: Any, people: dict[str, Any]
) -> None:
    from chat.models import Judgement
    from kb.library.models import Chunk
    from search.models import RememberedQuestion

    handbook = ingested_document(HANDBOOK, "handbook.md")
    swap = Chunk.objects.get(document=handbook, content__contains="notebooks are exchanged")
    refusal = answered(people["alice"], ASKED)
    assert refusal.status == "refused"
    assert answered(people["bob"], PARAPHRASE).status == "refused"  # before the verdict

    page = open_page(people["alice"])
    page.context.add_init_script(AXE_SCRIPT)
    # On the Ask page: thumbs down on the refusal, "The documents do answer this" with her words, then where.
    page.goto(f"/?c={refusal.conversation_id}")
    page.wait_for_selector("#ask[data-state=connected]")  # the turn is drawn again from the socket's replay
    feedback = page.locator(".turn-feedback").last
    feedback.get_by_role("button", name="Not helpful").click()
    feedback.get_by_label("Anything else? (optional)").fill("It is in the handbook")
    feedback.get_by_role("button", name="Send feedback").click()
    feedback.get_by_role("button", name="Show where the documents answer it").click()
    picker = feedback.locator(".judge-document")
    picker.locator(".judge-choice").first.wait_for(timeout=FIRST_SEARCH_MS)
    picker.get_by_label(handbook.title, exact=True).check()
    pick = picker.get_by_role("link", name="Pick the passage")
    assert f"/documents/{handbook.pk}/?pick={refusal.pk}&role=asker&kind=should_answer" in (pick.get_attribute("href") or "")
    pick.click()
    bar = page.locator("#pick-bar")
    bar.get_by_text(ASKED).wait_for()
    assert "Select the passage that answers:" in bar.inner_text()
    save = page.get_by_role("button", name="This answers the question")
    assert save.is_disabled()
    page.wait_for_function("() => document.activeElement && document.activeElement.id === 'pick-label'")

    # The mouse: a triple click selects the paragraph.
    block = page.locator("#doc-text .pick-block", has_text="notebooks are exchanged")
    block.click(click_count=3)
    page.wait_for_function("() => !document.getElementById('pick-save').disabled")
    assert "Damaged notebooks" in page.locator("#pick-status").inner_text()
    page.evaluate("window.getSelection().removeAllRanges()")
    page.wait_for_function("() => document.getElementById('pick-save').disabled")
    # The keyboard: Tab to the paragraph, Enter selects it.
    page.locator("#doc-text .pick-block").first.focus()
    for _ in range(10):
        if page.evaluate("document.activeElement.textContent").startswith("Damaged notebooks"):
            break
        page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    assert save.is_enabled()
    assert_labelled(page)
    assert check_here(page, "employee", "viewer in pick mode") == []
    page.set_viewport_size({"width": 390, "height": 844})
    assert bar.is_visible() and save.is_visible()
    assert_fits_width(page)
    screenshot(page, "viewer-pick-phone")
    save.focus()
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/?c={refusal.conversation_id}*")
    page.wait_for_selector("#ask[data-state=connected]")
    assert_clean(page)

    start = (handbook.canonical_text or "").index(PARAGRAPH)
    verdict = Judgement.objects.get(message=refusal)
    assert (verdict.judge, verdict.role, verdict.kind, verdict.document_id, verdict.passage, verdict.start, verdict.end) == (
        people["alice"], "asker", "should_answer", handbook.pk, swap.stable_id, start, start + len(PARAGRAPH))
    assert (verdict.reason, verdict.note) == ("should_answer", "It is in the handbook")  # naming the passage keeps them
    remembered = RememberedQuestion.objects.get()
    assert (remembered.question, remembered.kind, remembered.stable_id) == (ASKED, "linked", swap.stable_id)

    # bob asks in his own words: answered now, from the passage alice picked.
    answer = answered(people["bob"], PARAPHRASE)
    assert answer.status == "done" and answer.signals["remembered"] == [remembered.pk]
    assert answer.citations.get(number=1).document_id == handbook.pk
    reader = open_page(people["bob"])
    reader.goto(f"/?c={answer.conversation_id}")
    chip = reader.locator("#answer .cite-chip").first
    chip.wait_for()
    assert chip.get_attribute("href").startswith(f"/documents/{handbook.pk}/")
    assert ASKED not in reader.content()  # alice's words are hers
    assert_clean(reader)


def test_a_reviewer_reaches_pick_mode_from_should_have_answered_on_the_desk(
    open_page: Any, people: dict[str, Any]
) -> None:
    from chat.models import Judgement

    handbook = ingested_document(HANDBOOK, "handbook.md")
    refusal = answered(people["carol"], ASKED)
    assert refusal.status == "refused"

    page = open_page(people["sam"])
    page.goto("/review/")
    item = page.locator(f".review-item[data-message='{refusal.pk}']")
    item.get_by_role("group", name="Judge this refusal").get_by_role("button", name="Should have answered").click()
    picker = item.locator(".judge-document")
    picker.locator(".judge-choice").first.wait_for(timeout=FIRST_SEARCH_MS)
    pick = picker.get_by_role("link", name="Pick the passage")
    assert pick.is_hidden()
    picker.get_by_label(handbook.title, exact=True).check()
    assert pick.is_visible()
    assert f"/documents/{handbook.pk}/?pick={refusal.pk}&role=reviewer&kind=should_answer" in (pick.get_attribute("href") or "")
    pick.click()
    page.locator("#pick-bar").get_by_text(ASKED).wait_for()
    page.locator("#doc-text .pick-block", has_text="Each desk may have two monitors").focus()
    page.keyboard.press("Enter")
    page.get_by_role("button", name="This answers the question").click()
    page.wait_for_url("**/review/*")  # the desk as sam left it (the answer judged, it has left his queue)
    page.wait_for_selector("#review-list")
    verdict = Judgement.objects.get(message=refusal)
    assert (verdict.judge, verdict.role, verdict.kind, verdict.document_id) == (people["sam"], "reviewer", "should_answer",
                                                                              handbook.pk)
    assert "two monitors" in (handbook.canonical_text or "")[verdict.start or 0: verdict.end or 0]
    assert_clean(page)
