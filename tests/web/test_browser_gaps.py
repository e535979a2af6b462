"""Content gaps in Chromium against the session's Daphne: an employee says a refused question should have been
answered ("The documents do answer this") and a support reviewer names the document on the review desk; an admin finds the question under content gaps from the admin index, with the
named document, and a question whose answer sits in a folder they cannot read shown only as who may read it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chat.conftest import SHIPMENTS, VAULT, VAULT_QUESTION
from tests.factories import ingested_document
from tests.web.conftest import assert_clean, assert_fits_width, assert_labelled, screenshot
from tests.web.test_browser_ask import answered
from tests.web.test_browser_judgements import TABS_QUESTION, name_the_document, refused

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_an_employees_should_have_answered_verdict_reaches_the_admins_content_gaps(
    open_page: Any, people: dict[str, Any], settings: Any
) -> None:
    from chat.models import Judgement

    shipments = ingested_document(SHIPMENTS, "shipments.md")
    vault = ingested_document(VAULT, "vault.md", public=False, groups=[people["groups"]["engineering"]])
    refusal = refused(people["carol"], TABS_QUESTION, settings)
    assert answered(people["bob"], VAULT_QUESTION).status == "refused"  # bob may not read the vault

    page = open_page(people["carol"])
    page.goto(f"/?c={refusal.conversation_id}")
    page.wait_for_selector("#ask[data-state=connected]")  # the turn is drawn again from the socket's replay
    page.get_by_role("group", name="Judge this refusal").get_by_role("button", name="Not helpful").click()
    page.get_by_role("button", name="Send feedback").click()
    page.locator('.turn-rating button[data-thumb="down"][aria-pressed="true"]').wait_for()
    assert Judgement.objects.get(message=refusal).kind == "should_answer"

    desk = open_page(people["sam"])
    desk.goto("/review/")
    item = desk.locator(f".review-item[data-message='{refusal.pk}']")
    item.get_by_role("group", name="Judge this refusal").get_by_role("button", name="Should have answered").click()
    name_the_document(item.locator(".judge-document"), shipments.title)
    item.locator(".review-judgement[data-kind='should_answer']").filter(has_text="sam").wait_for()
    assert Judgement.objects.get(message=refusal, judge=people["sam"]).document_id == shipments.pk

    carol_gaps = open_page(people["carol"]).goto("/gaps/")
    assert carol_gaps is not None and carol_gaps.status == 404  # employees have no such page

    admin = open_page(people["admin"])
    admin.goto("/admin/")
    admin.get_by_role("link", name="Content gaps").click()
    admin.wait_for_url("**/gaps/")
    topic = admin.locator("article.gap-topic").filter(has_text=TABS_QUESTION)
    assert topic.count() == 1
    assert topic.locator(".gap-verdict").inner_text() == "The askers may read a document that may answer it: the search missed it"
    named = topic.locator(".gap-documents li").filter(has_text=shipments.title)
    assert "named by 1 verdict" in named.inner_text() and "1 of 1 asker may read it" in named.inner_text()
    assert named.get_by_role("link", name=shipments.title).get_attribute("href") == f"/documents/{shipments.pk}/"
    assert "(refused, should have answered, " in topic.locator(".gap-examples").inner_text()

    restricted = admin.locator("article.gap-topic").filter(has_text=VAULT_QUESTION)
    assert restricted.locator(".gap-verdict").inner_text() == "The answer may exist, in documents the askers cannot read"
    assert "1 document you cannot read, readable by: engineering" in restricted.locator(".gap-hidden").inner_text()
    assert vault.title not in admin.locator("main").inner_text()

    admin.get_by_label("Asked in the last").select_option("7")
    admin.get_by_role("button", name="Show").click()
    admin.wait_for_url("**/gaps/?days=7")
    assert admin.locator("article.gap-topic").count() == 2
    assert admin.get_by_role("link", name="Download CSV").get_attribute("href") == "/api/gaps.csv?days=7"
    assert_labelled(admin)
    assert_fits_width(admin)
    assert_clean(admin)
    screenshot(admin, "content-gaps", full_page=True)
