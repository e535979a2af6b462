"""The adversarial leak suite: every restricted sentence, every user who may not read it, every surface.

Probes are generated from tests/security/fortress.py: for each restricted document and each
attacker outside its audience, the attacker searches the API with three phrasings of each
sentence's question (and `manage.py search` with one, each outsider another), asks it (POST
/api/ask, then the conversation API and the websocket stream through a real Daphne), opens the
viewer, the download, the library, the readers' conversations, the review API and desk, and
every admin page (staff are served them; anyone else must be sent to sign in); and /ws/library/
is asked to watch every document. A probe fails on any of the document's codes, title, file
name, restricted folder name or id showing up. Readers are asked first, so answers, quotes
and reviewers' notes quoting every secret exist to be leaked. Positive controls prove each
code is found by its readers, so a probe that finds nothing means something.
"""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import SESSION_KEY
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from websockets.exceptions import ConnectionClosed

from chat.consumers import CLOSE_FORBIDDEN
from chat.models import Citation, Message
from chat.review.feedback import feedback_add
from chat.services import answer_produce
from kb.library.models import Chunk
from tests.conftest import ws
from tests.security.conftest import signed_in
from tests.security.fortress import ATTACKERS, Probes, Restricted, build, people_and_access

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

MIN_PROBES = 1000
LIBRARY_WAIT = 1.5  # seconds a library socket is heard after its watch: the consumer polls every second


def ask(client: Client, question: str) -> dict[str, Any]:
    """POST /api/ask, then produce the answer in this process, as a worker would."""
    response = client.post("/api/ask", {"question": question}, content_type="application/json")
    assert response.status_code == 202, response.content
    asked = response.json()
    answer_produce(message_id=asked["message"])
    return dict(asked)


def replay(port: int, client: Client, conversation: int) -> tuple[str, int | None]:
    """What /ws/chat/<conversation>/ sends on connect, until the last answer ends; and its close code."""
    events: list[str] = []
    with ws(port, f"/ws/chat/{conversation}/", client.cookies["sessionid"].value) as socket:
        try:
            while True:
                event = socket.recv(timeout=10)
                events.append(str(event))
                if json.loads(event)["type"] in ("done", "refused", "error"):
                    return "\n".join(events), None
        except ConnectionClosed as closed:
            return "\n".join(events), closed.rcvd.code if closed.rcvd else None


def admin_pages(item: Restricted, reader_answer: int) -> list[str]:
    assert item.document is not None
    document = item.document
    pages = [
        f"/admin/kb/document/?q={item.title}", "/admin/kb/document/", f"/admin/kb/chunk/?q={item.secrets[0].code}",
        "/admin/kb/folder/", "/admin/chat/conversation/", f"/admin/chat/message/?q={item.secrets[0].code}",
        "/admin/chat/feedback/", "/admin/accounts/apitoken/",
        f"/admin/kb/document/{document.pk}/change/", f"/admin/kb/document/{document.pk}/history/",
        f"/admin/chat/message/{reader_answer}/change/",
        f"/admin/chat/conversation/{Message.objects.get(pk=reader_answer).conversation_id}/change/",
    ]
    pages += [f"/admin/kb/chunk/{pk}/change/" for pk in Chunk.objects.filter(document=document).values_list("pk", flat=True)]
    pages += [f"/admin/chat/feedback/{pk}/change/" for pk in
              Message.objects.get(pk=reader_answer).feedback.values_list("pk", flat=True)]
    if document.folder_id:
        pages += [f"/admin/kb/document/?folder__id__exact={document.folder_id}",
                  f"/admin/kb/folder/{document.folder_id}/change/"]
    return pages


def probe_admin(probes: Probes, name: str, client: Client, item: Restricted, reader_answer: int) -> None:
    """Every admin page about the item. Staff are served the page, which must not show it; anyone else must be
    sent to the admin's sign-in (following that would render the same form ~450 times a run)."""
    markers = item.markers()
    staff = User.objects.get(pk=client.session[SESSION_KEY]).is_staff
    for page in admin_pages(item, reader_answer):
        if staff:
            probes.check("admin", name, client.get(page, follow=True).content.decode(), markers,
                         sent=[page, page.partition("?q=")[2]])
        else:
            response = client.get(page)
            probes.expect("admin", name, response.status_code == 302 and response["Location"].startswith(
                "/admin/login/"), f"{page} answered {response.status_code}")


def readers_ask(corpus: list[Restricted], clients: dict[str, Client], people: dict[str, Any]) -> dict[str, int]:
    """Positive controls, and something to leak: a reader of each item finds and asks every secret, and
    files a note quoting it. Returns the id of a reader's answer per item."""
    reader_answers: dict[str, int] = {}
    for item in corpus:
        reader = sorted(item.readers)[0]
        for secret in item.secrets:
            found = clients[reader].get("/api/search", {"q": secret.questions[0]}).content.decode()
            assert secret.code in found, f"positive control: {reader} cannot find {secret.code}"
            asked = ask(clients[reader], secret.questions[0])
            answer = Message.objects.get(pk=asked["message"])
            assert secret.code in answer.text, f"positive control: {reader}'s answer lacks {secret.code}"
            # By a reviewer who may read it: nobody files feedback on an answer withheld from them.
            feedback_add(reviewer=people[reader], message=answer, kind="unsupported", note=f"Quoted: {secret.sentence}")
            reader_answers[item.key] = answer.pk
    return reader_answers


