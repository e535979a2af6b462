"""Judgements: the asker's and reviewers' verdicts on answers, who may give and see them, and their export
as an evaluation set (real database, real retrieval and answers, the extractive backend)."""

from __future__ import annotations

import json
import re
from datetime import datetime
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from chat.models import Judgement, Message
from chat.review.evalset import OOD_KEYS, QUESTION_KEYS, normalised
from chat.review.judgements import COMMENT_MAX
from kb.library.models import Document, Folder
from kb.library.services import folder_set_access
from tests.chat.conftest import EXPORT_QUESTION, OOD_QUESTION, SHIPMENTS, VAULT, VAULT_QUESTION
from tests.chat.test_api import answered, answered_unsupported
from tests.conftest import NO_SHARED_EVAL, SHARED_EVAL
from tests.factories import ingested_document

pytestmark = pytest.mark.django_db

FORMATS_QUESTION = "Which two tabs does the dialog for exporting shipments have?"


def post(client: Client, url: str, body: dict[str, Any]) -> Any:
    return client.post(url, json.dumps(body), content_type="application/json")


def judge_url(answer: Message) -> str:
    return f"/api/messages/{answer.pk}/judgement"


def review_url(answer: Message) -> str:
    return f"/api/review/answers/{answer.pk}/judgement"


@pytest.fixture
def shelves(people: dict[str, Any]) -> dict[str, Document]:
    """The set's layout: a folder per access group, the documents in them."""
    everyone = Folder.objects.create(name="everyone")
    engineering = Folder.objects.create(name="engineering")
    folder_set_access(folder=engineering, public=False, groups=[people["groups"]["engineering"]])
    return {"shipments": ingested_document(SHIPMENTS, "shipments.md", folder=everyone),
            "vault": ingested_document(VAULT, "vault.md", folder=engineering)}


def refused(user: Any, question: str, settings: Any) -> Message:
    """An answer refused whatever was found (the answerability cutoff out of reach, and no question remembered from
    an earlier verdict near enough to answer it: search.memory)."""
    before = settings.KB_ANSWERABILITY, settings.KB_MEMORY_DISTANCE
    settings.KB_ANSWERABILITY, settings.KB_MEMORY_DISTANCE = {**before[0], "cutoff": 0.999999}, -1.0
    try:
        answer = answered(user, question)
    finally:
        settings.KB_ANSWERABILITY, settings.KB_MEMORY_DISTANCE = before
    assert answer.status == Message.Status.REFUSED, answer.refusal_reason
    return answer


# --------------------------------------------------------------------------- the asker


def test_the_asker_judges_their_own_answer_and_the_thumbs_follow(
    shelves: dict[str, Document], people: dict[str, Any], client: Client
) -> None:
    answer = answered(people["carol"], EXPORT_QUESTION)
    assert answer.status == Message.Status.DONE
    shipments = shelves["shipments"]
    client.force_login(people["carol"])

    response = post(client, judge_url(answer), {"kind": "helpful"})
    assert response.status_code == 200, response.content
    assert response.json()["kind"] == "helpful" and response.json()["role"] == "asker"
    assert Message.objects.get(pk=answer.pk).rating == 1

    # A second verdict replaces the first; "should have answered" names the document that answers it.
    response = post(client, judge_url(answer), {"kind": "should_answer", "document": shipments.pk, "note": "see tabs"})
    assert response.status_code == 200, response.content
    assert response.json()["document"] == {"id": shipments.pk, "title": str(shipments),
                                           "link": f"/documents/{shipments.pk}/"}
    stored = Judgement.objects.get()
    assert (stored.kind, stored.document_id, stored.judge, stored.note) == ("should_answer", shipments.pk,
                                                                              people["carol"], "see tabs")
    assert stored.created_at <= stored.updated_at
    assert Message.objects.get(pk=answer.pk).rating == -1
    shown = client.get(f"/api/conversations/{answer.conversation_id}").json()["messages"][1]
    assert [(j["kind"], j["judge"], j["document"]["id"]) for j in shown["judgements"]] == [
        ("should_answer", "carol", shipments.pk)]

    # The thumbs API is the same verdict: down keeps a negative kind, up is helpful, 0 takes it back.
    rate = f"/api/messages/{answer.pk}/rating"
    assert post(client, rate, {"rating": -1}).json() == {"rating": -1}
    assert Judgement.objects.get().kind == "should_answer"
    assert post(client, rate, {"rating": 1}).json() == {"rating": 1}
    assert Judgement.objects.get().kind == "helpful" and Message.objects.get(pk=answer.pk).rating == 1
    assert post(client, rate, {"rating": 0}).json() == {"rating": 0}
    assert not Judgement.objects.exists() and Message.objects.get(pk=answer.pk).rating == 0

    assert post(client, judge_url(answer), {"kind": "wrong"}).status_code == 200
    assert client.delete(judge_url(answer)).status_code == 204
    assert not Judgement.objects.exists() and Message.objects.get(pk=answer.pk).rating == 0


