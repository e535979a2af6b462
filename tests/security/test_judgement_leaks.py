"""Judgements in the leak suite (issue 29): verdicts on answers, the documents they name and the notes that
quote a secret reach nobody outside the secret's audience, through the judgement and rating APIs, the conversation
and review APIs that show verdicts, or the evaluation-set export (`manage.py export_judgements`). Naming a
document one may not read looks like naming a missing one, and stores nothing."""

from __future__ import annotations

import json
import time
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.test import Client

from chat.models import Judgement, Message
from chat.selectors import is_withheld
from tests.security.conftest import signed_in
from tests.security.fortress import ATTACKERS, Probes, Restricted, build, people_and_access
from tests.security.test_leak_suite import ask, readers_ask

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

MIN_PROBES = 300
REVIEWER = "dave"  # a reader of four items who also reviews: the desk's verdicts on them are his


def post(client: Client, url: str, body: dict[str, Any]) -> Any:
    return client.post(url, json.dumps(body), content_type="application/json")


def judge_all(corpus: list[Restricted], clients: dict[str, Client], reader_answers: dict[str, int],
              reviewer: Any) -> int:
    """Positive controls, and something to leak: each item's reader judges their answer "should have
    answered" naming the document, with a note quoting a secret; the reviewer does the same on the desk
    for the answers he may see in full. Returns how many verdicts there are."""
    reviewed = 0
    for item in corpus:
        assert item.document is not None
        note = {"document": item.document.pk, "note": f"Quoted: {item.secrets[0].sentence}"}
        reader = sorted(item.readers)[0]
        answer = reader_answers[item.key]
        response = post(clients[reader], f"/api/messages/{answer}/judgement", {"kind": "should_answer", **note})
        assert response.status_code == 200 and response.json()["document"]["title"] == item.title, response.content
        if REVIEWER in item.readers and not is_withheld(Message.objects.get(pk=answer), viewer=reviewer):
            response = post(clients[REVIEWER], f"/api/review/answers/{answer}/judgement", {"kind": "should_answer", **note})
            assert response.status_code == 200, response.content
            reviewed += 1
    assert reviewed
    return Judgement.objects.count()


def export(name: str, out: Path) -> tuple[str, str]:
    """(the rows written, the summary printed)."""
    summary = StringIO()
    call_command("export_judgements", str(out), "--user", name, stdout=summary)
    return "\n".join((out / f).read_text(encoding="utf-8") for f in ("questions.jsonl", "ood.jsonl")), summary.getvalue()


def probe_judgements(probes: Probes, name: str, client: Client, item: Restricted, reader_answer: int) -> None:
    """One user outside the item's audience: judging a reader's answer, naming the item's document in a
    verdict on their own answer, and every list that shows verdicts."""
    assert item.document is not None
    markers = item.markers()
    reader = Message.objects.get(pk=reader_answer)
    for method, path, body in (("POST", f"/api/messages/{reader_answer}/judgement", {"kind": "helpful"}),
                               ("POST", f"/api/messages/{reader_answer}/rating", {"rating": -1}),
                               ("DELETE", f"/api/messages/{reader_answer}/judgement", None),
                               ("POST", f"/api/review/answers/{reader_answer}/judgement", {"kind": "wrong"})):
        response = post(client, path, body) if method == "POST" else client.delete(path)
        surface = f"{method} {path.replace(str(reader_answer), '{id}')} on a reader's answer"
        probes.expect(surface, name, response.status_code == 404, f"{path} answered {response.status_code}")
        probes.check(surface, name, response.content.decode(), markers)

    asked = ask(client, item.secrets[0].questions[0])
    mine = asked["message"]
    response = post(client, f"/api/messages/{mine}/judgement",
                    {"kind": "should_answer", "document": item.document.pk, "note": "it is in there"})
    probes.expect("judgement naming the document", name,
                  response.status_code == 404 and response.json() == {"detail": "no such document"},
                  f"answered {response.status_code} {response.content[:200]!r}")
    probes.expect("judgement naming the document", name, not Judgement.objects.filter(message_id=mine).exists(),
                  "a verdict was stored")
    probes.check("judgement naming the document", name, response.content.decode(), markers)

    for path in (f"/api/conversations/{asked['conversation']}", "/api/review/answers?limit=100",
                 f"/api/review/answers/{reader_answer}", f"/api/review/conversations/{reader.conversation_id}"):
        probes.check("verdicts shown with answers", name, client.get(path).content.decode(), markers)


def test_no_restricted_sentence_reaches_anyone_through_judgements(
    people: dict[str, Any], settings: Any, tmp_path: Path
) -> None:
    settings.KB_ANSWER_BACKEND = "extractive"
    started = time.monotonic()
    people.update(people_and_access())
    people[REVIEWER].groups.add(people["groups"]["support"])
    corpus = build(people)
    clients = {name: signed_in(people[name]) for name in (*ATTACKERS, "admin")}
    probes = Probes()
    reader_answers = readers_ask(corpus, clients, people)
    verdicts = judge_all(corpus, clients, reader_answers, people[REVIEWER])

    for item in corpus:
        for name in (*ATTACKERS, "admin"):
            if name not in item.readers:
                probe_judgements(probes, name, clients[name], item, reader_answers[item.key])

    # The export, by each user made an exporter (staff with the permission), and by the superuser.
    permission = Permission.objects.get(codename="export_judgement")
    for name in (*ATTACKERS, "admin"):
        user = people[name]
        user.is_staff = True
        user.save()
        user.user_permissions.add(permission)
        rows, summary = export(name, tmp_path / name)
        for item in corpus:
            if name not in item.readers:
                probes.check("manage.py export_judgements", name, rows, item.markers())
        if name == REVIEWER:  # positive control: the rows of the answers he may see in full are there
            seen = [item for item in corpus
                    if not is_withheld(Message.objects.get(pk=reader_answers[item.key]), viewer=user)]
            assert seen and all(item.filename in rows for item in seen), (summary, rows)

    assert Judgement.objects.count() == verdicts  # the attackers changed no verdict and added none
    print(f"\njudgement leaks: {probes.report()}\n  in {time.monotonic() - started:.0f}s")
    assert not probes.leaks, probes.report()
    assert probes.total >= MIN_PROBES, probes.report()
