"""The ingestion pipeline on the real database and the real embedding model."""

from __future__ import annotations

import io
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from kb.library.ingest.batch import ingest_paths
from kb.library.ingest.pipeline import STAGES, ingest
from kb.library.ingest.version import current_index_version
from kb.library.models import Chunk, Document, Folder
from kb.library.selectors import document_is_stale, documents_stale
from kb.library.services import UploadRejected, document_delete, document_set_access, document_upload, folder_set_access
from tests.factories import ingested_document, uploaded_document

GUIDE = """# Shipments guide

Intro text that sits before any section and explains what the guide is for, who keeps it
up to date, and where to send corrections when a screen changes after a release.

## Filters

The Shipments screen has a filter bar with the fields Carrier, Status and Date range.
Type a carrier name into the Carrier field, pick one or more values in the Status menu,
then click the Apply button on the right of the filter bar to run the filter. The Clear
link next to it empties every field of the filter bar at once.

## Exports

The Export button at the top right of the Shipments screen opens the Export dialog. The
dialog has two tabs, CSV and PDF; on the CSV tab the Delimiter field picks the separator,
and the Download button at the bottom of the dialog saves the file to your computer.

## Retention

Shipment records are kept for seven years, after which the nightly archive job moves them
to cold storage and removes them from search. The period follows the statutory limit for
commercial records, and legal holds suspend it for the shipments they name until released.
"""


@pytest.fixture
def guide(db: None) -> Document:
    return ingested_document(GUIDE)


def test_ready_document_has_exact_chunks_and_index_stamp(guide: Document) -> None:
    chunks = list(guide.chunks.order_by("ordinal"))
    assert guide.chunk_count == len(chunks) >= 3
    assert guide.token_total == sum(c.tokens for c in chunks)
    assert guide.token_max == max(c.tokens for c in chunks) <= 200
    for chunk in chunks:
        assert chunk.content == guide.canonical_text[chunk.start : chunk.end]
        assert chunk.text.endswith(chunk.content)
        assert chunk.acl == ["everyone"]
        assert len(chunk.embedding) == 384
    version = current_index_version()
    assert (guide.embedding_model, guide.embedding_dimensions) == (version.embedding_model, 384)
    assert (guide.pipeline_version, guide.extractor_version) == (version.pipeline_version, version.extractor_version)
    assert not document_is_stale(guide)
    labels = {c.breadcrumb for c in chunks}
    assert any(label.endswith("Filters") for label in labels)
    assert any(c.kind == "note" for c in chunks)


def test_each_stage_s_time_is_stored_and_shown_in_the_admin(guide: Document, people: dict[str, Any],
                                                            client: Client) -> None:
    stages = guide.stage_seconds
    assert set(stages) == set(STAGES) == {"extract", "chunk", "tokens", "classify", "embed", "write"}
    assert all(seconds >= 0 for seconds in stages.values()) and stages["embed"] > 0
    Document.objects.filter(pk=guide.pk).update(stage_seconds={**stages, "embed": 12.5})  # a slow one shows
    client.force_login(people["admin"])
    total = f"took {sum({**stages, 'embed': 12.5}.values()):.1f} s"
    assert total in client.get("/admin/kb/document/").content.decode()  # the list: the total, on hover
    page = client.get(f"/admin/kb/document/{guide.pk}/change/").content.decode()
    assert "Time to index" in page and "chunk" in page and "embed 12.50" in page


def test_screen_and_concept_chunks_are_told_apart(guide: Document) -> None:
    by_section = {c.breadcrumb.rsplit(" > ", 1)[-1]: c.audience for c in guide.chunks.all()}
    assert by_section.get("Exports") == "screen"
    assert by_section.get("Retention") == "concept"


def test_document_default_audience_wins(db: None) -> None:
    document = uploaded_document(GUIDE, audience_default="concept")
    ingest(document.pk)
    assert set(document.chunks.values_list("audience", flat=True)) == {"concept"}


def test_same_content_twice_is_a_noop(guide: Document) -> None:
    data = GUIDE.encode()
    result = document_upload(name="copy.md", stream=io.BytesIO(data), size=len(data), enqueue=False)
    assert (result.document.pk, result.created, result.queued) == (guide.pk, False, False)
    assert ingest(guide.pk) == Document.Status.READY  # already done: claiming it again does nothing
    assert Document.objects.get(pk=guide.pk).attempts == 1