def test_nobody_else_judges_an_answer_and_bad_verdicts_store_nothing(
    shelves: dict[str, Document], people: dict[str, Any], client: Client, settings: Any
) -> None:
    answer = answered(people["carol"], EXPORT_QUESTION)
    for name in ("bob", "sam", "admin"):  # not theirs: a reviewer judges on the review desk, not here
        client.force_login(people[name])
        assert post(client, judge_url(answer), {"kind": "helpful"}).status_code == 404
        assert client.delete(judge_url(answer)).status_code == 404
    client.force_login(people["carol"])
    assert post(client, f"/api/messages/{answer.question_id}/judgement", {"kind": "helpful"}).status_code == 404
    assert post(client, judge_url(answer), {"kind": "great"}).status_code == 422
    assert post(client, judge_url(answer), {"kind": "helpful", "document": shelves["shipments"].pk}).status_code == 422
    refusal = refused(people["carol"], OOD_QUESTION, settings)
    assert post(client, judge_url(refusal), {"kind": "should_refuse"}).status_code == 422
    assert not Judgement.objects.exists()
    assert Message.objects.get(pk=answer.pk).rating == 0


def test_naming_a_document_the_judge_cannot_read_is_not_found_and_stores_nothing(
    shelves: dict[str, Document], people: dict[str, Any], client: Client
) -> None:
    answer = answered(people["carol"], EXPORT_QUESTION)
    client.force_login(people["carol"])
    missing = Document.objects.order_by("-pk").values_list("pk", flat=True)[0] + 1000
    hidden = post(client, judge_url(answer), {"kind": "should_answer", "document": shelves["vault"].pk})
    absent = post(client, judge_url(answer), {"kind": "should_answer", "document": missing})
    assert hidden.status_code == absent.status_code == 404
    assert hidden.json() == absent.json() == {"detail": "no such document"}
    assert str(shelves["vault"]) not in hidden.content.decode()
    assert not Judgement.objects.exists() and Message.objects.get(pk=answer.pk).rating == 0


# --------------------------------------------------------------------------- the asker's thumbs and reasons


