"""Uploads, re-uploads, folder and document access changes in random order, some of them racing (issue 28,
item 5): after every step, what search, the viewer and the download give each user is what the grants
allow them now.

The model is the product's documented rule (kb.library.access): a document's served text keeps the audience
it was indexed for, narrowed by every later change of grants; a re-upload's audience waits (pending)
until its text is indexed; the stored file, already the newest, goes to readers of both. Racing steps
run an upload in a second connection while a folder's access change is open in the first, as a request
would during an admin's change; the model applies the change first, as the rule needs.
"""

from __future__ import annotations

import io
import os
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.db import connections, transaction
from django.test import Client
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from accounts.acl import EVERYONE, principals_common
from kb.library.ingest.pipeline import ingest
from kb.library.models import Document, Folder
from kb.library.services import document_set_access, document_upload, folder_set_access
from search.retrieval import hybrid_search

USERS = ("alice", "bob", "carol")  # engineering, finance, nobody (tests.conftest.people)
GROUPS = ("engineering", "finance", "hr")
SLOTS = 3
EXAMPLES = 4  # runs of the machine in `make test` (up to 10 steps each; the first ones are short)
TOPICS = (("vault rotation code", "Oslo depot"), ("payroll export key", "Bergen office"), ("bridge passcode", "Tromso yard"))

# Who may read: everyone, or some groups and people (by name).
Grant = frozenset[str]
GRANTS = st.sampled_from([
    frozenset({EVERYONE}), frozenset({"g:engineering"}), frozenset({"g:finance"}), frozenset({"g:hr"}),
    frozenset({"g:engineering", "g:finance"}), frozenset({"u:carol"}), frozenset({"g:finance", "u:carol"}),
])


@dataclass
class Slot:
    """The model of one document (always in a folder: a re-upload replaces it there)."""

    home: int  # its folder, by index
    inherit: bool  # reads its folder's grants, else its own
    grants: Grant  # its own
    latest: int  # the newest version uploaded (the stored file)
    indexed: int | None  # the version whose text is served
    served: Grant  # the served text's audience (Document.acl)
    pending: Grant | None  # the newest version's audience while it waits (Document.pending_acl)