def test_new_version_replaces_chunks_and_keeps_unchanged_ids(guide: Document) -> None:
    before = {c.breadcrumb: c.stable_id for c in guide.chunks.all()}
    changed = GUIDE.replace("seven years", "ten years")
    again = uploaded_document(changed)
    assert again.pk == guide.pk and again.status == Document.Status.QUEUED
    assert Chunk.objects.filter(document=guide).count() == guide.chunk_count  # old chunks still searchable
    ingest(guide.pk)
    after = {c.breadcrumb: c.stable_id for c in Chunk.objects.filter(document=guide)}
    retention = next(label for label in after if label.endswith("Retention"))
    filters = next(label for label in after if label.endswith("Filters"))
    assert after[filters] == before[filters]
    assert after[retention] != before[retention]
    assert Chunk.objects.filter(document=guide, content__contains="ten years").exists()
    assert not Chunk.objects.filter(document=guide, content__contains="seven years").exists()


def test_a_broken_file_fails_alone_with_its_reason(db: None, tmp_path: Path) -> None:
    (tmp_path / "good.md").write_text(GUIDE)
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.7\n" + b"\x00garbage" * 50)
    (tmp_path / "notes.exe").write_bytes(b"MZ\x90\x00")
    summary = ingest_paths([tmp_path], sync=True)
    assert [Path(n).name for n in summary.ready] == ["good.md"]
    failures = "\n".join(summary.failed)
    assert "broken.pdf" in failures and "stage: extracting" in failures
    assert "notes.exe" in failures and "not supported" in failures
    broken = Document.objects.get(filename="broken.pdf")
    assert broken.status == Document.Status.FAILED
    assert broken.failed_stage == Document.Status.EXTRACTING
    assert broken.failure_reason
    assert not broken.chunks.exists()


def test_mislabelled_and_oversized_uploads_are_rejected_before_storing(db: None, settings: Any) -> None:
    with pytest.raises(UploadRejected, match="scan.pdf"):
        uploaded_document("just text, not a PDF", name="scan.pdf")
    settings.KB_MAX_UPLOAD_MB = 1
    big = io.BytesIO(b"x")
    with pytest.raises(UploadRejected, match="limit is 1 MB"):
        document_upload(name="huge.md", stream=big, size=5 * 1024 * 1024, enqueue=False)
    assert not Document.objects.exists()


def test_a_failed_document_can_be_retried(db: None) -> None:
    document = uploaded_document(b"%PDF-1.4\n%%EOF garbage", name="bad.pdf")
    assert ingest(document.pk) == Document.Status.FAILED
    reason = Document.objects.get(pk=document.pk).failure_reason
    assert ingest(document.pk) == Document.Status.FAILED  # failed is retryable: it ran again
    document.refresh_from_db()
    assert document.attempts == 2 and document.failure_reason == reason


def test_a_worker_that_died_mid_way_leaves_it_retryable_not_half_indexed(guide: Document, settings: Any) -> None:
    Document.objects.filter(pk=guide.pk).update(status=Document.Status.EMBEDDING)
    assert ingest(guide.pk) == Document.Status.EMBEDDING  # a live worker holds it: hands off
    assert Chunk.objects.filter(document=guide).count() == guide.chunk_count
    settings.KB_INGEST_LEASE_SECONDS = 0  # the lease ran out: its worker is gone
    assert ingest(guide.pk) == Document.Status.READY


def test_access_changes_reach_the_chunks_without_reembedding(guide: Document, people: dict[str, Any]) -> None:
    vectors = list(guide.chunks.values_list("embedding", flat=True))
    hr = people["groups"]["hr"]
    document_set_access(document=guide, inherit=False, public=False, groups=[hr], users=[people["bob"]])
    expected = sorted([f"g:{hr.pk}", f"u:{people['bob'].pk}"])
    assert set(tuple(acl) for acl in guide.chunks.values_list("acl", flat=True)) == {tuple(expected)}
    assert [list(v) for v in guide.chunks.values_list("embedding", flat=True)] == [list(v) for v in vectors]


