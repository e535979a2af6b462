"""Content gaps (chat.review.gaps, /gaps/, /api/gaps, /api/gaps.csv): refused and badly judged questions grouped by
topic from their stored embeddings, with the documents nearest each topic as the viewer may see them. Real
PostgreSQL, the real answer path and the real embedding model."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from chat.models import Message
from chat.review import gaps
from chat.review.judgements import message_judge
from chat.services import answer_produce, question_ask
from tests.chat.conftest import EXPORT_QUESTION, SHIPMENTS, VAULT, VAULT_QUESTION
from tests.factories import ingested_document

pytestmark = pytest.mark.django_db

LEAVE = [
    "How do I request parental leave?",
    "How many weeks of parental leave do I get?",
    "Who approves parental leave requests?",
    "What is the parental leave policy for fathers?",
]
VPN = [
    "How do I reset my VPN password?",
    "The VPN client says my password expired, what now?",
    "How can I change the password for the VPN?",
]
SURFACES = ("/gaps/", "/api/gaps", "/api/gaps.csv")


def answer(user: Any, question: str, *, settings: Any, refuse: bool = False) -> Message:
    """An answer produced by the real answer path, as the worker would; `refuse`: refused whatever is found."""
    before = settings.KB_ANSWERABILITY
    if refuse:
        settings.KB_ANSWERABILITY = {**before, "cutoff": 0.999999}
    try:
        asked = question_ask(user=user, question=question, enqueue=False)
        answer_produce(message_id=asked.answer.pk, job_id=str(asked.answer.job_id))
    finally:
        settings.KB_ANSWERABILITY = before
    return Message.objects.get(pk=asked.answer.pk)


def gaps_permission() -> Any:
    from django.contrib.auth.models import Permission

    return Permission.objects.get(codename="view_contentgaps", content_type__app_label="chat")


def grant_gaps(user: Any) -> None:
    """Staff with chat.view_contentgaps: who may see content gaps besides superusers."""
    user.is_staff = True
    user.save()
    user.user_permissions.add(gaps_permission())


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def topic_of(report: gaps.Gaps, question: str) -> gaps.Topic:
    return next(t for t in report.topics if question in {e.text for e in t.examples})


@pytest.mark.slow
def test_refused_questions_on_two_topics_become_two_topics_with_their_counts(
        people: dict[str, Any], settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ingested_document(SHIPMENTS, "shipments.md")
    for i, question in enumerate(LEAVE):
        assert answer(people["carol" if i % 2 else "bob"], question, settings=settings, refuse=True).refused
    for question in VPN:
        assert answer(people["alice"], question, settings=settings, refuse=True).refused
    assert answer(people["alice"], EXPORT_QUESTION, settings=settings).status == "done"  # answered: no gap

    report = gaps.gaps(viewer=people["admin"])
    assert (report.questions, report.truncated, report.embedded, report.not_embedded, report.more_topics) == (
        7, False, 0, 0, 0)
    assert [(t.count, t.askers, t.reasons) for t in report.topics] == [(4, 2, {"refused": 4}), (3, 1, {"refused": 3})]
    leave, vpn = report.topics
    assert {e.text for e in leave.examples} == set(LEAVE) and leave.label in LEAVE
    assert {e.text for e in vpn.examples} == set(VPN) and vpn.label in VPN
    assert sum(w.count for w in leave.weeks) == 4 and leave.weeks[-1].count == 4 and len(leave.weeks) >= 13
    assert leave.sparkline.endswith("█") and set(leave.sparkline[:-1]) == {"▁"}
    # Nothing near either topic: the only document is about shipments.
    assert (leave.verdict, vpn.verdict) == (gaps.Verdict.MISSING, gaps.Verdict.MISSING)
    assert [d.title for d in leave.documents] == ["Shipments console"] and not leave.hidden
    assert leave.documents[0].distance is not None and leave.documents[0].distance > settings.KB_SEARCH_THRESHOLD

    again = gaps.gaps(viewer=people["admin"])  # the same input gives the same topics
    assert [(t.label, t.count, [e.answer_id for e in t.examples]) for t in again.topics] == [
        (t.label, t.count, [e.answer_id for e in t.examples]) for t in report.topics]

    # Answers stored before the question's embedding was (chat 0007) are embedded for the report.
    Message.objects.filter(role="assistant").update(query_vector=None)
    older = gaps.gaps(viewer=people["admin"])
    assert older.embedded == 7 and [(t.label, t.count) for t in older.topics] == [(t.label, t.count) for t in report.topics]
    monkeypatch.setattr(gaps, "MAX_EMBEDDED", 5)  # beyond it, the oldest are left out and counted
    bounded = gaps.gaps(viewer=people["admin"])
    assert (bounded.questions, bounded.embedded, bounded.not_embedded) == (5, 5, 2)
    assert {e.text for t in bounded.topics for e in t.examples} == {*LEAVE[2:], *VPN}

    # A window that ends before them holds none.
    later = gaps.gaps(viewer=people["admin"], since=timezone.now() + timedelta(minutes=1))
    assert (later.questions, later.topics) == (0, [])


def test_judged_and_rated_down_answers_are_gaps_and_a_named_document_says_the_search_missed_it(
        people: dict[str, Any], settings: Any) -> None:
    shipments = ingested_document(SHIPMENTS, "shipments.md")
    wrong = answer(people["alice"], EXPORT_QUESTION, settings=settings)
    helpful = answer(people["bob"], "Which filters does the Shipments screen have?", settings=settings)
    missed = answer(people["carol"], "Which two tabs does the dialog for exporting shipments have?",
                    settings=settings, refuse=True)
    message_judge(judge=people["alice"], message_id=wrong.pk, role="asker", kind="wrong")
    message_judge(judge=people["bob"], message_id=helpful.pk, role="asker", kind="helpful")
    message_judge(judge=people["carol"], message_id=missed.pk, role="asker", kind="should_answer",
                  document_id=shipments.pk)
    Message.objects.filter(pk=helpful.pk).update(rating=0)

    report = gaps.gaps(viewer=people["admin"])
    examples = {e.answer_id: e.reasons for t in report.topics for e in t.examples}
    assert examples == {wrong.pk: ("wrong",), missed.pk: ("refused", "should_answer")}
    topic = topic_of(report, missed.question.text)
    assert topic.verdict == gaps.Verdict.UNFOUND
    named = next(d for d in topic.documents if d.id == shipments.pk)
    assert (named.title, named.link, named.named) == ("Shipments console", f"/documents/{shipments.pk}/", 1)
    assert named.askers_may_read == topic.askers

    # A thumbs-down from before verdicts were stored (no judgement behind it) is a gap too.
    Message.objects.filter(pk=helpful.pk).update(rating=-1)
    rated = {e.answer_id: e.reasons for t in gaps.gaps(viewer=people["admin"]).topics for e in t.examples}
    assert rated[helpful.pk] == ("rated_down",)


def test_an_answer_in_a_restricted_folder_shows_who_may_read_it_never_its_title(people: dict[str, Any],
                                                                                settings: Any) -> None:
    engineering = people["groups"]["engineering"]
    vault = ingested_document(VAULT, "vault.md", public=False, groups=[engineering])
    ingested_document(SHIPMENTS, "shipments.md")
    for user in ("carol", "bob"):  # neither may read the vault: refused by the real decision
        assert answer(people[user], VAULT_QUESTION, settings=settings).refused

    admin = people["admin"]  # a superuser outside engineering
    report = gaps.gaps(viewer=admin)
    topic = topic_of(report, VAULT_QUESTION)
    assert topic.verdict == gaps.Verdict.RESTRICTED
    assert vault.pk not in {d.id for d in topic.documents}
    hidden = topic.hidden[0]
    assert (hidden.count, hidden.groups, hidden.people, hidden.askers_may_read) == (1, ("engineering",), 0, 0)
    assert hidden.distance is not None and hidden.distance <= settings.KB_SEARCH_THRESHOLD
    assert hidden.summary == "1 document you cannot read, readable by: engineering"
    for surface in SURFACES:
        body = client_for(admin).get(surface).content.decode()
        assert "readable by: engineering" in body, surface
        for secret in (vault.title, "vault.md", "ZX-4412-QUARTZ", "Oslo depot is", f"/documents/{vault.pk}/"):
            assert secret not in body, (surface, secret)

    admin.groups.add(engineering)  # now admin may read it: its title and link, and no hidden entry
    topic = topic_of(gaps.gaps(viewer=admin), VAULT_QUESTION)
    near = next(d for d in topic.documents if d.id == vault.pk)
    assert (near.title, near.askers_may_read) == (vault.title, 0) and not topic.hidden
    assert topic.verdict == gaps.Verdict.RESTRICTED  # the askers still may not
    assert vault.title in client_for(admin).get("/gaps/").content.decode()


def as_text(cell: str) -> str:
    """A cell as the CSV writes it: one that starts like a formula is quoted."""
    return f"'{cell}" if cell[:1] in ("=", "+", "-", "@") else cell


def test_the_csv_holds_what_the_api_holds(people: dict[str, Any], settings: Any) -> None:
    ingested_document(VAULT, "vault.md", public=False, groups=[people["groups"]["engineering"]])
    ingested_document(SHIPMENTS, "shipments.md")
    for question in [*LEAVE[:2], VAULT_QUESTION, "=HYPERLINK(\"http://evil\")  leave?"]:
        answer(people["carol"], question, settings=settings, refuse=True)
    client = client_for(people["admin"])
    api = client.get("/api/gaps?days=30").json()
    response = client.get("/api/gaps.csv?days=30")
    assert response["Content-Type"].startswith("text/csv") and "attachment" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert len(rows) == len(api["topics"]) >= 2
    for row, topic in zip(rows, api["topics"], strict=True):
        assert (row["topic"], row["verdict"], int(row["questions"]), int(row["askers"])) == (
            as_text(topic["label"]), topic["verdict"], topic["count"], topic["askers"])
        assert {r: int(row[r]) for r in gaps.REASONS if int(row[r])} == topic["reasons"]
        assert row["weeks"].split() == [f"{w['start']}:{w['count']}" for w in topic["weeks"]]
        assert row["examples"] == as_text(" | ".join(e["text"] for e in topic["examples"]))
        assert row["documents"] == " | ".join(f"{d['title']} ({d['link']})" for d in topic["documents"])
        assert row["hidden"] == " | ".join(h["summary"] for h in topic["hidden"])
    assert any(row["topic"].startswith("'=HYPERLINK") for row in rows)  # a formula stays text in a spreadsheet
    assert client.get("/api/gaps?days=0").status_code == 422


def test_only_superusers_and_staff_with_the_permission_see_content_gaps(people: dict[str, Any],
                                                                        settings: Any) -> None:
    from django.contrib.auth.models import Permission

    vault = ingested_document(VAULT, "vault.md", public=False, groups=[people["groups"]["engineering"]])
    answer(people["carol"], VAULT_QUESTION, settings=settings, refuse=True)
    alice, bob, dave = people["alice"], people["bob"], people["dave"]
    alice.is_staff = True
    alice.save()
    alice.user_permissions.set(Permission.objects.filter(content_type__app_label="chat").exclude(
        pk=gaps_permission().pk))  # every other chat permission
    bob.user_permissions.add(gaps_permission())  # the permission without being staff
    for name in ("carol", "sam", "alice", "bob"):
        client = client_for(people[name])
        for surface in SURFACES:
            response = client.get(surface)
            assert response.status_code == 404, (name, surface)
            assert VAULT_QUESTION not in response.content.decode()
        assert "/gaps/" not in client.get("/admin/").content.decode()
        assert "/gaps/" not in client.get("/").content.decode()  # nor in the top bar
    assert Client().get("/api/gaps").status_code == 401
    assert Client().get("/gaps/")["Location"].startswith("/accounts/login/")

    grant_gaps(dave)  # staff with the permission, in engineering: he may read the vault
    for user in (dave, people["admin"]):
        client = client_for(user)
        for surface in SURFACES:
            response = client.get(surface)
            assert response.status_code == 200 and VAULT_QUESTION in response.content.decode(), surface
        assert 'href="/gaps/"' in client.get("/admin/").content.decode()
        assert '<a href="/gaps/">Gaps</a>' in client.get("/").content.decode()  # the top bar
    assert vault.title in client_for(dave).get("/gaps/").content.decode()
    assert vault.title not in client_for(people["admin"]).get("/gaps/").content.decode()