def test_each_thumb_and_reason_maps_onto_the_verdict_calibration_and_gaps_read() -> None:
    from chat.review.judgements import ANSWER_REASONS, REFUSAL_REASONS, feedback_kind
    from chat.services import ChatError

    kinds = {(rating, reason, refused): feedback_kind(rating=rating, reason=reason, refused=refused)
             for rating, reason, refused in [(1, None, False), (1, None, True), (-1, None, False), (-1, None, True),
                                             (-1, "off_topic", False), (-1, "wrong_or_outdated", False),
                                             (-1, "should_refuse", False), (-1, "should_answer", True)]}
    assert kinds == {
        (1, None, False): "helpful", (1, None, True): "helpful",  # on a refusal: right not to answer
        (-1, None, False): "wrong", (-1, None, True): "wrong",  # a bare thumbs down, as the thumbs always were
        (-1, "off_topic", False): "wrong", (-1, "wrong_or_outdated", False): "wrong",
        (-1, "should_refuse", False): "should_refuse", (-1, "should_answer", True): "should_answer",
    }
    assert all(kind in Judgement.Kind.values for kind in kinds.values())
    assert set(ANSWER_REASONS) | set(REFUSAL_REASONS) == set(Judgement.Reason.values)
    # What a refusal does not offer, and an answer does not, is refused by name; a reason with a thumbs up too.
    with pytest.raises(ChatError, match="on a refusal is one of should_answer; not 'should_refuse'"):
        feedback_kind(rating=-1, reason="should_refuse", refused=True)
    for reason in ("off_topic", "wrong_or_outdated"):
        with pytest.raises(ChatError, match="on a refusal"):
            feedback_kind(rating=-1, reason=reason, refused=True)
    with pytest.raises(ChatError, match="on an answer is one of off_topic, wrong_or_outdated, should_refuse"):
        feedback_kind(rating=-1, reason="should_answer", refused=False)
    with pytest.raises(ChatError, match="thumbs down"):
        feedback_kind(rating=1, reason="off_topic", refused=False)
    with pytest.raises(ChatError, match="rating must be"):
        feedback_kind(rating=0, reason=None, refused=False)


def test_an_employees_thumbs_down_with_a_reason_and_words_is_stored_as_the_mapped_verdict(
    shelves: dict[str, Document], people: dict[str, Any], client: Client, settings: Any
) -> None:
    answer = answered(people["carol"], EXPORT_QUESTION)
    refusal = refused(people["carol"], FORMATS_QUESTION, settings)
    rate, rate_refusal = (f"/api/messages/{m.pk}/rating" for m in (answer, refusal))
    client.force_login(people["carol"])

    response = post(client, rate, {"rating": -1, "reason": "wrong_or_outdated", "comment": "  The tab moved in May. "})
    assert response.status_code == 200 and response.json() == {"rating": -1}, response.content
    stored = Judgement.objects.get(message=answer)
    assert (stored.judge, stored.role, stored.kind, stored.reason, stored.note, stored.document_id) == (
        people["carol"], "asker", "wrong", "wrong_or_outdated", "The tab moved in May.", None)
    assert Message.objects.get(pk=answer.pk).rating == -1
    shown = client.get(f"/api/conversations/{answer.conversation_id}").json()["messages"][1]["judgements"]
    assert [(j["kind"], j["reason"], j["note"]) for j in shown] == [("wrong", "wrong_or_outdated", "The tab moved in May.")]

    # Changed to another reason, then to "should have said it doesn't know": one verdict, replaced each time.
    assert post(client, rate, {"rating": -1, "reason": "off_topic"}).status_code == 200
    assert (Judgement.objects.get(message=answer).kind, Judgement.objects.get(message=answer).reason) == ("wrong", "off_topic")
    assert post(client, rate, {"rating": -1, "reason": "should_refuse"}).status_code == 200
    assert Judgement.objects.get(message=answer).kind == "should_refuse"

    # On a refusal, "the documents do answer this": should have answered, naming no document (the desk's picker
    # names one); a document in the body is not the rating API's to store.
    response = post(client, rate_refusal, {"rating": -1, "reason": "should_answer", "comment": "It is in the guide",
                                           "document": shelves["shipments"].pk})
    assert response.status_code == 200, response.content
    verdict = Judgement.objects.get(message=refusal)
    assert (verdict.kind, verdict.reason, verdict.note, verdict.document_id) == ("should_answer", "should_answer",
                                                                                "It is in the guide", None)

    # What an answer does not offer, a comment over the bound, a reason unknown, a stranger: refused, nothing changed.
    for url, body, status in [
        (rate_refusal, {"rating": -1, "reason": "should_refuse"}, 422),
        (rate_refusal, {"rating": -1, "reason": "wrong_or_outdated"}, 422),
        (rate, {"rating": -1, "reason": "should_answer"}, 422),
        (rate, {"rating": 1, "reason": "off_topic"}, 422),
        (rate, {"rating": 0, "comment": "why"}, 422),
        (rate, {"rating": -1, "reason": "helpful"}, 422),
        (rate, {"rating": -1, "reason": "off_topic", "comment": "x" * (COMMENT_MAX + 1)}, 422),
    ]:
        assert post(client, url, body).status_code == status, body
    client.force_login(people["bob"])
    assert post(client, rate, {"rating": -1, "reason": "off_topic", "comment": "mine now"}).status_code == 404
    assert sorted(Judgement.objects.values_list("kind", "reason", "judge__username")) == [
        ("should_answer", "should_answer", "carol"), ("should_refuse", "should_refuse", "carol")]

    # A thumbs up replaces the reason and the words; 0 takes the feedback back.
    client.force_login(people["carol"])
    assert post(client, rate, {"rating": 1}).json() == {"rating": 1}
    stored = Judgement.objects.get(message=answer)
    assert (stored.kind, stored.reason, stored.note) == ("helpful", "", "")
    assert post(client, rate_refusal, {"rating": 0}).json() == {"rating": 0}
    assert not Judgement.objects.filter(message=refusal).exists() and Message.objects.get(pk=refusal.pk).rating == 0


