"""Verdicts weighed per person (issue 47 item 9): one ordinary user judging the same questions over and over,
inverted, no longer steers answer/refuse for everyone; the proposal shows who judged what; an admin leaves a
judge out."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from django.test import Client

from chat.models import Conversation, Judgement, Message
from lab import verdicts
from lab.calibration import cutoff_for
from lab.verdicts import Verdict, judge_scales, weigh
from search.answerability import Signals, model_accept
from search.models import AnswerabilityModel
from search.retrieval import hybrid_search
from tests.lab.test_calibrate_verdicts import IN_DOMAIN, QUESTIONS, decisions, judged


def signals(nearest: float) -> Signals:
    return Signals(nearest=nearest, gap=0.1, late_best=0.7, weakest=0.5, unknown_share=0.0, agreement=0.5,
                   screen=0.0)


def verdict(n: int, question: str, label: int, *judges: str, nearest: float = 0.3) -> Verdict:
    return Verdict(f"m{n}", signals(nearest), label, f"q:{question}", judges)


def test_no_judge_holds_more_than_the_cap_unless_there_are_too_few() -> None:
    scales = judge_scales({"carol": 12, "a": 3, "b": 3, "c": 3, "d": 3, "e": 3}, max_share=0.2)
    weights = {j: scales[j] * r for j, r in {"carol": 12, "a": 3, "b": 3, "c": 3, "d": 3, "e": 3}.items()}
    assert weights["carol"] / sum(weights.values()) == pytest.approx(0.2)
    assert all(scales[j] == 1.0 for j in "abcde"), "judges under the cap keep their weight"
    two = judge_scales({"carol": 12, "alice": 3}, max_share=0.2)  # no weighting meets 0.2 with two judges
    assert two["carol"] * 12 == pytest.approx(two["alice"] * 3), "then every judge weighs the same"
    assert judge_scales({"carol": 12, "a": 1, "b": 1}, max_share=0.5)["carol"] == pytest.approx(2 / 12)


def test_a_judges_repeats_count_once_and_the_lighter_side_on_the_same_evidence_is_outweighed() -> None:
    repeated = [verdict(n, "is x answerable?", 1, "carol") for n in range(15)]
    honest = [verdict(100, "is x answerable?", 0, "alice"), verdict(101, "is x answerable?", 0, "dave"),
              verdict(102, "where is y?", 1, "alice", nearest=0.2)]
    weighed = weigh([*repeated, *honest], max_share=0.2)
    assert [v.id for v in weighed.verdicts] == ["m100", "m101", "m102"], "carol's 15 weigh 1, against 2"
    assert weighed.outweighed == 15
    rows = {row.judge: row for row in weighed.judges}
    assert (rows["carol"].verdicts, rows["carol"].questions, rows["carol"].compared, rows["carol"].agreed,
            rows["carol"].outweighed) == (15, 1, 2, 0, 15)
    assert (rows["alice"].verdicts, rows["alice"].questions, rows["alice"].compared, rows["alice"].agreed) == (
        2, 2, 2, 1), "alice agrees with dave, not with carol"
    assert sum(row.share for row in weighed.judges) == pytest.approx(1.0)
    # Alone on a question, a judge's repeats still weigh one verdict in all.
    alone = weigh([*repeated, verdict(200, "where is z?", 0, "alice", nearest=0.5)], max_share=1.0)
    assert sum(v.weight for v in alone.verdicts if "carol" in v.judges) == pytest.approx(1.0)
    # Unattributed verdicts (a simulation's) weigh one each, as before.
    plain = weigh([verdict(n, f"q{n}", n % 2) for n in range(6)], max_share=0.2)
    assert [v.weight for v in plain.verdicts] == [1.0] * 6 and plain.judges == []


def test_the_cutoff_refuses_at_most_the_target_share_of_the_answerable_weight() -> None:
    probabilities, labels = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95]), np.ones(10, dtype=int)
    for target in (0.0, 0.05, 0.1, 0.25, 1.0):
        assert cutoff_for(probabilities, labels, target=target, weights=np.ones(10)) == cutoff_for(
            probabilities, labels, target=target)
    light = np.array([0.1, 0.1, 0.1, 1, 1, 1, 1, 1, 1, 1.0])  # three light samples: together 0.3 of 7.3
    assert cutoff_for(probabilities, labels, target=0.1, weights=light) == 0.4


def asked_again(user: Any, question: str, times: int, *, inverted: bool) -> None:
    """`user` asks `question` `times` times (the answers carry what retrieval sees for them, as the producer
    stores it) and judges every answer, inverted or honestly."""
    result = hybrid_search(user=user, query=question)
    status = Message.Status.DONE if result.answerable else Message.Status.REFUSED
    conversation = Conversation.objects.create(owner=user)
    answerable = question in IN_DOMAIN
    for _ in range(times):
        asked = Message.objects.create(conversation=conversation, role="user", text=question)
        answer = Message.objects.create(conversation=conversation, role="assistant", question=asked, status=status,
                                        signals=result.signals.as_json() if result.signals else {})
        says_answerable = answerable != inverted
        if status == Message.Status.REFUSED:
            kind = "should_answer" if says_answerable else "helpful"
        else:
            kind = "helpful" if says_answerable else "should_refuse"
        Judgement.objects.create(message=answer, judge=user, role="asker", kind=kind)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_one_judges_180_inverted_verdicts_do_not_flip_alices_decisions(people: dict[str, Any], settings: Any) -> None:
    judged(people, settings)  # alice asks and judges every question once, honestly
    for question in QUESTIONS:
        asked_again(people["dave"], question, 1, inverted=False)
        asked_again(people["carol"], question, 15, inverted=True)
    admin, alice = people["admin"], people["alice"]

    weighed = verdicts.propose(user=admin, k=2)
    honest = verdicts.propose(user=admin, k=2, leave_out=["carol"])
    assert weighed.fitted_on["verdicts"] == honest.fitted_on["verdicts"] == 2 * len(QUESTIONS)
    assert weighed.fitted_on["outweighed"] == 15 * len(QUESTIONS)
    judges = {row["judge"]: row for row in weighed.fitted_on["judges"]}
    assert (judges["carol"]["verdicts"], judges["carol"]["questions"], judges["carol"]["agreed"],
            judges["carol"]["compared"]) == (180, 12, 0, 24)
    assert (judges["alice"]["agreed"], judges["alice"]["compared"]) == (12, 24), "with dave, not with carol"
    assert judges["carol"]["share"] == pytest.approx(1 / 3, abs=1e-4), "three judges: the cap of 0.2 cannot be met"
    assert "carol" not in {row["judge"] for row in honest.fitted_on["judges"]} and honest.fitted_on["left_out"] == [
        "carol"]

    model_accept(pk=honest.pk, user=admin)
    without_carol = decisions(alice)
    model_accept(pk=weighed.pk, user=admin)
    assert decisions(alice) == without_carol, "carol's verdicts moved none of alice's decisions"

    # Before weighing (each verdict 1, no judge capped, nothing outweighed), the same verdicts flip them.
    naive = verdicts.refit([replace(v, judges=()) for v in verdicts.deployment_verdicts()],
                           verdicts.prior_verdicts(), k=2, max_judge_share=1.0)
    flipped = AnswerabilityModel.objects.create(model=naive.chosen.model.as_json(), fitted_on=naive.fitted_on(),
                                                candidates=naive.candidates_json())
    model_accept(pk=flipped.pk, user=admin)
    assert decisions(alice) != without_carol


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_proposal_lists_judges_and_an_admin_leaves_one_out(people: dict[str, Any], settings: Any) -> None:
    judged(people, settings)
    for question in QUESTIONS:
        asked_again(people["carol"], question, 3, inverted=True)
    client = Client()
    client.force_login(people["admin"])
    url = "/admin/search/answerabilitymodel/"
    client.post(f"{url}refit/")  # alice and carol contradict each other on every answer: nothing to fit
    assert not AnswerabilityModel.objects.exists()
    for question in QUESTIONS:
        asked_again(people["dave"], question, 1, inverted=False)
    first = client.post(f"{url}refit/")
    proposal = AnswerabilityModel.objects.get()
    page = client.get(first["Location"]).content.decode()
    table = page[page.index('id="judges"'):page.index("</table>", page.index('id="judges"'))]
    assert "<td>carol</td><td>36</td><td>12</td>" in table, table
    assert "<td>0 of 24</td><td>36</td>" in table and table.count("<td>12 of 24</td><td>0</td>") == 2, table
    assert 'name="leave_out" value="carol"' in page

    second = client.post(f"{url}refit/", {"leave_out": ["carol"]})
    without = AnswerabilityModel.objects.exclude(pk=proposal.pk).get()
    assert second["Location"] == f"{url}{without.pk}/change/"
    assert without.fitted_on["left_out"] == ["carol"] and without.fitted_on["outweighed"] == 0
    assert [row["judge"] for row in without.fitted_on["judges"]] == ["alice", "dave"]
    assert without.fitted_on["verdicts"] == 2 * len(QUESTIONS)
    page = client.get(second["Location"]).content.decode()
    assert "left out: carol" in page and 'type="hidden" name="leave_out" value="carol"' in page
