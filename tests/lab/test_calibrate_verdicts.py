"""Calibration from this deployment's verdicts (issue 29 item 3), on a real index with the real embedding model:
a refit is a proposal that changes nothing; accepting it changes decisions as the new model says, in every
process; reverting restores the previous decisions exactly; only admins (superusers, or staff holding
search.accept_answerabilitymodel) refit, accept or revert, in the admin as in code."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.test import Client

from chat.models import Judgement, Message
from lab import verdicts
from search import answerability
from search.answerability import AnswerabilityError, configured_model, model_accept, model_revert, settings_model
from search.models import AnswerabilityModel
from search.retrieval import hybrid_search
from tests.conftest import manage, service_env
from tests.factories import ingested_document
from tests.search.test_answerability import DEPOT, LEAVE

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

IN_DOMAIN = [
    "How many hours of sick leave do employees earn per pay period?",
    "How far ahead must annual leave be requested?",
    "When does the Oslo depot open on Saturdays?",
    "Who may drive the forklifts in the loading bay?",
    "Does unused sick leave carry over to the next year?",
    "Is a doctor's note needed for a short absence?",
]
OUT_OF_DOMAIN = [
    "Who won the 2014 FIFA World Cup final?",
    "What is the capital of Australia?",
    "How do I get red wine stains out of a white carpet?",
    "When does the Bergen depot open on Sundays?",
    "How many vacation days do contractors get?",
    "What is the parental leave policy for adoptive parents?",
]
QUESTIONS = IN_DOMAIN + OUT_OF_DOMAIN


def decisions(user: Any) -> list[tuple[bool, float | None]]:
    """Answer (True) or refuse, and the deciding model's probability, for every question."""
    results = [hybrid_search(user=user, query=q) for q in QUESTIONS]
    return [(r.answerable, r.probability) for r in results]


def judged(people: dict[str, Any], settings: Any) -> None:
    """Alice asks every question; her verdicts say which were answerable (helpful / should have answered) and
    which were not (should have refused, or right not to answer), as an employee would judge them."""
    from chat.services import answer_produce, question_ask

    settings.KB_ANSWER_BACKEND = "extractive"
    ingested_document(LEAVE, "leave.md")
    ingested_document(DEPOT, "depot.md")
    for question in QUESTIONS:
        asked = question_ask(user=people["alice"], question=question, enqueue=False)
        answer_produce(message_id=asked.answer.pk, job_id=str(asked.answer.job_id))
        answer = Message.objects.get(pk=asked.answer.pk)
        assert answer.signals, "every answer stores what retrieval saw"
        if question in IN_DOMAIN:
            kind = "should_answer" if answer.refused else "helpful"
        else:
            kind = "helpful" if answer.refused else "should_refuse"
        Judgement.objects.create(message=answer, judge=people["alice"], role="asker", kind=kind)


def staff(name: str, *codenames: str) -> User:
    user = User.objects.create_user(name, password="x", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="search", codename__in=codenames))
    return User.objects.get(pk=user.pk)  # permissions are cached per instance


