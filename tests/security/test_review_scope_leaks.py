"""Review scope in the leak suite (issue 29 item 6): a reviewer's grant opens the review desk's answers of its group
or folder and nothing else. Attackers: sam, granted review of engineering, and carol, granted review of the
engineering vault folder, probing every other item's answers on every page of the review list, its detail, conversation and write
endpoints, and every item (covered or not) through the viewer, the download, search, the chat, the websocket replay,
the citations' links and the admin; pat, support staff holding only the grant model's add and view permissions,
granting herself (or sam) what she cannot read; and a revocation racing reads. A leak is a restricted item's code,
title, file name, link or id in a response outside the grant's cover, or a grant, verdict or flag that should not
exist."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connections
from django.test import Client

from chat.consumers import CLOSE_FORBIDDEN
from chat.models import Feedback, Judgement, Message, ReviewAccess, ReviewGrant
from chat.selectors import is_withheld, withheld_from_reviewer
from kb.library.models import Folder
from tests.security.conftest import signed_in
from tests.security.fortress import Probes, Restricted, build, people_and_access
from tests.security.test_leak_suite import ask, probe_admin, readers_ask, replay

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

MIN_PROBES = 600
# Who holds which grant, and the items it covers (tests.security.fortress: kestrel is in the engineering vault
# folder, plover is shared with engineering (and carol) by its own grants). An answer is covered only when every
# document it drew on is: dave's answers on heron (HR folder) also draw on engineering's documents he reads.
GRANTS = {"sam": ("group", "engineering"), "carol": ("folder", "Ops vault 3310")}
COVERED = {"sam": {"kestrel", "plover"}, "carol": {"kestrel"}}


def post(client: Client, url: str, body: dict[str, Any]) -> Any:
    return client.post(url, json.dumps(body), content_type="application/json")


def every_page(client: Client, **filters: Any) -> str:
    """The whole review list, one answer a page, following `before` to the end, as one text."""
    pages: list[str] = []
    last = None
    while True:
        response = client.get("/api/review/answers", {"limit": 1, **filters, **({"before": last} if last else {})})
        assert response.status_code == 200, response.content
        rows = response.json()
        if not rows:
            return "\n".join(pages)
        pages.append(response.content.decode())
        last = rows[-1]["id"]


def probe_desk(probes: Probes, name: str, client: Client, item: Restricted, answers: list[int]) -> None:
    """The review desk on an item outside `name`'s grants: each answer's detail, conversation and writes."""
    markers = item.markers()
    for answer in answers:
        conversation = Message.objects.get(pk=answer).conversation_id
        for path in (f"/api/review/answers/{answer}", f"/api/review/conversations/{conversation}"):
            response = client.get(path)
            probes.check("review detail and conversation", name, response.content.decode(), markers)
            withheld = [m for m in response.json().get("messages", [response.json()]) if m["id"] == answer]
            probes.expect("review detail and conversation", name, all(m["withheld"] for m in withheld),
                          f"{path} shows the answer")
        for path, body in ((f"/api/review/answers/{answer}/feedback", {"kind": "outdated", "note": "x"}),
                           (f"/api/review/answers/{answer}/unsupported/0", {"verdict": "confirmed"}),
                           (f"/api/review/answers/{answer}/judgement", {"kind": "wrong"})):
            response = post(client, path, body)
            probes.expect("review writes", name, response.status_code == 404, f"{path} answered {response.status_code}")
            probes.check("review writes", name, response.content.decode(), markers)


def probe_beyond_the_desk(probes: Probes, name: str, client: Client, item: Restricted, answer: int,
                          daphne: int) -> None:
    """Every surface but the desk, for an item the attacker may not read (covered by their grant or not)."""
    assert item.document is not None
    markers = item.markers()
    conversation = Message.objects.get(pk=answer).conversation_id
    for secret in item.secrets:
        body = client.get("/api/search", {"q": secret.questions[0], "k": 50}).content.decode()
        probes.check("search", name, body, markers)
    asked = ask(client, item.secrets[0].questions[0])
    probes.check("chat", name, client.get(f"/api/conversations/{asked['conversation']}").content.decode(), markers)
    for path in (f"/documents/{item.document.pk}/", f"/documents/{item.document.pk}/download",
                 f"/api/documents/{item.document.pk}", f"/api/conversations/{conversation}"):
        response = client.get(path)
        probes.expect("viewer, download, documents and conversations", name, response.status_code == 404,
                      f"{path} answered {response.status_code}")
        probes.check("viewer, download, documents and conversations", name, response.content.decode(), markers,
                     sent=[path])
    probes.check("library and documents", name, client.get("/api/documents", {"limit": 500}).content.decode(), markers)
    probes.check("library and documents", name, client.get("/library/").content.decode(), markers)
    verdicts: list[tuple[str, dict[str, Any]]] = [(f"/api/messages/{answer}/judgement", {"kind": "wrong"}),
                                                  (f"/api/messages/{answer}/rating", {"rating": -1})]
    for path, payload in verdicts:
        response = post(client, path, payload)
        probes.expect("the asker's verdicts", name, response.status_code == 404, f"{path} answered {response.status_code}")
    events, code = replay(daphne, client, conversation)
    probes.expect("websocket replay", name, code == CLOSE_FORBIDDEN and not events, f"closed {code} after {events[:200]!r}")
    probe_admin(probes, name, client, item, answer)


def probe_citation_links(probes: Probes, name: str, client: Client, item: Restricted, answer: int) -> None:
    """A covered answer's citations on the desk (positive control), and their links, which stay closed."""
    detail = client.get(f"/api/review/answers/{answer}").json()
    probes.expect("covered answers on the desk", name,
                  not detail["withheld"] and any(s.code in detail["text"] for s in item.secrets), "not shown")
    for citation in detail["citations"]:
        response = client.get(citation["link"].split("#")[0])
        probes.expect("citation links", name, response.status_code == 404, f"{citation['link']} answered "
                      f"{response.status_code}")
        probes.check("citation links", name, response.content.decode(), item.markers(), sent=[citation["link"]])


