"""Content gaps in the leak suite (issue 29): the gaps page, GET /api/gaps and /api/gaps.csv show what people asked
and the documents nearest each topic; a document the viewer may not read is told only as "N documents you cannot
read, readable by: <groups>". Probed by every user outside a restricted document's audience, first without the
permission (404 everywhere), then as staff holding chat.view_contentgaps (ellen, staff with every permission of
the admin's models, holds it from the start), and the superuser: no restricted title,
file name, link, id, folder name, quote or chunk text ever appears. The gaps touch every restricted document: its
readers judged their answers "should have answered" naming it (with a note quoting a secret), and outsiders asked
its questions and rated the answers down."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from django.test import Client

from chat.review.gaps import may_view_gaps
from kb.library.models import Chunk, Folder
from tests.chat.review.test_gaps import grant_gaps
from tests.security.conftest import signed_in
from tests.security.fortress import ATTACKERS, Probes, Restricted, build, people_and_access
from tests.security.test_leak_suite import ask, readers_ask

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

MIN_PROBES = 250
VIEWERS = (*ATTACKERS, "admin")
SURFACES = ("/gaps/?days={}", "/api/gaps?days={}", "/api/gaps.csv?days={}")
WINDOWS = (1, 366)


def post(client: Client, url: str, body: dict[str, Any]) -> Any:
    return client.post(url, json.dumps(body), content_type="application/json")


def markers(item: Restricted) -> list[str]:
    """What may never reach a non-reader: the fortress's markers (codes, title, file name, links, ids), the
    document's id as the gaps API would write it, its restricted folder's name, its sentences and chunk texts."""
    assert item.document is not None
    folder = Folder.objects.filter(documents=item.document, public=False).values_list("name", flat=True).first()
    chunks = list(Chunk.objects.filter(document=item.document).values_list("content", flat=True))
    assert chunks
    return [*item.markers(), f'"id": {item.document.pk}', *([folder] if folder else []),
            *(s.sentence for s in item.secrets), *chunks]


def make_gaps(corpus: list[Restricted], clients: dict[str, Client], reader_answers: dict[str, int]) -> None:
    """Each item's reader says their answer should have answered from the item's document (a note quoting a
    secret); each outsider asks the item's first question and rates the answer down."""
    for item in corpus:
        assert item.document is not None
        reader = sorted(item.readers)[0]
        response = post(clients[reader], f"/api/messages/{reader_answers[item.key]}/judgement",
                        {"kind": "should_answer", "document": item.document.pk,
                         "note": f"Quoted: {item.secrets[0].sentence}"})
        assert response.status_code == 200, response.content
        for name in VIEWERS:
            if name not in item.readers:
                asked = ask(clients[name], item.secrets[0].questions[0])
                response = post(clients[name], f"/api/messages/{asked['message']}/rating", {"rating": -1})
                assert response.status_code == 200, response.content


def test_no_restricted_title_quote_or_chunk_reaches_anyone_through_content_gaps(
    people: dict[str, Any], settings: Any
) -> None:
    settings.KB_ANSWER_BACKEND = "extractive"
    started = time.monotonic()
    people.update(people_and_access())
    corpus = build(people)
    clients = {name: signed_in(people[name]) for name in VIEWERS}
    make_gaps(corpus, clients, readers_ask(corpus, clients, people))
    secret = {item.key: markers(item) for item in corpus}
    probes = Probes()

    lacking = [name for name in ATTACKERS if not may_view_gaps(people[name])]
    assert "ellen" not in lacking and len(lacking) == len(ATTACKERS) - 1  # ellen holds every chat permission
    for name in lacking:  # without the permission the surfaces do not exist
        for surface in SURFACES:
            response = clients[name].get(surface.format(90))
            where = f"{surface.split('?')[0]} without the permission"
            probes.expect(where, name, response.status_code == 404,
                          f"answered {response.status_code}")
            for item in corpus:
                probes.check(where, name, response.content.decode(), secret[item.key])

    for name in VIEWERS:
        if name != "admin":
            grant_gaps(people[name])
        bodies = {surface.format(days): clients[name].get(surface.format(days)) for surface in SURFACES
                  for days in WINDOWS}
        assert all(response.status_code == 200 for response in bodies.values()), name
        report = clients[name].get("/api/gaps?days=366").json()
        named_hidden = sum(h["named"] for topic in report["topics"] for h in topic["hidden"])
        for item in corpus:
            for surface, response in bodies.items():
                text = response.content.decode()
                if name in item.readers:  # positive control: a reader sees the document named
                    if surface.startswith("/gaps/"):
                        assert item.title in text, (name, item.key)
                else:
                    probes.check(surface.split("?")[0], name, text, secret[item.key])
        # Positive control: every document this viewer may not read is told as one, named by its reader's verdict.
        assert named_hidden == sum(name not in item.readers for item in corpus), (name, report)
        assert "you cannot read, readable by: " in bodies["/gaps/?days=366"].content.decode()
        admin_index = clients[name].get("/admin/").content.decode()
        for item in corpus:
            if name not in item.readers:
                probes.check("/admin/ index", name, admin_index, secret[item.key])

    print(f"\ncontent gap leaks: {probes.report()}\n  in {time.monotonic() - started:.0f}s")
    assert not probes.leaks, probes.report()
    assert probes.total >= MIN_PROBES, probes.report()
