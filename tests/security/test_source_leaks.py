"""Synced sources in the leak suite (issue 27): a folder on disk and a Git repository cloned over
file:// fill a restricted folder, and their secrets must reach nobody outside its audience on any
surface the leak suite probes, nor through the documents and sources APIs and the source admin.
And a file moved at the source from a restricted sub-path to a public one is readable to
outsiders only through its new, public document, once that is indexed: at no instant of the runs
moving it through the old one, and the old one is gone afterwards."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client

from chat.models import Citation
from kb.library.models import Document, Folder, Source
from kb.library.services import folder_set_access
from kb.library.sources.sync import source_sync
from search.retrieval import hybrid_search
from tests.kb.test_sources import commit, git
from tests.security.conftest import signed_in
from tests.security.fortress import ATTACKERS, PUBLIC, Probes, Restricted, _secret, people_and_access, upload
from tests.security.test_leak_suite import probe_outsider, probe_own_lists, readers_ask

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

VAULT = "Pipeline vault 5130"  # engineering only


def _item(key: str, title: str, what: str, tag: str) -> Restricted:
    places = ("Oslo depot", "Bergen harbour")
    secrets = [_secret(f"{tag}-{5200 + 11 * i}-S{i}", what, place) for i, place in enumerate(places)]
    return Restricted(key, title, "", frozenset({"alice", "dave"}), secrets)


def _text(item: Restricted) -> str:
    body = "\n\n".join(f"## {s.questions[1].title()}\n\n{s.sentence}" for s in item.secrets)
    return f"# {item.title}\n\n{body}\n"


def _synced(source: Source, path: str, item: Restricted) -> Restricted:
    """The item once its source ran: its document, and the file name the document got."""
    result = source_sync(source)
    assert result.status == "ok" and result.new == 1 and not result.failed, result.summary()
    item.document = Document.objects.get(source=source, source_path=path, status="ready")
    item.filename = item.document.filename
    return item


def probe_source_surfaces(probes: Probes, name: str, client: Client, item: Restricted, source: Source,
                          markers: list[str]) -> None:
    """What the documents and sources APIs and the source admin tell a user outside the folder."""
    assert item.document is not None
    for path in ("/api/documents", f"/api/documents?q={item.title}", f"/api/documents?folder={source.folder_id}",
                 "/api/folders", "/api/sources"):
        probes.check("documents and sources APIs", name, client.get(path).content.decode(), markers,
                     sent=[path.partition("?q=")[2]])
    for path in (f"/api/documents/{item.document.pk}", f"/api/folders/{source.folder_id}", f"/api/sources/{source.pk}"):
        response = client.get(path)
        probes.expect("documents and sources APIs", name, response.status_code == 404, f"{path} answered {response.status_code}")
    before = Source.objects.values_list("last_started_at", flat=True).get(pk=source.pk)
    response = client.post(f"/api/sources/{source.pk}/sync")
    probes.expect("documents and sources APIs", name, response.status_code == 404, f"sync answered {response.status_code}")
    probes.expect("documents and sources APIs", name,
                  Source.objects.values_list("last_started_at", flat=True).get(pk=source.pk) == before, "a run started")
    for page in ("/admin/kb/source/", f"/admin/kb/source/?q={source.name}", f"/admin/kb/source/{source.pk}/change/",
                 f"/admin/kb/source/{source.pk}/history/", f"/admin/kb/source/{source.pk}/delete/"):
        probes.check("source admin", name, client.get(page, follow=True).content.decode(), markers,
                     sent=[page, page.partition("?q=")[2]])


def test_a_restricted_folder_filled_by_sources_leaks_nothing(people: dict[str, Any], daphne: int, settings: Any,
                                                             tmp_path: Path) -> None:
    settings.KB_ANSWER_BACKEND = "extractive"
    settings.KB_SOURCE_FOLDER_ROOTS = [str(tmp_path)]
    people.update(people_and_access())
    # ellen may also view and change sources: the rows whose folder she cannot read must not exist for her.
    people["ellen"].user_permissions.add(*Permission.objects.filter(content_type__model="source"))
    vault = Folder.objects.create(name=VAULT)
    folder_set_access(folder=vault, public=False, groups=[people["groups"]["engineering"]])
    handbook = Folder.objects.create(name="Handbook")
    folder_set_access(folder=handbook, public=True)
    upload(PUBLIC, "handbook.md", folder=handbook)

    share = tmp_path / "vaultshare-2271"
    lynx = _item("lynx", "Runbook Lynx 5810", "vault rotation code", "LYX")
    (share / "runbooks").mkdir(parents=True)
    (share / "runbooks" / "lynx.md").write_text(_text(lynx))
    on_disk = Source.objects.create(name="vaultshare-2271", kind="folder", location=str(share), folder=vault)
    repo = tmp_path / "vaultrepo-3382"
    ibis = _item("ibis", "Ledger Ibis 6920", "private expense approval key", "IBS")
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    commit(repo, {"ops/ibis.md": _text(ibis)}, "the ledger")
    in_git = Source.objects.create(name="vaultrepo-3382", kind="git", location=f"file://{repo}", branch="main",
                                   folder=vault)
    corpus = [_synced(on_disk, "runbooks/lynx.md", lynx), _synced(in_git, "ops/ibis.md", ibis)]
    sources = {"lynx": on_disk, "ibis": in_git}

    clients = {name: signed_in(people[name]) for name in (*ATTACKERS, "admin")}
    probes = Probes()
    reader_answers = readers_ask(corpus, clients, people)
    admin = clients["admin"]
    for source in sources.values():  # positive controls for the source surfaces
        assert source.name in admin.get("/api/sources").content.decode()
        assert source.name in admin.get(f"/admin/kb/source/?q={source.name}").content.decode()
    for item in corpus:
        source = sources[item.key]
        markers = [*item.markers(), source.name, str(share), str(repo), VAULT]
        for name in ATTACKERS:
            if name in item.readers:
                continue
            probe_outsider(probes, daphne, name, clients[name], item, reader_answers[item.key])
            probe_source_surfaces(probes, name, clients[name], item, source, markers)
    probe_own_lists(probes, daphne, {name: clients[name] for name in ATTACKERS}, corpus)

    assert Citation.objects.filter(document__source__isnull=False).exists()
    print(f"\nsource leak suite: {probes.report()}")
    assert not probes.leaks, probes.report()
    assert probes.counts["source admin"] and probes.counts["documents and sources APIs"] and probes.total >= 300, probes.report()


# --------------------------------------------------------------------------- a file moved to a public sub-path

APPRAISAL = """# Appraisal round