# --------------------------------------------------------------------------- the review desk


def test_a_reviewer_judges_what_the_desk_shows_and_never_a_withheld_answer(
    shelves: dict[str, Document], people: dict[str, Any], client: Client, settings: Any
) -> None:
    secret = answered(people["alice"], VAULT_QUESTION)
    assert secret.status == Message.Status.DONE and shelves["vault"].pk in secret.source_documents
    client.force_login(people["alice"])
    assert post(client, judge_url(secret), {"kind": "should_answer", "document": shelves["vault"].pk}).status_code == 200
    assert post(client, review_url(secret), {"kind": "helpful"}).status_code == 404  # not a reviewer

    for name in ("sam", "admin"):  # reviewers outside engineering: the answer is withheld from them
        client.force_login(people[name])
        assert post(client, review_url(secret), {"kind": "wrong"}).status_code == 404
        listed = {a["id"]: a for a in client.get("/api/review/answers").json()}
        assert listed[secret.pk]["withheld"] and listed[secret.pk]["judgements"] == []
    assert Judgement.objects.count() == 1

    # A refusal sam may see: marked answerable from a document he may read, never from one he may not.
    refusal = refused(people["carol"], FORMATS_QUESTION, settings)
    client.force_login(people["sam"])
    assert post(client, review_url(refusal), {"kind": "should_answer", "document": shelves["vault"].pk}).status_code == 404
    response = post(client, review_url(refusal), {"kind": "should_answer", "document": shelves["shipments"].pk})
    assert response.status_code == 200 and response.json()["role"] == "reviewer"
    assert Message.objects.get(pk=refusal.pk).rating == 0  # the thumbs are the asker's

    # The asker sees their own verdicts only; the desk shows everyone's, a document only to who may read it.
    people["sam"].groups.add(people["groups"]["engineering"])
    assert post(client, review_url(secret), {"kind": "helpful", "note": "right code"}).status_code == 200
    shown = client.get(f"/api/review/answers/{secret.pk}").json()["judgements"]
    assert sorted((j["judge"], j["kind"], (j["document"] or {}).get("id")) for j in shown) == [
        ("alice", "should_answer", shelves["vault"].pk), ("sam", "helpful", None)]
    people["sam"].groups.remove(people["groups"]["engineering"])
    people["alice"].groups.remove(people["groups"]["engineering"])
    client.force_login(people["alice"])
    mine = client.get(f"/api/conversations/{secret.conversation_id}").json()["messages"][1]
    assert mine["withheld"] and mine["judgements"] == []
    client.force_login(people["carol"])
    theirs = client.get(f"/api/conversations/{refusal.conversation_id}").json()["messages"][1]
    assert theirs["judgements"] == []  # sam's verdict is the desk's


