"""The Ask page and the review desk in Chromium against a real Daphne.

Answers asked from the page are produced by a real Celery worker (chat.tasks) and streamed over
/ws/chat/<id>/; answers the test only needs to exist are produced in this process with the
same service (chat.services.answer_produce)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from chat.review.desk_api import PREVIEW_CHARS
from tests.chat.conftest import EXPORT_QUESTION, SHIPMENTS, VAULT, VAULT_QUESTION
from tests.conftest import ROOT, start_worker, stop_process
from tests.factories import ingested_document, ingested_folder
from tests.web.conftest import assert_clean, assert_fits_width, assert_labelled, screenshot
from tests.web.test_browser import HOSTILE_MD, PHONE, first_mark_in_view, text_of_marks

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

HOSTILE_QUESTION = "Where is the release checklist for the release notes?"
HOSTILE_DOC = HOSTILE_MD + (
    "\nThe release checklist is kept at https://example.invalid/checklist and javascript:alert(1) is not a link.\n"
)


@pytest.fixture(scope="module")
def _paced_worker_process(django_db_setup: None) -> Iterator[Any]:
    """Started once for the module (a worker takes ~25 s to start here): the other tests of the module
    produce their answers in this process and queue nothing it could take."""
    worker = start_worker("celery-web-ask", KB_ANSWER_BACKEND="tests.web.paced_backend.PacedExtractive")
    try:
        yield worker
    finally:
        stop_process(worker)


@pytest.fixture
def paced_worker(transactional_db: None, _paced_worker_process: Any) -> Any:
    """A real Celery worker whose answers come at a readable pace (see paced_backend.py)."""
    return _paced_worker_process


def answered(user: Any, question: str) -> Any:
    """An answer produced here, as the worker would, for tests that only need one to exist."""
    from chat.models import Message
    from chat.services import answer_produce, question_ask

    asked = question_ask(user=user, question=question, enqueue=False)
    answer_produce(message_id=asked.answer.pk, job_id=str(asked.answer.job_id))
    return Message.objects.get(pk=asked.answer.pk)


def ask_in_page(page: Any, question: str) -> None:
    page.wait_for_selector("#ask[data-state=connected]")
    page.get_by_label("Your question").fill(question)
    page.click("#ask-submit")


# --------------------------------------------------------------------------- (a) streaming, citations, viewer


def test_alice_sees_the_answer_stream_and_opens_the_cited_passage(
    open_page: Any, people: dict[str, Any], paced_worker: Any
) -> None:
    from chat.models import Citation

    document = ingested_document(SHIPMENTS, "shipments.md", public=False, groups=[people["groups"]["engineering"]])
    page = open_page(people["alice"])
    page.goto("/")
    ask_in_page(page, EXPORT_QUESTION)

    # Two observations of the growing text, both before `done`.
    page.wait_for_function("() => Number(document.getElementById('answer').dataset.length || 0) > 0", timeout=30_000)
    first = page.evaluate("() => ({n: Number(document.getElementById('answer').dataset.length), done: window.__kbAsk.events.includes('done')})")
    page.wait_for_function("n => Number(document.getElementById('answer').dataset.length) > n", arg=first["n"])
    second = page.evaluate("() => ({n: Number(document.getElementById('answer').dataset.length), done: window.__kbAsk.events.includes('done')})")
    assert not first["done"] and not second["done"], (first, second)
    assert second["n"] > first["n"]
    screenshot(page, "ask-streaming")

    page.wait_for_function("() => window.__kbAsk.events.includes('done')", timeout=30_000)
    trace = page.evaluate("window.__kbAsk")
    assert trace["tokensBeforeDone"] >= 3, trace
    assert trace["events"].index("done") > max(i for i, e in enumerate(trace["events"]) if e == "token")

    chips = page.locator("#answer .cite-chip")
    assert chips.count() >= 1
    citation = Citation.objects.filter(message__conversation__owner=people["alice"], number=1).get()
    assert citation.document_id == document.pk
    assert page.locator("#answer .turn .turn-sources .source-item").count() >= 1  # under the answer, its own
    assert page.locator(".backend-badge").inner_text() == "Quoted from sources"

    # Hover preview: the quoted passage and its breadcrumb, as text.
    chips.first.hover()
    preview = page.locator("#answer .cite-preview").first
    assert preview.is_visible()
    assert citation.quote.split("\n")[-1].strip()[:40] in preview.inner_text()
    assert citation.label in preview.inner_text()
    assert_labelled(page)
    screenshot(page, "ask-answer")

    # History: the conversation is listed; reloading it shows the same answer.
    assert page.locator("#history .history-link").count() == 1

    chips.first.click()
    page.wait_for_url(f"**/documents/{document.pk}/#char={citation.start},{citation.end}*")
    page.wait_for_selector("#doc-text mark.hl")
    assert text_of_marks(page) == citation.quote == document.canonical_text[citation.start : citation.end]
    page.wait_for_timeout(400)  # smooth scrolling
    assert first_mark_in_view(page)
    screenshot(page, "ask-citation-viewer")
    assert_clean(page)


# --------------------------------------------------------------------------- (e) restricted documents


def test_carol_never_gets_a_restricted_document_cited(open_page: Any, people: dict[str, Any], paced_worker: Any) -> None:
    from chat.models import Citation

    vault = ingested_document(VAULT, "vault.md", public=False, groups=[people["groups"]["engineering"]])
    ingested_document(SHIPMENTS, "shipments.md")
    page = open_page(people["carol"])
    page.goto("/")
    ask_in_page(page, VAULT_QUESTION)
    page.wait_for_function(
        "() => ['done', 'refused', 'error'].some(e => window.__kbAsk.events.includes(e))", timeout=30_000
    )
    text = page.locator("#answer").inner_text()
    assert "ZX-4412" not in text
    assert page.locator(f"#answer a[href^='/documents/{vault.pk}/']").count() == 0  # sources listed in #answer
    assert not Citation.objects.filter(document=vault).exists()
    if "refused" in page.evaluate("window.__kbAsk.events"):
        assert "I couldn't find this in the documents you can read" in text
        assert not [link for link in closest_links(page) if link.startswith(f"/documents/{vault.pk}/")]
        assert "ZX-4412" not in page.locator("#answer").inner_text()
    screenshot(page, "ask-refused-carol")


# --------------------------------------------------------------------------- (f) beside a refusal


def closest_links(page: Any) -> list[str]:
    """Once the page's search beside the latest refusal has answered: the passages it offers. The first search
    a fresh Daphne serves loads the embedding model (torch and MiniLM: 49 s measured at load average 6.4 on
    2 cores, a few seconds on a quiet machine), hence the long wait."""
    page.wait_for_selector("#answer .turn[data-closest]", timeout=120_000)
    return [a.get_attribute("href") for a in page.locator("#answer .answer-closest a").all()]


def test_a_refusal_offers_the_closest_passages_the_asker_may_read_now(
    open_page: Any, people: dict[str, Any], settings: Any
) -> None:
    """The passages beside a refusal come from a search made when the page shows it: an outsider is
    never offered a restricted one, nor is a member once they have left its group."""
    settings.KB_ANSWERABILITY = {**settings.KB_ANSWERABILITY, "cutoff": 0.999999}  # answers made here are refused
    engineering = people["groups"]["engineering"]
    vault = ingested_document(VAULT, "vault.md", public=False, groups=[engineering])
    ingested_document(SHIPMENTS, "shipments.md")
    refused = {name: answered(people[name], VAULT_QUESTION) for name in ("alice", "carol")}
    assert {answer.status for answer in refused.values()} == {"refused"}

    page = open_page(people["alice"])
    page.goto(f"/?c={refused['alice'].conversation_id}")
    links = closest_links(page)
    # The middle state: passages on the topic, no composed answer, and never a number.
    assert page.locator(".answer-refused-title").inner_text() == "These passages may help, but none answers it directly"
    assert not any(c.isdigit() for c in page.locator(".answer-refused").inner_text())
    assert links and links[0].startswith(f"/documents/{vault.pk}/#char="), links
    assert "ZX-4412" in page.locator("#answer .answer-closest").inner_text()
    assert_labelled(page)
    screenshot(page, "ask-refused-closest")
    page.locator("#answer .answer-closest a").first.click()
    page.wait_for_selector("#doc-text mark.hl")
    assert "ZX-4412-QUARTZ" in text_of_marks(page)

    people["alice"].groups.remove(engineering)
    page.goto(f"/?c={refused['alice'].conversation_id}")
    assert not [link for link in closest_links(page) if link.startswith(f"/documents/{vault.pk}/")]
    assert "ZX-4412" not in page.locator("#answer").inner_text()

    page = open_page(people["carol"])
    page.goto(f"/?c={refused['carol'].conversation_id}")
    assert not [link for link in closest_links(page) if link.startswith(f"/documents/{vault.pk}/")]
    assert "ZX-4412" not in page.locator("#answer").inner_text()
    refusal = page.locator(".answer-refused").inner_text()
    assert "I couldn't find this in the documents you can read" in refusal and not any(c.isdigit() for c in refusal)
    assert_clean(page)


# --------------------------------------------------------------------------- (c) hostile text stays inert


def test_a_hostile_document_is_inert_in_answers_and_previews(open_page: Any, people: dict[str, Any]) -> None:
    ingested_document(HOSTILE_DOC, "release-notes.md")
    answer = answered(people["carol"], HOSTILE_QUESTION)
    assert answer.status == "done", (answer.status, answer.refusal_reason, answer.error)

    page = open_page(people["carol"])
    page.goto(f"/?c={answer.conversation_id}")
    page.wait_for_selector("#answer .turn-answer p")
    found = page.evaluate(
        """() => {
          const root = document.querySelector('.ask-main');
          return {
            elements: root.querySelectorAll('script, iframe, svg:not([aria-hidden]), object, embed, img').length,
            handlers: Array.from(root.querySelectorAll('*')).filter(e => Array.from(e.attributes).some(a => a.name.startsWith('on'))).length,
            links: Array.from(root.querySelectorAll('#answer a')).map(a => a.getAttribute('href')).filter(h => !/^\\/documents\\/\\d+\\/#char=/.test(h)),
          };
        }"""
    )
    assert found == {"elements": 0, "handlers": 0, "links": []}
    assert "example.invalid" in page.locator("#answer").inner_text()  # the URL is shown, as text
    for chip in page.locator("#answer .cite-chip").all():
        chip.hover()
        preview = page.locator("#" + chip.get_attribute("aria-describedby"))
        assert preview.is_visible()
        assert "<script>window.__pwned" in preview.inner_text()  # the quote, shown as text
        chip.focus()
        assert preview.is_visible()
        chip.blur()
    # Click on every "javascript" the answer's own text shows (not a citation preview's quote).
    spots = page.evaluate(
        """() => {
          const walker = document.createTreeWalker(document.querySelector('#answer .turn-answer'), NodeFilter.SHOW_TEXT);
          const spots = [];
          for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            if (node.parentElement.closest('.cite-preview')) continue;
            const text = node.data.toLowerCase();
            for (let at = text.indexOf('javascript'); at >= 0; at = text.indexOf('javascript', at + 1)) {
              const range = document.createRange();
              range.setStart(node, at);
              range.setEnd(node, at + 'javascript'.length);
              const box = range.getBoundingClientRect();
              spots.push([box.x + box.width / 2, box.y + box.height / 2]);
            }
          }
          return spots;
        }"""
    )
    assert spots, page.locator("#answer").inner_text()  # the answer quotes the "javascript:" text
    for x, y in spots:
        page.mouse.click(x, y)
    page.wait_for_timeout(300)
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.evaluate("window.__kb.csp") == []
    screenshot(page, "ask-hostile")


# --------------------------------------------------------------------------- (d) phone width


def test_the_ask_page_with_an_answer_at_phone_width(open_page: Any, people: dict[str, Any]) -> None:
    ingested_document(SHIPMENTS, "shipments.md")
    answer = answered(people["alice"], EXPORT_QUESTION)
    assert answer.status == "done"
    page = open_page(people["alice"], **PHONE)
    page.goto(f"/?c={answer.conversation_id}")
    page.wait_for_selector("#answer .cite-chip")
    page.wait_for_selector("#history .history-link", state="attached")  # behind the History button on a phone
    assert page.get_by_label("Your question").is_visible()
    assert_labelled(page)
    assert_fits_width(page)
    assert_clean(page)
    screenshot(page, "ask-answer-390", full_page=True)

    # A thumbs down with "Wrong or outdated", stored for the asker; pressing the thumb again takes it back.
    page.get_by_role("button", name="Not helpful").click()
    page.get_by_role("button", name="Wrong or outdated").click()
    assert_fits_width(page)
    page.get_by_role("button", name="Send feedback").click()
    page.wait_for_selector('.turn-rating button[data-thumb="down"][aria-pressed="true"]')
    assert type(answer).objects.get(pk=answer.pk).rating == -1
    assert_fits_width(page)
    page.get_by_role("button", name="Not helpful").click()
    page.wait_for_selector('.turn-rating button[data-thumb="down"][aria-pressed="false"]')
    assert type(answer).objects.get(pk=answer.pk).rating == 0


# --------------------------------------------------------------------------- (b) the review desk


def test_sam_flags_a_citation_and_finds_it_under_flagged(open_page: Any, people: dict[str, Any]) -> None:
    from chat.models import Feedback

    ingested_document(SHIPMENTS, "shipments.md")
    answer = answered(people["alice"], EXPORT_QUESTION)
    citation = answer.citations.get(number=1)

    alice = open_page(people["alice"])
    response = alice.goto("/review/")
    assert response is not None and response.status == 404

    page = open_page(people["sam"])
    page.goto("/review/")
    item = page.locator(f".review-item[data-message='{answer.pk}']")
    item.wait_for()
    row = item.locator(".review-cite[data-citation='1']")
    assert citation.quote.strip()[:40] in row.locator(".review-quote").inner_text()
    assert row.locator("a.review-cite-link").get_attribute("href") == citation.link
    assert len(citation.quote) > PREVIEW_CHARS  # the list sends the start of the quote; the rest on demand
    assert row.locator(".review-quote").inner_text().endswith("…")
    item.get_by_role("button", name="Show the whole answer and passages").click()
    item.get_by_role("button", name="Show the whole answer and passages").wait_for(state="detached")
    assert row.locator(".review-quote").inner_text() == citation.quote
    assert_labelled(page)
    screenshot(page, "review-recent")

    row.get_by_role("button", name="Flag [1]").click()  # one button opens the citation's flag form
    row.get_by_label("Flag [1] as").select_option("unsupported")
    row.get_by_label("Note for [1]").fill("The dialog has no PDF tab any more since the 4.2 release.")
    row.get_by_role("button", name="Flag citation").click()
    row.locator(".flag-done").wait_for()
    flag = Feedback.objects.get()
    assert (flag.kind, flag.citation_id, flag.reviewer_id) == ("unsupported", citation.pk, people["sam"].pk)

    page.goto("/review/?filter=flagged")
    page.wait_for_selector("#review-list[data-loaded=true]")
    assert page.locator(".review-item").count() == 1
    flagged = page.locator(f".review-item[data-message='{answer.pk}'] .review-cite[data-citation='1'] .flag")
    assert "Unsupported claim" in flagged.inner_text()
    assert "no PDF tab any more" in flagged.inner_text()
    assert_clean(page)
    screenshot(page, "review-flagged")


# --------------------------------------------------------------------------- (f) the demo's example question


def test_the_demo_failover_question_is_answered_in_steps_led_by_manual_failover(
    open_page: Any, people: dict[str, Any], paced_worker: Any
) -> None:
    ingested_folder(ROOT / "demo" / "corpus" / "engineering")  # why a folder: test_extractive's failover test
    page = open_page(people["alice"])
    page.goto("/")
    ask_in_page(page, "How do I fail over the planning database?")
    page.wait_for_function("() => window.__kbAsk.events.includes('done')", timeout=60_000)

    lines = [line.strip() for line in page.locator("#answer .turn-answer").last.inner_text().splitlines()]
    numbered = [int(m.group(1)) for m in (re.match(r"(\d+)\. ", line) for line in lines) if m]
    assert numbered[:3] == [1, 2, 3], lines
    assert lines[0].startswith("1. ") and not any("Maintenance windows" in line for line in lines), lines
    # The lead citation (the first step's) opens the runbook's Manual failover section.
    chip = page.locator("#answer .cite-chip").first
    chip.hover()
    assert "Manual failover" in page.locator("#answer .cite-preview").first.inner_text()
    screenshot(page, "ask-failover-steps")


def test_sam_sees_an_unsupported_claim_first_and_confirms_it(
    open_page: Any, people: dict[str, Any], settings: Any
) -> None:
    from chat.models import Feedback, Message
    from tests.chat.openai_stub import StubOpenAI
    from tests.chat.test_answering import use_stub
    from tests.chat.test_api import UNSUPPORTED_TOKENS

    ingested_document(SHIPMENTS, "shipments.md")
    with StubOpenAI(UNSUPPORTED_TOKENS) as stub:
        use_stub(settings, stub)
        flagged = answered(people["alice"], EXPORT_QUESTION)
    settings.KB_ANSWER_BACKEND = "extractive"
    newer = answered(people["alice"], EXPORT_QUESTION)
    assert flagged.unsupported and not newer.unsupported

    page = open_page(people["sam"])
    page.goto("/review/")
    page.wait_for_selector("#review-list[data-loaded=true]")
    first = page.locator(".review-item").first
    assert first.get_attribute("data-message") == str(flagged.pk)  # older, but it has an unjudged claim
    claim = first.locator(".unsupported-claim")
    assert "The Export dialog offers XLSX and JSON" in claim.inner_text()
    assert "not found in source [1]" in claim.inner_text()
    assert_labelled(page)
    screenshot(page, "review-unsupported")
    claim.get_by_role("button", name="Confirm").click()
    page.wait_for_selector(".unsupported-claim[data-verdict=confirmed]")
    assert Message.objects.get(pk=flagged.pk).unsupported[0]["verdict"] == "confirmed"
    assert Feedback.objects.get(message=flagged).kind == "unsupported"


# --------------------------------------------------------------------------- (f) long conversations


def test_a_long_conversation_opens_at_its_latest_page_and_a_waiting_answer_streams_in(
    open_page: Any, people: dict[str, Any]
) -> None:
    from chat.selectors import MESSAGES_PAGE
    from chat.services import answer_produce, question_ask
    from tests.chat.test_pages import long_conversation

    alice = people["alice"]
    corpus = {"shipments": ingested_document(SHIPMENTS, "shipments.md"),
              "vault": ingested_document(VAULT, "vault.md", public=False, groups=[people["groups"]["engineering"]])}
    turns = MESSAGES_PAGE // 2 + 5
    conversation = long_conversation(alice, corpus, turns=turns)
    waiting = question_ask(user=alice, question=EXPORT_QUESTION, conversation_id=conversation.pk, enqueue=False)

    page = open_page(alice)
    page.goto(f"/?c={conversation.pk}")
    page.wait_for_selector("#answer .turn-earlier")
    questions = page.locator("#answer .turn-question").all_inner_texts()
    assert len(questions) == MESSAGES_PAGE // 2 and questions[-1].endswith(EXPORT_QUESTION)
    assert "Waiting for the assistant" in page.locator("#answer .turn").last.inner_text()

    page.click("#answer .turn-earlier")
    page.wait_for_function(f"() => document.querySelectorAll('#answer .turn').length === {turns + 1}")
    assert page.locator("#answer .turn-earlier").count() == 0  # nothing earlier is left
    questions = page.locator("#answer .turn-question").all_inner_texts()
    assert [q.split(":", 1)[1].strip() for q in questions] == [
        *(f"question {i}" for i in range(turns)), EXPORT_QUESTION]
    assert page.locator("#answer .turn").first.locator(".cite-chip").count() == 1

    # The page resumed the stream of the answer that was still waiting: it arrives without a reload.
    answer_produce(message_id=waiting.answer.pk, job_id=str(waiting.answer.job_id))
    page.wait_for_function("() => window.__kbAsk.events.includes('done')", timeout=30_000)
    page.locator("#answer .turn").last.locator(".cite-chip").first.wait_for()
    assert page.locator("#answer .answer-error").count() == 0