def tag(item: Restricted) -> str:
    """What each of the item's codes starts with ("KES-"): its answers quote it."""
    return item.secrets[0].code.split("-")[0] + "-"


def staff_viewer(user: User) -> None:
    """Staff who may view every model of kb and chat in the admin: what a grant adds there must be nothing."""
    user.is_staff = True
    user.save()
    user.user_permissions.set(Permission.objects.filter(content_type__app_label__in=("kb", "chat"),
                                                        codename__startswith="view_"))


def test_a_review_grant_opens_its_own_answers_on_the_desk_and_nothing_else(
    people: dict[str, Any], daphne: int, settings: Any
) -> None:
    settings.KB_ANSWER_BACKEND = "extractive"
    started = time.monotonic()
    people.update(people_and_access())
    corpus = build(people)
    clients = {name: signed_in(people[name]) for name in ("alice", "bob", "carol", "dave", "sam", "ellen")}
    readers_ask(corpus, clients, people)
    answers = {item.key: sorted(Message.objects.filter(role=Message.Role.ASSISTANT, text__contains=tag(item))
                                .values_list("pk", flat=True)) for item in corpus}
    assert all(len(found) == len(item.secrets) for item, found in zip(corpus, answers.values(), strict=True)), answers
    support = people["groups"]["support"]
    for name, (kind, target) in GRANTS.items():
        people[name].groups.add(support)
        staff_viewer(people[name])
        scope = {"group": people["groups"][target]} if kind == "group" else {"folder": Folder.objects.get(name=target)}
        ReviewGrant.objects.create(reviewer=people[name], granted_by=people["admin"], **scope)
    probes = Probes()

    for name in GRANTS:
        client = clients[name]
        outside = [item for item in corpus if name not in item.readers and item.key not in COVERED[name]]
        covered = [item for item in corpus if item.key in COVERED[name]]
        assert outside and covered and all(name not in item.readers for item in covered)
        hidden = [m for item in outside for m in item.markers()]
        for filters in ({}, {"flagged": True}, {"status": "done"}):
            listed = every_page(client, **filters)
            probes.check("every page of the review list", name, listed, hidden)
            if not filters:  # positive control: the covered answers are in it, whole
                probes.expect("every page of the review list", name,
                              all(item.secrets[0].code in listed for item in covered), "a covered answer is missing")
        for desk in ("/review/", "/review/?filter=flagged"):
            probes.check("review page", name, client.get(desk).content.decode(), hidden)
        for item in outside:
            probe_desk(probes, name, client, item, answers[item.key])
        for item in corpus:
            if name not in item.readers:
                probe_beyond_the_desk(probes, name, client, item, answers[item.key][0], daphne)
        for item in covered:
            probe_citation_links(probes, name, client, item, answers[item.key][0])
        for path in ("/admin/chat/reviewaccess/", "/admin/chat/reviewgrant/add/"):
            response = client.get(path)
            probes.expect("admin: grants and the access log", name, response.status_code == 403,
                          f"{path} answered {response.status_code}")
        # Viewing grants: only those of groups they are in and folders they may read, which theirs are not.
        listing = client.get("/admin/chat/reviewgrant/").content.decode()
        probes.expect("admin: grants and the access log", name, "/change/" not in listing, "a grant is listed")
        probes.check("admin: grants and the access log", name, listing, ["People files 6630", "Ops vault 3310"])

    # Nothing the attackers did wrote a verdict or flag on an answer outside their grants.
    judged = {m for item in corpus for m in answers[item.key] if item.key not in COVERED["sam"] | COVERED["carol"]}
    probes.expect("review writes", "all", not Judgement.objects.filter(message__in=judged, role="reviewer",
                                                                       judge__username__in=GRANTS).exists(), "a verdict")
    probes.expect("review writes", "all", not Feedback.objects.filter(message__in=judged,
                                                                      reviewer__username__in=GRANTS).exists(), "a flag")
    # The log holds exactly the answers shown through a grant: withheld from the holder on their own access, shown
    # with their grants (a covered item's, and alice's on plover, which carol reads and which draw on the vault too).
    for name in GRANTS:
        logged = set(ReviewAccess.objects.filter(reviewer=people[name]).values_list("answer", flat=True))
        through = {m.pk for m in Message.objects.filter(pk__in=[a for found in answers.values() for a in found])
                   if is_withheld(m, viewer=people[name]) and not withheld_from_reviewer(m, reviewer=people[name])}
        probes.expect("access log", name, logged == through and {a for key in COVERED[name] for a in answers[key]} <= logged,
                      f"logged {sorted(logged)}, shown through grants {sorted(through)}")

    print(f"\nreview scope leaks: {probes.report()}\n  in {time.monotonic() - started:.0f}s")
    assert not probes.leaks, probes.report()
    assert probes.total >= MIN_PROBES, probes.report()