class RacingAccessMachine(RuleBasedStateMachine):
    examples = 0
    probes: Counter[str] = Counter()

    def __init__(self) -> None:
        super().__init__()
        RacingAccessMachine.examples += 1
        self.run = RacingAccessMachine.examples
        Document.objects.all().delete()
        Folder.objects.all().delete()
        self.users = {name: User.objects.get(username=name) for name in USERS}
        self.clients = {name: Client() for name in USERS}
        for name, client in self.clients.items():
            client.force_login(self.users[name])
        self.groups = {name: Group.objects.get(name=name) for name in GROUPS}
        self.folder_grants: list[Grant] = [frozenset({"g:engineering"}), frozenset({"g:finance"})]
        self.folders = [Folder.objects.create(name=f"Shelf {self.run}-{i}", public=False) for i in range(2)]
        for folder, grants in zip(self.folders, self.folder_grants, strict=True):
            folder_set_access(folder=folder, **self._readers(grants))
        self.slots: list[Slot | None] = [None] * SLOTS
        self.ids: list[int | None] = [None] * SLOTS

    # ----------------------------------------------------------------- the model

    def _readers(self, grants: Grant) -> dict[str, Any]:
        return {
            "public": EVERYONE in grants,
            "groups": [self.groups[g[2:]] for g in sorted(grants) if g.startswith("g:")],
            "users": [self.users[u[2:]] for u in sorted(grants) if u.startswith("u:")],
        }

    def _grants(self, slot: Slot) -> Grant:
        return self.folder_grants[slot.home] if slot.inherit else slot.grants

    def _sync(self, slot: Slot) -> None:
        """kb.library.access.document_sync_acl: a change of grants narrows a pending document's served audience."""
        grants = self._grants(slot)
        if slot.pending is None:
            slot.served = grants
        else:
            slot.served, slot.pending = frozenset(principals_common(sorted(slot.served), sorted(grants))), grants

    def _admits(self, grants: Grant | None, user: str) -> bool:
        if grants is None:
            return False
        mine = {EVERYONE, f"u:{user}", *(f"g:{g.name}" for g in self.users[user].groups.all())}
        return bool(grants & mine)

    def code(self, i: int, version: int) -> str:
        return f"RACE-{self.run}-{i}-{version}-Z"

    def _text(self, i: int, version: int) -> bytes:
        what, where = TOPICS[i]
        return (f"# Topic {i} version {version}\n\n## {what}\n\nThe {what} for the {where} is {self.code(i, version)} "
                "this month.\n").encode()

    # ----------------------------------------------------------------- uploads

    def _upload(self, i: int, folder: int, grants: Grant | None) -> None:
        """document_upload as the library does, into a folder: inheriting its access (grants None), or not."""
        slot = self.slots[i]
        version = slot.latest + 1 if slot else 1
        data = self._text(i, version)
        access = {} if grants is None else self._readers(grants)
        document_upload(name=f"topic-{self.run}-{i}.md", stream=io.BytesIO(data), size=len(data),
                        folder=Folder.objects.get(pk=self.folders[folder].pk), enqueue=False, **access)

    def _uploaded(self, i: int, folder: int, grants: Grant | None) -> None:
        """The model after `_upload`: a new document is served its grants at once (nothing to serve yet);
        a new version's grants wait beside the old text's audience."""
        slot = self.slots[i]
        if slot is None:
            slot = Slot(folder, grants is None, grants or frozenset(), 1, None, frozenset(), None)
            slot.served = self._grants(slot)
            self.slots[i] = slot
            self.ids[i] = Document.objects.get(filename=f"topic-{self.run}-{i}.md").pk
            return
        slot.latest += 1
        slot.inherit, slot.grants = grants is None, grants or frozenset()
        slot.pending = self._grants(slot)

    @rule(i=st.integers(0, SLOTS - 1), folder=st.integers(0, 1), grants=st.none() | GRANTS)
    def upload(self, i: int, folder: int, grants: Grant | None) -> None:
        """A new document, or a new version of one in its folder (its audience pending until it is indexed)."""
        slot = self.slots[i]
        folder = folder if slot is None else slot.home
        self._upload(i, folder, grants)
        self._uploaded(i, folder, grants)

    @precondition(lambda self: any(s is not None and s.indexed != s.latest for s in self.slots))
    @rule(data=st.data())
    def index(self, data: st.DataObject) -> None:
        waiting = [i for i, s in enumerate(self.slots) if s is not None and s.indexed != s.latest]
        i = data.draw(st.sampled_from(waiting))
        slot = self.slots[i]
        assert slot is not None and self.ids[i] is not None
        assert ingest(self.ids[i]) == Document.Status.READY
        slot.served = slot.pending if slot.pending is not None else slot.served
        slot.pending, slot.indexed = None, slot.latest

    @precondition(lambda self: any(s is not None for s in self.slots))
    @rule(data=st.data(), grants=GRANTS, inherit=st.booleans())
    def set_document_access(self, data: st.DataObject, grants: Grant, inherit: bool) -> None:
        i = data.draw(st.sampled_from([i for i, s in enumerate(self.slots) if s is not None]))
        slot, pk = self.slots[i], self.ids[i]
        assert slot is not None and pk is not None
        document = Document.objects.get(pk=pk)
        if inherit:
            document_set_access(document=document, inherit=True)
        else:
            document_set_access(document=document, inherit=False, **self._readers(grants))
            slot.grants = grants
        slot.inherit = inherit
        self._sync(slot)

    def _folder_changed(self, folder: int, grants: Grant) -> None:
        self.folder_grants[folder] = grants
        for slot in self.slots:
            if slot is not None and slot.inherit and slot.home == folder:
                self._sync(slot)

    @rule(folder=st.integers(0, 1), grants=GRANTS)
    def set_folder_access(self, folder: int, grants: Grant) -> None:
        folder_set_access(folder=self.folders[folder], **self._readers(grants))
        self._folder_changed(folder, grants)

    @rule(i=st.integers(0, SLOTS - 1), folder=st.integers(0, 1), grants=GRANTS)
    def upload_while_a_folder_changes(self, i: int, folder: int, grants: Grant) -> None:
        """Item 5: an upload (new, or a new version inheriting the folder) whose transaction runs while the
        folder's access change is open; the change commits first, and the upload must end with its grants."""
        slot = self.slots[i]
        folder = folder if slot is None else slot.home
        failed: list[BaseException] = []

        def upload() -> None:
            try:
                self._upload(i, folder, None)
            except BaseException as exc:  # reported in the test's thread
                failed.append(exc)
            finally:
                connections.close_all()

        racer = threading.Thread(target=upload, daemon=True)
        with transaction.atomic():
            folder_set_access(folder=self.folders[folder], **self._readers(grants))
            racer.start()
            racer.join(0.5)  # done already only if it never waited for the change
        racer.join(60)
        assert not racer.is_alive() and not failed, failed
        RacingAccessMachine.probes["races"] += 1
        self._folder_changed(folder, grants)
        self._uploaded(i, folder, None)

    # ----------------------------------------------------------------- the invariant

    @invariant()
    def each_user_gets_what_the_grants_allow_now(self) -> None:
        for name, user in self.users.items():
            client = self.clients[name]
            for i, slot in enumerate(self.slots):
                if slot is None:
                    continue
                codes = {self.code(i, v) for v in range(1, slot.latest + 1)}
                may_read = self._admits(slot.served, name)
                served = {self.code(i, slot.indexed)} if slot.indexed and may_read else set()
                if slot.indexed:  # nothing to find before
                    what, where = TOPICS[i]
                    found = " ".join(h.content for h in hybrid_search(user=user, query=f"{what} {where}").hits)
                    self._check("search", name, i, found, codes - served)
                page = client.get(f"/documents/{self.ids[i]}/")
                self._check("viewer", name, i, page.content.decode(), codes - served)
                assert (page.status_code == 200) == may_read, (name, i, page.status_code, slot)
                download = client.get(f"/documents/{self.ids[i]}/download")
                newest = may_read and (slot.pending is None or self._admits(slot.pending, name))
                body = b"".join(download.streaming_content).decode() if download.status_code == 200 else ""  # type: ignore[attr-defined]
                self._check("download", name, i, body, codes - ({self.code(i, slot.latest)} if newest else set()))
                assert (download.status_code == 200) == newest, (name, i, download.status_code, slot)

    def _check(self, surface: str, who: str, i: int, text: str, forbidden: set[str]) -> None:
        RacingAccessMachine.probes[surface] += 1
        leaked = sorted(code for code in forbidden if code in text)
        assert not leaked, f"{surface} showed {leaked} to {who}: {self.slots[i]}"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_uploads_reuploads_and_access_changes_in_any_order_leave_only_what_the_grants_allow(
    people: dict[str, Any],
) -> None:
    """`make test` runs EXAMPLES runs of the machine; KB_ACCESS_MACHINE_EXAMPLES=N runs N (more for a deeper look)."""
    RacingAccessMachine.probes.clear()
    examples = int(os.environ.get("KB_ACCESS_MACHINE_EXAMPLES") or EXAMPLES)
    run_state_machine_as_test(
        RacingAccessMachine,
        settings=hypothesis_settings(max_examples=examples, stateful_step_count=10, deadline=None, derandomize=True,
                                     suppress_health_check=[HealthCheck.too_slow]),
    )
    print(f"\nracing access machine: {RacingAccessMachine.examples} runs, {dict(RacingAccessMachine.probes)}")
    assert RacingAccessMachine.probes["races"] >= 3 and sum(RacingAccessMachine.probes.values()) >= 150
