"""Review scope in Chromium against a real Daphne (issue 29 item 6): a superuser grants sam review of engineering in
the admin; sam sees an engineering answer in full on the review desk, marked as shown through the grant; the access
log in the admin shows his read, from the review page; revoked, the next load withholds it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chat.conftest import VAULT, VAULT_QUESTION
from tests.factories import ingested_document
from tests.web.conftest import assert_clean, assert_labelled, screenshot
from tests.web.test_browser_ask import answered

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SECRET = "ZX-4412-QUARTZ"


def test_sam_granted_review_of_engineering_sees_its_answer_and_the_access_log_shows_it(
    open_page: Any, people: dict[str, Any]
) -> None:
    from chat.models import ReviewAccess, ReviewGrant

    ingested_document(VAULT, "vault.md", public=False, groups=[people["groups"]["engineering"]])
    answer = answered(people["alice"], VAULT_QUESTION)
    assert SECRET in answer.text

    sam = open_page(people["sam"])
    sam.goto("/review/")
    sam.wait_for_selector("#review-list[data-loaded=true]")
    # Withheld (no grant yet): a count on the review queue, never a row (issue 49 item 4).
    assert sam.locator(f".review-item[data-message='{answer.pk}']").count() == 0
    assert "1 answer draws on documents you cannot read" in sam.locator("#review-hidden").inner_text()
    assert SECRET not in sam.content()

    admin = open_page(people["admin"])
    admin.goto("/admin/chat/reviewgrant/add/")
    admin.select_option("#id_reviewer", label="sam")
    admin.select_option("#id_group", label="engineering")
    admin.get_by_label("Note").fill("Ticket 4412: audit of engineering answers")
    admin.locator("input[name=_save]").click()
    admin.get_by_text("sam reviews group engineering").first.wait_for()
    grant = ReviewGrant.objects.get()
    assert (grant.reviewer, grant.group, grant.granted_by) == (people["sam"], people["groups"]["engineering"],
                                                              people["admin"])

    sam.reload()
    item = sam.locator(f".review-item[data-message='{answer.pk}']")
    item.wait_for()
    assert SECRET in item.locator(".review-answer").inner_text()
    assert "Shown through your review grant (group engineering)" in item.locator(".review-granted").inner_text()
    assert SECRET in item.locator(".review-quote").first.inner_text()  # the cited passage with it
    assert item.locator("a.review-cite-link").count() == 0  # but no link to the viewer, which stays closed
    assert_labelled(sam)
    screenshot(sam, "review-scope-granted")
    [read] = ReviewAccess.objects.all()
    assert (read.reviewer, read.answer, read.surface, read.grants) == (people["sam"], answer.pk, "review_page",
                                                                      "group engineering")

    admin.goto("/admin/chat/reviewaccess/")
    row = admin.locator("#result_list tbody tr").first
    row.wait_for()
    text = row.inner_text()
    assert "sam" in text and str(answer.pk) in text and "Review page" in text and "group engineering" in text
    screenshot(admin, "review-access-log")

    # Revoked in the admin: sam's next load withholds the answer again, and logs nothing more.
    admin.goto(f"/admin/chat/reviewgrant/{grant.pk}/delete/")
    admin.locator("input[type=submit]").click()
    admin.get_by_text("was deleted successfully").wait_for()
    sam.reload()
    sam.wait_for_selector("#review-list[data-loaded=true]")
    assert sam.locator(f".review-item[data-message='{answer.pk}']").count() == 0
    assert "1 answer draws on documents you cannot read" in sam.locator("#review-hidden").inner_text()
    assert SECRET not in sam.content()
    assert sam.locator(".review-granted").count() == 0
    assert ReviewAccess.objects.count() == 1
    assert_clean(sam)
    assert_clean(admin)