def test_staff_with_partial_permissions_cannot_grant_themselves_what_they_cannot_read(people: dict[str, Any]) -> None:
    people.update(people_and_access())
    corpus = build(people)
    clients = {name: signed_in(people[name]) for name in ("alice", "bob", "dave")}
    readers_ask(corpus, clients, people)
    pat = User.objects.create_user("pat", password="pat", is_staff=True)
    pat.groups.set([people["groups"]["support"]])
    pat.user_permissions.set(Permission.objects.filter(content_type__app_label="chat",
                                                       codename__in=("add_reviewgrant", "view_reviewgrant")))
    given = ReviewGrant.objects.create(reviewer=people["sam"], group=people["groups"]["engineering"])
    client = signed_in(pat)
    probes = Probes()
    groups = [people["groups"][name] for name in ("engineering", "finance", "hr")]
    folders = list(Folder.objects.filter(name__in=("Ops vault 3310", "People files 6630")))
    for reviewer in (pat, people["sam"]):
        for scope in [{"group": g.pk} for g in groups] + [{"folder": f.pk} for f in folders]:
            response = client.post("/admin/chat/reviewgrant/add/", {"reviewer": reviewer.pk, **scope})
            probes.expect("admin: grant add", "pat", response.status_code == 200 and not ReviewGrant.objects.filter(
                reviewer=reviewer, **scope).exclude(pk=given.pk).exists(), f"{scope} for {reviewer}: {response.status_code}")
    # Positive control: a group she is in (support, which reads nothing restricted) she may grant.
    allowed = client.post("/admin/chat/reviewgrant/add/", {"reviewer": people["sam"].pk,
                                                           "group": people["groups"]["support"].pk})
    assert allowed.status_code == 302, allowed.content
    ReviewGrant.objects.filter(group=people["groups"]["support"]).delete()
    for path, body in ((f"/admin/chat/reviewgrant/{given.pk}/change/", {"reviewer": pat.pk,
                                                                         "group": people["groups"]["engineering"].pk}),
                       (f"/admin/chat/reviewgrant/{given.pk}/delete/", {"post": "yes"}),
                       ("/admin/chat/reviewgrant/", {"action": "delete_selected", "_selected_action": [given.pk],
                                                     "post": "yes"})):
        response = client.post(path, body)  # refused; the list's action just is not offered (200)
        probes.expect("admin: grant change and revoke", "pat", response.status_code in (200, 403) if "action" in body
                      else response.status_code == 403, f"{path} answered {response.status_code}")
    probes.expect("admin: grant change and revoke", "pat",
                  list(ReviewGrant.objects.values_list("pk", "reviewer", "group")) == [
                      (given.pk, people["sam"].pk, people["groups"]["engineering"].pk)], "the grants changed")
    listing = client.get("/admin/chat/reviewgrant/")
    probes.expect("admin: grant list", "pat", listing.status_code == 200 and f"/{given.pk}/change/" not in
                  listing.content.decode(), "sam's grant is listed to pat")
    markers = [m for item in corpus for m in item.markers()]
    probes.check("every page of the review list", "pat", every_page(client), markers)
    probes.expect("access log", "pat", not ReviewAccess.objects.exists(), "pat read through a grant")
    print(f"\nreview grant escalation: {probes.report()}")
    assert not probes.leaks, probes.report()