def test_a_reviewers_verdict_on_an_unsupported_claim_says_who_and_when(
    shelves: dict[str, Document], people: dict[str, Any], client: Client, settings: Any
) -> None:
    answer = answered_unsupported(people["carol"], settings)
    client.force_login(people["sam"])
    before = timezone.now()
    response = post(client, f"/api/review/answers/{answer.pk}/unsupported/0", {"verdict": "dismissed"})
    assert response.status_code == 200, response.content
    claim = response.json()["unsupported"][0]
    assert claim["reviewer"] == "sam" and before <= datetime.fromisoformat(claim["judged_at"]) <= timezone.now()


# --------------------------------------------------------------------------- export


def export(tmp_path: Path, user: str, *args: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    out = StringIO()
    call_command("export_judgements", str(tmp_path), "--user", user, *args, stdout=out)
    read = [[json.loads(line) for line in (tmp_path / name).read_text(encoding="utf-8").splitlines()]
            for name in ("questions.jsonl", "ood.jsonl")]
    return read[0], read[1], out.getvalue()


def assert_set_shaped(questions: list[dict[str, Any]], ood: list[dict[str, Any]]) -> None:
    """The rows as docs/EVALUATION.md describes them."""
    for row in questions:
        assert tuple(row) == QUESTION_KEYS, row
        assert row["id"] == f"{row['gt']}-{row['phrasing']}" and row["phrasing"] in ("doc", "ticket")
        assert row["intent"] in ("screen", "concept") and isinstance(row["identifier"], bool)
        assert row["needle"] == normalised(row["needle"]) and 40 <= len(row["needle"]) <= 250
        assert all(isinstance(row[k], str) and row[k] for k in ("id", "gt", "query", "needle", "doc"))
    for row in ood:
        assert tuple(row) == OOD_KEYS and row["kind"] in ("near", "far", "literal-trap"), row
    assert len({r["id"] for r in questions + ood}) == len(questions) + len(ood)


def test_judged_questions_export_as_an_evaluation_set_without_what_the_exporter_cannot_read(
    shelves: dict[str, Document], people: dict[str, Any], settings: Any, tmp_path: Path
) -> None:
    from chat.review.judgements import message_judge

    def verdict(answer: Message, judge: str, kind: str, role: str = "asker", document: int | None = None) -> None:
        message_judge(judge=people[judge], message_id=answer.pk, role=role, kind=kind, document_id=document)

    helpful = answered(people["carol"], EXPORT_QUESTION)
    verdict(helpful, "carol", "helpful")
    secret = answered(people["alice"], VAULT_QUESTION)
    verdict(secret, "alice", "helpful")
    answerable = refused(people["carol"], FORMATS_QUESTION, settings)
    verdict(answerable, "carol", "helpful")  # the asker thought the refusal right...
    verdict(answerable, "sam", "should_answer", "reviewer", shelves["shipments"].pk)  # ...support knows better
    right_refusal = refused(people["carol"], OOD_QUESTION, settings)
    verdict(right_refusal, "sam", "helpful", "reviewer")
    unconfirmed = refused(people["bob"], OOD_QUESTION + " Really?", settings)
    verdict(unconfirmed, "bob", "helpful")
    overreach = answered(people["bob"], EXPORT_QUESTION)
    verdict(overreach, "bob", "should_refuse")
    wrong = answered(people["dave"], EXPORT_QUESTION)
    verdict(wrong, "dave", "wrong")
    named_secret = refused(people["dave"], VAULT_QUESTION, settings)
    verdict(named_secret, "dave", "should_answer", document=shelves["vault"].pk)

    questions, ood, summary = export(tmp_path / "admin", "admin")  # a superuser outside engineering
    assert_set_shaped(questions, ood)
    by_gt = {row["gt"]: row for row in questions}
    assert set(by_gt) == {f"j{helpful.pk}", f"j{answerable.pk}"}
    lead = by_gt[f"j{helpful.pk}"]
    assert lead["query"] == EXPORT_QUESTION and lead["doc"] == "everyone/shipments.md"
    assert lead["needle"] in normalised(helpful.citations.get(number=1).quote)
    assert lead["needle"] == normalised(re.sub(r"\s*\[\d+\]", "", helpful.text.split("\n")[0]))[: len(lead["needle"])]
    named = by_gt[f"j{answerable.pk}"]
    assert named["doc"] == "everyone/shipments.md" and named["needle"] in normalised(shelves["shipments"].canonical_text)
    assert "tabs" in named["needle"].lower(), named  # the sentence that answers, found by the retrieval
    assert sorted(row["id"] for row in ood) == sorted([f"ood-j{right_refusal.pk}", f"ood-j{overreach.pk}"])
    assert {row["id"]: row["kind"] for row in ood}[f"ood-j{overreach.pk}"] == "near"
    assert "answer withheld from the exporter: 1" in summary
    assert "names a document the exporter may not read: 1" in summary
    assert "refusal not confirmed by a reviewer: 1" in summary and "judged wrong" in summary
    assert "ZX-4412" not in json.dumps([questions, ood])

    # Staff with the permission who read engineering get the engineering rows too.
    people["dave"].is_staff = True
    people["dave"].save()
    people["dave"].user_permissions.add(Permission.objects.get(codename="export_judgement"))
    questions, ood, summary = export(tmp_path / "dave", "dave")
    assert_set_shaped(questions, ood)
    docs = {row["gt"]: row["doc"] for row in questions}
    # Once (CI, under load) one of these two was missing; the summary says which row was left out and why.
    assert docs.get(f"j{secret.pk}") == docs.get(f"j{named_secret.pk}") == "engineering/vault.md", (docs, summary)
    assert "ZX-4412-QUARTZ" in {row["gt"]: row["needle"] for row in questions}[f"j{secret.pk}"]

    # --since: only verdicts given since then.
    questions, ood, _ = export(tmp_path / "later", "admin", "--since", "2999-01-01")
    assert questions == ood == []


def test_only_superusers_and_staff_granted_the_permission_export(
    shelves: dict[str, Document], people: dict[str, Any], tmp_path: Path
) -> None:
    people["alice"].is_staff = True
    people["alice"].save()
    people["bob"].user_permissions.add(Permission.objects.get(codename="export_judgement"))  # not staff
    for name in ("alice", "bob", "carol", "nobody"):
        with pytest.raises(CommandError, match="only superusers and staff"):
            call_command("export_judgements", str(tmp_path / name), "--user", name, stdout=StringIO())
        assert not (tmp_path / name).exists()


@pytest.mark.skipif(not (SHARED_EVAL / "README.md").is_file(), reason=f"no shared eval README {NO_SHARED_EVAL}")
def test_the_export_keys_are_the_ones_the_eval_readme_lists() -> None:
    readme = (SHARED_EVAL / "README.md").read_text(encoding="utf-8")
    table = readme.split("### questions.jsonl", 1)[1].split("###", 1)[0]
    assert tuple(re.findall(r"^\| `(\w+)` \|", table, re.MULTILINE)) == QUESTION_KEYS
    ood = readme.split("### ood.jsonl", 1)[1].split("exactly these keys:", 1)[1].split(":\n", 1)[0]
    assert tuple(re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", ood))) == OOD_KEYS  # "`id` (`ood01` … `ood20`)"