def test_a_refit_changes_nothing_until_accepted_and_a_revert_restores_the_previous_decisions_exactly(
        people: dict[str, Any], settings: Any) -> None:
    judged(people, settings)
    carol = people["carol"]
    before = decisions(carol)
    assert any(a for a, _ in before) and not all(a for a, _ in before)

    proposal = verdicts.propose(user=people["admin"], prior_weight=0, k=2)
    assert not proposal.active and proposal.state == "proposed"
    assert proposal.fitted_on["verdicts"] == len(QUESTIONS) and proposal.fitted_on["prior_samples"] == 0
    assert ["nearest"] in [c["features"] for c in proposal.candidates], "the nearest distance alone is a candidate"
    assert decisions(carol) == before, "an unaccepted refit changes no decision"
    assert configured_model() == settings_model()

    model_accept(pk=proposal.pk, user=people["admin"])
    new = answerability.model_from_json(proposal.model)
    assert configured_model() == new
    after = decisions(carol)
    for question, (answered, probability) in zip(QUESTIONS, after, strict=True):
        result = hybrid_search(user=carol, query=question)
        assert result.signals is not None and probability == new.probability(result.signals)
        assert answered == (new.probability(result.signals) >= new.cutoff)
    # The refit weighs the signals differently: every probability moves. Whether a decision flips as well
    # depends on what else the index holds (the lexeme statistics outlive a test), so it is not asserted;
    # the exact comparisons below are of (decision, probability) and so catch a revert that is not exact.
    assert all(p_after != p_before for (_, p_after), (_, p_before) in zip(after, before, strict=True))

    # Another process (a worker, the other web processes) reads the accepted model for its next question.
    code = ("from django.contrib.auth.models import User; from search.retrieval import hybrid_search; "
            f"r = hybrid_search(user=User.objects.get(username='carol'), query={QUESTIONS[0]!r}); "
            "print('PROBABILITY', round(r.probability, 6))")
    run = manage("shell", "-c", code, env=service_env(), timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert after[0][1] is not None and f"PROBABILITY {round(after[0][1], 6)}" in run.stdout

    assert model_revert(user=people["admin"]) is None  # the settings' model decides again
    assert decisions(carol) == before, "reverting restores the previous decisions exactly"
    reverted = AnswerabilityModel.objects.get(pk=proposal.pk)
    assert reverted.state == "reverted" and reverted.reverted_by == people["admin"]

    # A second model accepted over the first: a revert goes back to the first, not to the settings'.
    model_accept(pk=proposal.pk, user=people["admin"])
    second = verdicts.propose(user=people["admin"], k=2)  # with the shipped prior
    model_accept(pk=second.pk, user=people["admin"])
    assert AnswerabilityModel.objects.get(active=True) == second
    assert model_revert(user=people["admin"]) == AnswerabilityModel.objects.get(pk=proposal.pk)
    assert decisions(carol) == after
    model_revert(user=people["admin"])
    assert decisions(carol) == before and not AnswerabilityModel.objects.filter(active=True).exists()


def test_only_admins_refit_accept_or_revert(people: dict[str, Any], settings: Any) -> None:
    judged(people, settings)
    viewer = staff("viewer", "view_answerabilitymodel")
    acceptor = staff("acceptor", "accept_answerabilitymodel")
    proposal = verdicts.propose(user=people["admin"], k=2)
    for user in (people["bob"], staff("plain"), viewer):
        with pytest.raises(AnswerabilityError):
            model_accept(pk=proposal.pk, user=user)
        with pytest.raises(AnswerabilityError):
            answerability.refit_from_verdicts(user=user)
    assert not AnswerabilityModel.objects.filter(active=True).exists()
    acceptor.is_active = False
    with pytest.raises(AnswerabilityError):
        model_accept(pk=proposal.pk, user=acceptor)
    acceptor.is_active = True
    model_accept(pk=proposal.pk, user=acceptor)
    with pytest.raises(AnswerabilityError):
        model_revert(user=viewer)
    assert model_revert(user=acceptor) is None

    # The admin: the same rule on every page and button.
    url = "/admin/search/answerabilitymodel/"
    accept = f"{url}{proposal.pk}/accept/"
    for user, sees in ((people["bob"], False), (staff("plain2"), False), (viewer, True), (acceptor, True)):
        client = Client()
        client.force_login(user)
        listed, shown = client.get(url), client.get(f"{url}{proposal.pk}/change/")
        assert (listed.status_code == 200, shown.status_code == 200) == (sees, sees), user
        if user is not acceptor:
            for post in (accept, f"{url}refit/", f"{url}revert/"):
                response = client.post(post)
                assert response.status_code in (302, 403) and (response.status_code == 403 or not user.is_staff)
            assert not AnswerabilityModel.objects.filter(active=True).exists()
        if user is viewer:
            assert b"accept-model" not in shown.content and b"refit-from-verdicts" not in listed.content


def test_the_admin_refits_shows_the_frontier_accepts_and_reverts(people: dict[str, Any], settings: Any) -> None:
    judged(people, settings)
    client = Client()
    client.force_login(people["admin"])
    url = "/admin/search/answerabilitymodel/"
    refit = client.post(f"{url}refit/")
    proposal = AnswerabilityModel.objects.get()
    assert refit.status_code == 302 and refit["Location"] == f"{url}{proposal.pk}/change/"
    assert proposal.created_by == people["admin"] and not proposal.active
    page = client.get(refit["Location"]).content.decode()
    assert 'id="frontier"' in page and 'id="candidates"' in page and "nearest" in page
    assert f"{len(QUESTIONS)} ({proposal.fitted_on['answerable']} answerable" in page
    assert "160 samples (shipped_prior.json), each weighted 1.0" in page
    assert 'id="accept-model"' in page and "State: <strong>proposed</strong>" in page

    accepted = client.post(f"{url}{proposal.pk}/accept/")
    assert accepted.status_code == 302
    proposal = AnswerabilityModel.objects.get(pk=proposal.pk)
    assert proposal.active and proposal.accepted_by == people["admin"] and proposal.previous is None
    listed = client.get(url).content.decode()
    assert f"Deciding answer or refuse now: {proposal}" in listed and "Revert to the settings’ model" in listed

    assert client.post(f"{url}revert/").status_code == 302
    assert not AnswerabilityModel.objects.filter(active=True).exists()
    assert "the settings’ model (KB_ANSWERABILITY)" in client.get(url).content.decode()
    # Nothing to add, change or delete: rows change only by refit, accept and revert.
    assert client.get(f"{url}add/").status_code == 403
    assert client.post(f"{url}{proposal.pk}/delete/", {"post": "yes"}).status_code == 403


def test_calibrate_from_verdicts_prints_the_frontier_and_stores_a_proposal(people: dict[str, Any], settings: Any,
                                                                          tmp_path: Path) -> None:
    judged(people, settings)
    out = StringIO()
    call_command("calibrate", "--from-verdicts", "--folds", "2", "--out", str(tmp_path / "v.json"), stdout=out)
    printed = out.getvalue()
    proposal = AnswerabilityModel.objects.get()
    assert not proposal.active and f"Stored as proposal v{proposal.pk}" in printed
    assert f"{len(QUESTIONS)} judged answers" in printed and "160 prior samples weighted 1" in printed
    assert "Frontier over out-of-fold probabilities" in printed and "\n  nearest " in printed
    assert json.loads((tmp_path / "v.json").read_text())["proposal"] == proposal.pk
    with pytest.raises(CommandError, match="no set, --samples"):
        call_command("calibrate", "../shared/eval", "--from-verdicts")
    with pytest.raises(CommandError, match="name an evaluation set, or refit --from-verdicts"):
        call_command("calibrate")
    assert AnswerabilityModel.objects.count() == 1


def test_verdict_labels(people: dict[str, Any]) -> None:
    """Which verdicts say a question was answerable: "wrong" says neither; a reviewer outranks the asker."""
    assert [verdicts.label_of(k, "done") for k in ("helpful", "should_answer", "should_refuse", "wrong")] == [
        1, 1, 0, None]
    assert [verdicts.label_of(k, "refused") for k in ("helpful", "should_answer", "wrong")] == [0, 1, None]
    from chat.models import Conversation

    conversation = Conversation.objects.create(owner=people["alice"])
    signals = {"nearest": 0.3, "gap": 0.1, "late_best": 0.8, "weakest": 0.6, "unknown_share": 0.0,
               "agreement": 0.5, "screen": 0.0}

    def answer(question: str, *kinds: tuple[str, str], status: str = "done") -> Message:
        asked = Message.objects.create(conversation=conversation, role="user", text=question)
        message = Message.objects.create(conversation=conversation, role="assistant", question=asked, status=status,
                                         signals=signals)
        for n, (role, kind) in enumerate(kinds):
            judge = people["alice"] if role == "asker" else people[("sam", "admin")[n % 2]]
            Judgement.objects.create(message=message, judge=judge, role=role, kind=kind)
        return message

    kept = answer("Where is X?", ("asker", "wrong"), ("reviewer", "should_refuse"))
    answer("Where is Y?", ("asker", "wrong"))
    answer("Where is Z?", ("asker", "helpful"), ("reviewer", "helpful"), ("reviewer", "should_refuse"))
    refused = answer("where is  x?", ("asker", "helpful"), status="refused")
    Message.objects.create(conversation=conversation, role="assistant", status="done")  # unjudged
    found = verdicts.deployment_verdicts()
    assert [(v.id, v.label, v.group) for v in found] == [(f"m{kept.pk}", 0, "q:where is x?"),
                                                       (f"m{refused.pk}", 0, "q:where is x?")]