def probe_outsider(probes: Probes, daphne: int, name: str, client: Client, item: Restricted, reader_answer: int) -> None:
    """Every surface, for one user outside the item's audience: searching and asking each secret, the
    viewer, the download, the library, a reader's conversation, the review API and desk, the admin."""
    assert item.document is not None
    markers = item.markers()
    reader_conversation = Message.objects.get(pk=reader_answer).conversation_id
    for secret in item.secrets:
        for question in secret.questions:
            body = client.get("/api/search", {"q": question, "k": 50}).content.decode()
            probes.check("GET /api/search", name, body, markers)
        # The command runs the same search: one phrasing per outsider, in turn, so each goes through it.
        question = secret.questions[ATTACKERS.index(name) % len(secret.questions)]
        out = call_command("search", question, "--user", name, "--json", "--k", "50", stdout=StringIO())
        probes.check("manage.py search", name, out, markers)
        asked = ask(client, secret.questions[0])
        body = client.get(f"/api/conversations/{asked['conversation']}").content.decode()
        probes.check("POST /api/ask + GET /api/conversations/<id>", name, body, markers)
        events, code = replay(daphne, client, asked["conversation"])
        probes.check("/ws/chat/<own conversation>/", name, events, markers)

    response = client.get(f"/documents/{item.document.pk}/")
    probes.expect("viewer", name, response.status_code == 404, f"viewer answered {response.status_code}")
    response = client.get(f"/documents/{item.document.pk}/download")
    probes.expect("download", name, response.status_code == 404, f"download answered {response.status_code}")
    probes.check("library", name, client.get("/library/", {"q": item.title}).content.decode(), markers,
                 sent=[item.title])
    probes.check("library", name, client.get("/library/").content.decode(), markers)
    response = client.get(f"/api/conversations/{reader_conversation}")
    probes.expect("GET /api/conversations/<reader's>", name, response.status_code == 404,
                  f"answered {response.status_code}")
    events, code = replay(daphne, client, reader_conversation)
    probes.expect("/ws/chat/<reader's conversation>/", name, code == CLOSE_FORBIDDEN and not events,
                  f"closed with {code} after {events[:200]!r}")
    for path in ("/api/review/answers", f"/api/review/answers/{reader_answer}",
                 f"/api/review/conversations/{reader_conversation}", "/review/", "/review/?filter=flagged"):
        probes.check("review API and desk", name, client.get(path).content.decode(), markers)
    probe_admin(probes, name, client, item, reader_answer)


def probe_own_lists(probes: Probes, daphne: int, clients: dict[str, Client], corpus: list[Restricted]) -> None:
    """What each user is sent about many documents at once: their conversations, and /ws/library/ asked to watch
    every item's document. Every user's socket is open at once and each is heard for LIBRARY_WAIT after its watch
    (a poll of the consumer's and more), so the users share one wait instead of one each."""
    watched = [item.document.pk for item in corpus if item.document is not None]
    with ExitStack() as stack:
        sockets = {}
        for name, client in clients.items():
            outside = [item for item in corpus if name not in item.readers]
            probes.check("GET /api/conversations", name, client.get("/api/conversations").content.decode(),
                         [m for item in outside for m in item.markers()])
            sockets[name] = stack.enter_context(ws(daphne, "/ws/library/", client.cookies["sessionid"].value))
            sockets[name].send(json.dumps({"type": "watch", "ids": watched}))
        heard_until = time.monotonic() + LIBRARY_WAIT
        for name, socket in sockets.items():
            rows = []
            try:
                while True:
                    rows.append(json.loads(socket.recv(timeout=max(heard_until - time.monotonic(), 0))))
            except TimeoutError:
                pass
            sent = {row.get("id") for row in rows}
            for item in corpus:
                if name in item.readers:
                    continue
                assert item.document is not None
                probes.expect("/ws/library/", name, item.document.pk not in sent, f"status of {item.key}")
                probes.check("/ws/library/", name, json.dumps(rows), item.markers())


def test_no_restricted_sentence_reaches_anyone_outside_its_audience(
    people: dict[str, Any], daphne: int, settings: Any
) -> None:
    settings.KB_ANSWER_BACKEND = "extractive"
    started = time.monotonic()
    people.update(people_and_access())
    corpus = build(people)
    clients = {name: signed_in(people[name]) for name in (*ATTACKERS, "admin")}
    probes = Probes()

    # Readers first: their answers quote the secrets; a reviewer's note repeats one.
    reader_answers = readers_ask(corpus, clients, people)
    for item in corpus:
        for name in ATTACKERS:
            if name not in item.readers:
                probe_outsider(probes, daphne, name, clients[name], item, reader_answers[item.key])
    probe_own_lists(probes, daphne, {name: clients[name] for name in ATTACKERS}, corpus)

    assert Citation.objects.exists() and reader_answers
    print(f"\nleak suite: {probes.report()}\n  in {time.monotonic() - started:.0f}s")
    assert not probes.leaks, probes.report()
    assert probes.total >= MIN_PROBES and len(probes.counts) >= 8, probes.report()
