"""Recalibrating from verdicts in Chromium against the session's real Daphne (issue 29 item 3): an admin refits
the answer/refuse model from the deployment's verdicts, reads what it was fitted on and its cross-validated
frontier, accepts it — the next question, asked in another process than Daphne's, is decided by it — and
reverts to the settings' model in one click. Answers and verdicts are produced in this process with the real
services (tests.lab.test_calibrate_verdicts.judged)."""

from __future__ import annotations

from typing import Any

import pytest

from search.answerability import model_from_json
from search.models import AnswerabilityModel
from tests.lab.test_calibrate_verdicts import QUESTIONS, decisions, judged
from tests.web.conftest import assert_clean, assert_labelled, screenshot

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_an_admin_recalibrates_from_verdicts_accepts_and_reverts_in_the_admin(
    open_page: Any, people: dict[str, Any], settings: Any
) -> None:
    judged(people, settings)
    before = decisions(people["carol"])

    page = open_page(people["admin"])
    page.goto("/admin/search/answerabilitymodel/")
    assert "the settings’ model (KB_ANSWERABILITY)" in page.locator("#serving-model").inner_text()
    page.get_by_role("button", name="Learn from verdicts").click()
    page.locator("#frontier").wait_for()
    proposal = AnswerabilityModel.objects.get()
    assert page.url.endswith(f"/admin/search/answerabilitymodel/{proposal.pk}/change/")
    assert "State: proposed" in page.locator("#model-state").inner_text()
    fitted_on = page.locator("#fitted-on").inner_text()
    assert f"{len(QUESTIONS)} (" in fitted_on and "160 samples (shipped_prior.json)" in fitted_on
    assert "nearest" in page.locator("#candidates").inner_text()
    assert page.locator("#frontier tbody tr").count() == 6
    judges = page.locator("#judges tbody tr")  # who judged: alice, every question once, alone
    assert judges.count() == 1 and "alice" in judges.inner_text() and "12" in judges.inner_text()
    assert_labelled(page)
    screenshot(page, "calibration-proposal", full_page=True)
    assert decisions(people["carol"]) == before, "a proposal changes nothing"

    page.get_by_role("button", name=f"Accept: let {proposal} decide answer or refuse").click()
    page.locator("#serving-model").wait_for()
    assert f"Deciding answer or refuse now: {proposal}" in page.locator("#serving-model").inner_text()
    accepted = AnswerabilityModel.objects.get(pk=proposal.pk)
    assert accepted.active and accepted.accepted_by == people["admin"]
    new = model_from_json(accepted.model)
    after = decisions(people["carol"])  # this process, not Daphne's, reads the accepted model
    assert all(p is not None for _, p in after)
    assert [round(p, 6) for _, p in after if p is not None] != [round(p, 6) for _, p in before if p is not None]
    assert all(answered == (p is not None and p >= new.cutoff) for answered, p in after)
    screenshot(page, "calibration-accepted")

    page.get_by_role("button", name="Revert to the settings’ model").click()
    page.wait_for_selector("text=Reverted: the settings’ model decides answer or refuse")
    assert not AnswerabilityModel.objects.filter(active=True).exists()
    assert decisions(people["carol"]) == before, "the revert restores the previous decisions exactly"
    assert_clean(page)
