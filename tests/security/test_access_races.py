"""Issue 28 item 5: a folder's access change racing an upload, a re-upload or a document's access change.

Two real transactions on two connections (threads). One is held open after its write; the other
runs meanwhile. The test waits until the second has either finished or is waiting on a lock in
PostgreSQL (pg_stat_activity), then lets the first commit, so each interleaving is forced, not
hoped for. Whatever the order, the document must end with the folder's new grants only.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, connections, transaction

from kb.library.models import Document, Folder
from kb.library.services import document_set_access, document_upload, folder_create, folder_set_access

pytestmark = pytest.mark.django_db(transaction=True)


def upload(folder: Folder, text: str, name: str = "pay.md", **access: Any) -> Document:
    data = text.encode()
    return document_upload(
        name=name, stream=io.BytesIO(data), size=len(data), folder=folder, enqueue=False, **access
    ).document


class Side(threading.Thread):
    """One transaction on its own connection. `hold`: stay open after `work` until released."""

    def __init__(self, work: Callable[[], object], *, hold: threading.Event | None = None) -> None:
        super().__init__(daemon=True)
        self.work, self.hold = work, hold
        self.written = threading.Event()
        self.pid = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                self.pid = cursor.fetchone()[0]
            with transaction.atomic():
                self.work()
                self.written.set()
                if self.hold is not None:
                    assert self.hold.wait(30), "never released"
        except BaseException as exc:  # re-raised in the test's thread
            self.error = exc
        finally:
            self.written.set()
            connections.close_all()

    def waiting_on_a_lock(self) -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [self.pid])
            row = cursor.fetchone()
        return bool(row and row[0] == "Lock")


def interleave(first: Callable[[], object], second: Callable[[], object]) -> bool:
    """`first` writes and stays open; `second` runs until it finishes or blocks; then `first` commits.
    Returns whether `second` had to wait for `first`."""
    release = threading.Event()
    held, other = Side(first, hold=release), Side(second)
    held.start()
    assert held.written.wait(30)
    other.start()
    deadline = time.monotonic() + 30
    while other.is_alive() and not (other.pid and other.waiting_on_a_lock()):
        assert time.monotonic() < deadline, "the second transaction neither finished nor waited"
        time.sleep(0.02)
    waited = other.is_alive()
    release.set()
    held.join(30)
    other.join(30)
    for side in (held, other):
        if side.error is not None:
            raise side.error
    return waited


@pytest.fixture
def shelf(people: dict[str, Any]) -> dict[str, Any]:
    """A folder engineering reads; the change under test gives it to hr alone."""
    groups = people["groups"]
    folder = folder_create(name="people", public=False, groups=[groups["engineering"]])
    return {"folder": folder, "engineering": f"g:{groups['engineering'].pk}", "hr": f"g:{groups['hr'].pk}",
            "groups": groups}


def to_hr(shelf: dict[str, Any]) -> Callable[[], object]:
    return lambda: folder_set_access(folder=Folder.objects.get(pk=shelf["folder"].pk), public=False,
                                     groups=[shelf["groups"]["hr"]])


def new_upload(shelf: dict[str, Any]) -> Callable[[], object]:
    return lambda: upload(Folder.objects.get(pk=shelf["folder"].pk), "# Pay\n\nThe pay scale.\n")


@pytest.mark.parametrize("upload_first", [True, False], ids=["upload-open-first", "change-open-first"])
def test_a_new_upload_racing_a_folder_change_ends_with_the_new_grants(shelf: dict[str, Any], upload_first: bool) -> None:
    if upload_first:
        interleave(new_upload(shelf), to_hr(shelf))
    else:
        interleave(to_hr(shelf), new_upload(shelf))
    document = Document.objects.get(filename="pay.md")
    assert document.acl == [shelf["hr"]]  # before the fix: engineering kept it


@pytest.mark.parametrize("upload_first", [True, False], ids=["reupload-open-first", "change-open-first"])
def test_a_reupload_that_starts_inheriting_racing_a_folder_change_ends_with_the_new_grants(
    shelf: dict[str, Any], upload_first: bool
) -> None:
    """The old version had its own grants (engineering); the new one inherits the folder's."""
    folder = shelf["folder"]
    upload(folder, "# Pay\n\nOld scale.\n", public=False, groups=[shelf["groups"]["engineering"]])

    def reupload() -> object:
        return upload(Folder.objects.get(pk=folder.pk), "# Pay\n\nNew scale.\n")

    if upload_first:
        interleave(reupload, to_hr(shelf))
    else:
        interleave(to_hr(shelf), reupload)
    document = Document.objects.get(filename="pay.md")
    assert document.inherit_access and document.pending_acl == [shelf["hr"]]  # the new version: hr only
    # The old version, still served, keeps its own audience until the new one is indexed, and narrows
    # to what both admit when the grants change after the re-upload: the outcome of the serial order.
    assert document.acl == ([] if upload_first else [shelf["engineering"]])


@pytest.mark.parametrize("inherit_first", [True, False], ids=["inherit-open-first", "change-open-first"])
def test_a_document_set_to_inherit_racing_a_folder_change_ends_with_the_new_grants(
    shelf: dict[str, Any], inherit_first: bool
) -> None:
    folder = shelf["folder"]
    pk = upload(folder, "# Pay\n\nThe scale.\n", public=False, groups=[shelf["groups"]["engineering"]]).pk

    def inherit() -> object:
        return document_set_access(document=Document.objects.select_related("folder").get(pk=pk), inherit=True)

    if inherit_first:
        interleave(inherit, to_hr(shelf))
    else:
        interleave(to_hr(shelf), inherit)
    assert Document.objects.get(pk=pk).acl == [shelf["hr"]]


def test_the_folder_change_waits_for_the_open_upload_and_uploads_do_not_wait_for_each_other(
    shelf: dict[str, Any],
) -> None:
    """The serialisation is the lock, not luck; and two uploads into one folder share it."""
    assert interleave(new_upload(shelf), to_hr(shelf))
    folder = shelf["folder"]
    assert not interleave(lambda: upload(folder, "# A\n\nOne.\n", name="a.md"),
                          lambda: upload(folder, "# B\n\nTwo.\n", name="b.md"))
    assert Document.objects.get(filename="b.md").acl == [shelf["hr"]]