## Salary bands

The salary band ceiling for senior analysts in the appraisal round is 81,450 euros, code HR-7731-BAND.
"""
CODE = "HR-7731-BAND"
QUESTION = "What is the salary band ceiling for senior analysts?"


class Watch:
    """Carol's and bob's search for the moved text, and the old document's viewer, polled while runs go
    on: every instant at which an outsider got it through anything but the new public document."""

    def __init__(self, people: dict[str, Any], old: int) -> None:
        self.outsiders = [people["carol"], people["bob"]]
        self.viewer = signed_in(people["carol"])
        self.old = old
        self.leaks: list[str] = []
        self.polls = 0
        self.unseen_while_running = 0  # polls during the runs at which no outsider found it: the window was watched
        self.stop = threading.Event()

    def poll(self, public_folder: Folder) -> None:
        try:
            while not self.stop.is_set():
                self.polls += 1
                seen = False
                for user in self.outsiders:
                    for hit in hybrid_search(user=user, query=QUESTION).hits:
                        if CODE not in hit.content:
                            continue
                        seen = True
                        document = Document.objects.filter(pk=hit.document_id).values("folder_id", "status").first()
                        if hit.document_id == self.old or document is None or document["folder_id"] != public_folder.pk:
                            self.leaks.append(f"{user.username} got it from document {hit.document_id}: {document}")
                if self.viewer.get(f"/documents/{self.old}/").status_code != 404:
                    self.leaks.append("carol opened the old document")
                self.unseen_while_running += not seen
                time.sleep(0.05)
        finally:
            connection.close()


def _in_thread(run: Any) -> threading.Thread:
    def target() -> None:
        try:
            run()
        finally:
            connection.close()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("kind", ["folder", "git"])
def test_a_file_moved_from_a_restricted_sub_path_to_a_public_one_is_never_readable_before_it_is_indexed(
    people: dict[str, Any], tmp_path: Path, kind: str, settings: Any
) -> None:
    settings.KB_SOURCE_FOLDER_ROOTS = [str(tmp_path)]
    hr = Folder.objects.create(name="People files")
    folder_set_access(folder=hr, public=False, groups=[people["groups"]["hr"]])
    public = Folder.objects.create(name="Handbook")
    folder_set_access(folder=public, public=True)
    root = tmp_path / "share"
    (root / "restricted").mkdir(parents=True)
    (root / "public").mkdir()
    (root / "restricted" / "appraisal.md").write_text(APPRAISAL)
    # A second file stays: a run deleting the only document would be held by the shrink guard.
    (root / "restricted" / "grievances.md").write_text("# Grievances\n\nGrievances go to the HR partner in writing.\n")
    (root / "public" / "canteen.md").write_text("# Canteen\n\nThe canteen serves soup at noon on weekdays.\n")
    location = str(root)
    if kind == "git":
        git("init", "-q", "-b", "main", cwd=root)
        git("add", "-A", cwd=root)
        git("commit", "-q", "-m", "first", cwd=root)
        location = f"file://{root}"
    hidden = Source.objects.create(name="restricted", kind=kind, location=location, path="restricted", folder=hr)
    shown = Source.objects.create(name="public", kind=kind, location=location, path="public", folder=public)
    assert source_sync(hidden).new == 2 and source_sync(shown).new == 1
    old = Document.objects.get(source=hidden, source_path="restricted/appraisal.md")
    assert any(CODE in hit.content for hit in hybrid_search(user=people["dave"], query=QUESTION).hits)
    assert not any(CODE in hit.content for hit in hybrid_search(user=people["carol"], query=QUESTION).hits)

    if kind == "git":
        git("mv", "restricted/appraisal.md", "public/appraisal.md", cwd=root)
        git("commit", "-q", "-m", "the bands are public now", cwd=root)
    else:
        (root / "restricted" / "appraisal.md").rename(root / "public" / "appraisal.md")
    watch = Watch(people, old.pk)
    poller = _in_thread(lambda: watch.poll(public))
    results: dict[str, Any] = {}
    time.sleep(0.5)
    # Both sources' runs at once, as their schedules may have it: the public copy indexed, the old one deleted.
    runs = [_in_thread(lambda s=s: results.__setitem__(s.name, source_sync(s))) for s in (shown, hidden)]
    for run in runs:
        run.join(120)
    running_polls = watch.unseen_while_running
    time.sleep(0.5)
    watch.stop.set()
    poller.join(30)

    assert results["public"].new == 1 and results["restricted"].deleted == 1, {k: r.summary() for k, r in results.items()}
    assert not watch.leaks, watch.leaks[:10]
    assert watch.polls >= 5 and running_polls >= 1, (watch.polls, running_polls)
    moved = Document.objects.get(source=shown, source_path="public/appraisal.md")
    assert moved.folder == public and moved.status == "ready" and moved.pk != old.pk
    assert not Document.objects.filter(pk=old.pk).exists()
    for name in ("carol", "bob", "dave"):
        hits = [hit for hit in hybrid_search(user=people[name], query=QUESTION).hits if CODE in hit.content]
        assert {hit.document_id for hit in hits} == {moved.pk}, name