def test_folder_access_is_inherited_and_kept_in_sync(db: None, people: dict[str, Any]) -> None:
    folder = Folder.objects.create(name="finance", public=False)
    folder_set_access(folder=folder, public=False, groups=[people["groups"]["finance"]])
    document = uploaded_document(GUIDE, folder=folder)
    ingest(document.pk)
    finance = f"g:{people['groups']['finance'].pk}"
    assert set(Chunk.objects.filter(document=document).values_list("acl", flat=True)[0]) == {finance}
    folder_set_access(folder=folder, public=True)
    assert Chunk.objects.filter(document=document).values_list("acl", flat=True)[0] == ["everyone"]


def test_delete_removes_chunks_and_file(guide: Document) -> None:
    storage, name = guide.file.storage, guide.file.name
    assert storage.exists(name)
    document_delete(document=guide)
    assert not Chunk.objects.filter(document_id=guide.pk).exists()
    # the file goes after commit; in a test transaction run the hooks by hand
    assert not Document.objects.filter(pk=guide.pk).exists()


def test_documents_from_another_pipeline_version_are_stale(guide: Document) -> None:
    assert guide not in documents_stale()
    Document.objects.filter(pk=guide.pk).update(pipeline_version=0)
    assert list(documents_stale()) == [guide]


def test_ingest_command_sync_reports_ready_and_failed(db: None, people: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "runbook.md").write_text(GUIDE.replace("Shipments guide", "Runbook"))
    (tmp_path / "broken.docx").write_bytes(b"PK\x03\x04 not really a zip")
    out, err = StringIO(), StringIO()
    with pytest.raises(CommandError, match="1 of 2 file"):
        call_command("ingest", str(tmp_path), "--sync", "--folder", "ops", "--groups", "engineering",
                     stdout=out, stderr=err)
    assert "1 ready" in err.getvalue() and "broken.docx" in err.getvalue()
    runbook = Document.objects.get(filename="runbook.md")
    assert runbook.status == Document.Status.READY and runbook.folder.name == "ops"
    assert runbook.acl == [f"g:{people['groups']['engineering'].pk}"]