def test_a_revocation_racing_reads_holds_from_its_commit_and_every_shown_read_is_logged(
    people: dict[str, Any], settings: Any
) -> None:
    """Readers on their own connections read the answer over and over while the grant is revoked: a read that
    started after the revocation committed never shows it, and every read that showed it wrote its log row."""
    settings.KB_ANSWER_BACKEND = "extractive"
    people.update(people_and_access())
    corpus = build(people)
    kestrel = next(item for item in corpus if item.key == "kestrel")
    asked = ask(signed_in(people["alice"]), kestrel.secrets[0].questions[0])
    answer = asked["message"]
    people["sam"].groups.add(people["groups"]["support"])
    given = ReviewGrant.objects.create(reviewer=people["sam"], group=people["groups"]["engineering"])
    revoked_at: list[float] = []
    reads: list[tuple[float, bool]] = []  # (started, shown in full)
    stop = threading.Event()
    lock = threading.Lock()
    errors: list[BaseException] = []

    def read() -> None:
        client = signed_in(people["sam"])
        try:
            while not stop.is_set():
                began = time.monotonic()
                path = f"/api/review/answers/{answer}" if len(reads) % 2 else "/api/review/answers"
                response = client.get(path)
                body = response.content.decode()
                shown = kestrel.secrets[0].code in body
                with lock:
                    reads.append((began, shown))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=read, daemon=True) for _ in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(2)
    given.delete()  # autocommit: committed when it returns
    revoked_at.append(time.monotonic())
    time.sleep(2)
    stop.set()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    probes = Probes()
    for began, shown in reads:
        if began > revoked_at[0]:
            probes.expect("reads after the revocation", "sam", not shown, "shown after the revocation committed")
        else:
            probes.counts["reads before the revocation"] += 1
    shown_reads = sum(1 for _, shown in reads if shown)
    probes.expect("access log", "sam", ReviewAccess.objects.filter(answer=answer).count() == shown_reads,
                  f"{ReviewAccess.objects.filter(answer=answer).count()} rows for {shown_reads} reads shown")
    assert shown_reads and any(r[0] > revoked_at[0] for r in reads), reads  # both sides of the race happened
    print(f"\nrevocation race: {len(reads)} reads, {shown_reads} shown: {probes.report()}")
    assert not probes.leaks, probes.report()
