"""Re-uploads: who may replace a document, which audience each version has, and a re-upload
racing a running ingest (issue 11, items 1, 2, 3 and 7)."""

from __future__ import annotations

import io
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from kb.library.ingest.pipeline import ingest
from kb.library.models import Chunk, Document
from kb.library.services import document_upload
from search.retrieval import hybrid_search

PAY_V1 = "# Pay bands\n\n## Grade seven\n\nThe grade seven salary band tops out at 91,250 kroner, approved by HR.\n"
PAY_V2 = "# Pay bands\n\n## Grade seven\n\nGrade seven salaries are published on the intranet from next spring.\n"
SECRET = "91,250 kroner"


def upload(text: str, name: str = "pay.md", **kwargs: Any) -> Any:
    data = text.encode()
    return document_upload(name=name, stream=io.BytesIO(data), size=len(data), enqueue=False, **kwargs)


def finds(user: Any, query: str = "grade seven salary band kroner") -> str:
    """Everything a search by `user` returns, passed or not, as one string."""
    return " ".join(h.content for h in hybrid_search(user=user, query=query).hits)


def download(user: Any, document: Document) -> int:
    client = Client()
    client.force_login(user)
    return client.get(f"/documents/{document.pk}/download").status_code


@pytest.fixture
def hr_pay(people: dict[str, Any]) -> Document:
    document = upload(PAY_V1, public=False, groups=[people["groups"]["hr"]], uploaded_by=people["dave"]).document
    assert ingest(document.pk) == Document.Status.READY
    return document


def test_a_reupload_keeps_the_old_version_with_its_old_audience_until_the_new_one_is_indexed(
    hr_pay: Document, people: dict[str, Any]
) -> None:
    """Item 1: the old HR text never reaches the new audience, queued or failed."""
    dave, carol = people["dave"], people["carol"]
    replaced = upload(PAY_V2, public=True, uploaded_by=dave)
    assert replaced.document.pk == hr_pay.pk and not replaced.created
    assert SECRET not in finds(carol)
    assert SECRET in finds(dave)
    assert download(carol, hr_pay) == 404

    # A version that fails to index leaves the old one to its old audience for good.
    failed = upload("   \n\n   \n", public=True, uploaded_by=dave)
    assert failed.document.pk == hr_pay.pk
    assert ingest(hr_pay.pk) == Document.Status.FAILED
    assert SECRET not in finds(carol)
    assert SECRET in finds(dave)
    assert set(Chunk.objects.filter(document=hr_pay).values_list("acl", flat=True).distinct()[0]) == {
        f"g:{people['groups']['hr'].pk}"
    }

    # Once a new version is indexed, its chunks bring its audience with them.
    upload(PAY_V2, public=True, uploaded_by=dave)
    assert ingest(hr_pay.pk) == Document.Status.READY
    assert "published on the intranet" in finds(carol, "grade seven salaries published intranet")
    assert SECRET not in finds(dave)


def test_a_restricted_new_file_is_not_downloadable_by_the_old_wider_audience(people: dict[str, Any]) -> None:
    """While a public document's HR-only new version waits, the old text stays public but the
    stored file, already the new one, is for readers of both versions only."""
    public = upload(PAY_V2, uploaded_by=people["dave"]).document
    assert ingest(public.pk) == Document.Status.READY
    upload(PAY_V1, public=False, groups=[people["groups"]["hr"]], uploaded_by=people["dave"])
    assert "published on the intranet" in finds(people["carol"], "grade seven salaries published intranet")
    assert download(people["carol"], public) == 404
    assert download(people["dave"], public) == 200


def test_an_uploader_cannot_take_over_a_document_they_cannot_read(hr_pay: Document, people: dict[str, Any]) -> None:
    """Item 2: the same name in the same folder from someone outside HR is a new document."""
    alice = people["alice"]
    result = upload(PAY_V2, users=[alice], uploaded_by=alice)
    assert result.created and result.document.pk != hr_pay.pk
    assert SECRET not in finds(alice)
    hr_pay.refresh_from_db()
    assert hr_pay.status == Document.Status.READY
    assert hr_pay.acl == [f"g:{people['groups']['hr'].pk}"]
    assert SECRET in finds(people["dave"])


def test_the_same_content_reply_never_names_a_document_the_uploader_cannot_read(
    hr_pay: Document, people: dict[str, Any]
) -> None:
    """Item 3: identical bytes from someone outside HR do not answer with HR's document."""
    result = upload(PAY_V1, users=[people["alice"]], uploaded_by=people["alice"])
    assert result.document.pk != hr_pay.pk and result.created and result.queued
    # Someone who may read it still gets the no-op.
    again = upload(PAY_V1, public=False, groups=[people["groups"]["hr"]], uploaded_by=people["dave"])
    assert again.document.pk == hr_pay.pk and not again.queued


@pytest.mark.django_db(transaction=True)
def test_an_older_ingest_finishing_after_a_newer_upload_writes_nothing(people: dict[str, Any]) -> None:
    """Item 7: the older run's chunks and statuses never land over the newer upload.

    The older run reads its file from a FIFO, so it is held, for real, between reading the
    row and reading the bytes while the newer version is uploaded.
    """
    first = upload(PAY_V1)
    document = first.document
    stored = Path(document.file.path)
    stored.unlink()
    os.mkfifo(stored)
    outcome: dict[str, str] = {}

    def older_run() -> None:
        from django.db import connections

        try:
            outcome["status"] = ingest(document.pk)
        finally:
            connections.close_all()

    worker = threading.Thread(target=older_run, daemon=True)
    worker.start()
    deadline = time.monotonic() + 30
    while True:  # the FIFO opens for writing only once the older run has it open for reading
        try:
            fd = os.open(stored, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError:
            assert time.monotonic() < deadline, "the older run never opened its file"
            time.sleep(0.05)
    newer = upload(PAY_V2)
    assert newer.document.pk == document.pk and newer.queued
    os.set_blocking(fd, True)
    os.write(fd, PAY_V1.encode())
    os.close(fd)
    worker.join(60)
    assert not worker.is_alive()

    document.refresh_from_db()
    assert document.status == Document.Status.QUEUED, "the older run overwrote the newer upload's status"
    assert not Chunk.objects.filter(document=document).exists()
    assert ingest(document.pk) == Document.Status.READY
    assert "published on the intranet" in " ".join(Chunk.objects.filter(document=document).values_list("content", flat=True))
    assert not upload(PAY_V2).queued  # now truly the same content