def test_ingest_command_rejects_unknown_groups(db: None, tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\ntext")
    with pytest.raises(CommandError, match="unknown group or user: nosuchgroup"):
        call_command("ingest", str(tmp_path), "--sync", "--groups", "nosuchgroup")


def test_admin_shows_badges_and_retries_failed_documents(db: None, people: dict[str, Any], client: Client,
                                                         django_capture_on_commit_callbacks: Any) -> None:
    good = uploaded_document(GUIDE)
    ingest(good.pk)
    bad = uploaded_document(b"%PDF-1.4 broken", name="bad.pdf")
    ingest(bad.pk)
    client.force_login(people["admin"])
    page = client.get("/admin/kb/document/")
    assert b"kb-current" in page.content and b"While extracting: " in page.content
    Document.objects.filter(pk=good.pk).update(pipeline_version=0)
    assert b"kb-stale" in client.get("/admin/kb/document/").content
    with django_capture_on_commit_callbacks() as callbacks:
        client.post("/admin/kb/document/", {"action": "retry_ingest", "_selected_action": [bad.pk, good.pk]})
    assert len(callbacks) == 1
    assert Document.objects.get(pk=bad.pk).status == Document.Status.QUEUED
    assert Document.objects.get(pk=good.pk).status == Document.Status.READY


def test_staff_who_are_not_superusers_list_only_visible_documents(db: None, people: dict[str, Any], client: Client) -> None:
    from django.contrib.auth.models import Permission

    secret = uploaded_document(GUIDE, name="hr.md", title="Salary bands", public=False, groups=[people["groups"]["hr"]])
    uploaded_document(GUIDE.replace("guide", "notes"), name="open.md", title="Depot opening hours")
    sam = people["sam"]
    sam.is_staff = True
    sam.save()
    sam.user_permissions.add(Permission.objects.get(codename="view_document"))
    client.force_login(sam)
    page = client.get("/admin/kb/document/").content.decode()
    assert "Depot opening hours" in page and "Salary bands" not in page
    assert client.get(f"/admin/kb/document/{secret.pk}/change/").status_code in (302, 404)


def test_a_new_model_name_makes_documents_stale_and_reindex_stale_makes_them_current(
    db: None, people: dict[str, Any], client: Client, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    document = uploaded_document(GUIDE)
    ingest(document.pk)
    client.force_login(people["admin"])
    page = client.get("/admin/kb/document/").content.decode()
    assert "Re-index 0 out-of-date documents" in page and "re-ranking: off · passage-level matching: on (top 20)" in page
    settings.KB_EMBEDDING_MODEL = "another-model"
    page = client.get("/admin/kb/document/").content.decode()
    assert "kb-stale" in page and "Re-index 1 out-of-date document<" in page
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post("/admin/kb/document/reindex-stale/")
    assert response.status_code == 302 and len(callbacks) == 1
    assert Document.objects.get(pk=document.pk).status == Document.Status.QUEUED
    ingest(document.pk)
    document.refresh_from_db()
    assert document.embedding_model == "another-model" and not document_is_stale(document)
    assert "Re-index 0 out-of-date documents" in client.get("/admin/kb/document/").content.decode()


def test_reindex_stale_needs_post_and_staff(db: None, people: dict[str, Any], client: Client) -> None:
    client.force_login(people["alice"])
    assert client.post("/admin/kb/document/reindex-stale/").status_code == 302  # to the admin login
    client.force_login(people["admin"])
    assert client.get("/admin/kb/document/reindex-stale/").status_code == 403


def test_embedding_reports_progress_as_it_goes(db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from kb.library.ingest import pipeline

    seen: list[tuple[str, int, int]] = []

    def record(document_id: int) -> None:  # what an open library page would be told, read from the DB
        row = Document.objects.values_list("status", "progress_done", "progress_total").get(pk=document_id)
        seen.append(row)

    monkeypatch.setattr(pipeline, "PROGRESS_EVERY", 1)
    monkeypatch.setattr(pipeline, "publish_document_status", record)
    document = uploaded_document(GUIDE)
    assert ingest(document.pk) == Document.Status.READY
    document.refresh_from_db()
    total = document.chunk_count
    embedding = [(done, of) for status, done, of in seen if status == Document.Status.EMBEDDING]
    assert embedding[0] == (0, total) and embedding[-1] == (total, total)
    assert [done for done, _ in embedding] == sorted(done for done, _ in embedding)
    assert len({done for done, _ in embedding}) == total + 1  # 0, 1, ..., total
    assert seen[-1][0] == Document.Status.READY


def test_stale_documents_are_re_indexed_in_the_background_a_batch_at_a_time_behind_other_work(
    db: None, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    """An upgrade's index format reaches every document without an admin: beat's kb.refresh_stale queues a batch
    of stale ones, oldest index first, only while nothing else waits to be indexed; a re-index makes them current."""
    from kb.library.tasks import refresh_stale

    documents = [ingested_document(GUIDE.replace("Shipments", f"Shipments {n}"), name=f"g{n}.md") for n in range(3)]
    Document.objects.update(late_version=1)  # indexed in the late stage's format before
    Document.objects.filter(pk=documents[2].pk).update(indexed_at=documents[0].indexed_at.replace(year=2020))
    settings.KB_REINDEX_STALE_BATCH = 2
    busy = uploaded_document(GUIDE.replace("Shipments", "Queued"), name="queued.md")  # an upload waits to be indexed
    assert refresh_stale() == 0 and documents_stale().count() == 3
    ingest(busy.pk)
    with django_capture_on_commit_callbacks() as callbacks:
        assert refresh_stale() == 2
    assert len(callbacks) == 2  # one job each, sent once the transaction commits
    queued = set(Document.objects.filter(status=Document.Status.QUEUED).values_list("pk", flat=True))
    assert queued == {documents[2].pk, documents[0].pk}  # the longest-indexed first
    assert refresh_stale() == 0  # while those are indexed, nothing more
    for pk in queued:
        ingest(pk)
    assert documents_stale().count() == 1 and refresh_stale() == 1
    ingest(documents[1].pk)
    assert documents_stale().count() == 0 and refresh_stale() == 0
    settings.KB_REINDEX_STALE_BATCH = 0
    Document.objects.update(late_version=1)
    assert refresh_stale() == 0  # off: only the admin's "Re-index stale"
