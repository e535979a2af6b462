"""A document's language: detected at indexing (per chunk where a document mixes languages), stored, listed and
filtered by the API, corrected in the admin, and the correction kept by re-indexing. Real pipeline and PostgreSQL."""

from __future__ import annotations

from typing import Any

from django.test import Client

from kb.library.ingest.pipeline import ingest
from kb.library.models import Chunk, Document
from tests.factories import ingested_document

GERMAN = ("# Drucker\n\n## Toner wechseln\n\nDer Toner des Druckers im dritten Stock wird vom Hausmeister gewechselt. "
          "Leere Kartuschen kommen in den grauen Behälter neben dem Aufzug.\n")
POLISH = ("# Drukarka\n\n## Wymiana tonera\n\nToner w drukarce na trzecim piętrze wymienia administrator budynku. "
          "Puste kasety należy wrzucać do szarego pojemnika obok windy.\n")
MIXED = (
    "# Travel\n\n## Booking\n\nBook every trip in the travel portal at least two weeks ahead and attach the "
    "approval of your manager. Economy class is the rule for flights shorter than six hours.\n\n"
    "## Expenses\n\nReceipts are uploaded to the expense tool within a month of the trip; the finance team "
    "reimburses them with the next salary payment, and asks about any receipt it cannot read.\n\n"
    "## Hinweise für das Büro in München\n\nIn München werden Bahnfahrten über die Reisestelle im zweiten Stock "
    "gebucht. Die Bahncard wird für alle Mitarbeitenden mit mehr als vier Dienstreisen im Jahr übernommen.\n"
)


def as_user(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_language_is_detected_and_a_mixed_document_is_read_per_chunk(db: None) -> None:
    german, mixed = ingested_document(GERMAN, "drucker.md"), ingested_document(MIXED, "travel.md")
    assert (german.language, german.language_detected, german.language_fixed) == ("de", "de", False)
    assert mixed.language == "en"
    by_heading = {c.breadcrumb.split(" > ")[-1]: (c.language, c.search_config) for c in mixed.chunks.all()}
    assert by_heading["Booking"] == ("en", "english")
    assert by_heading["Hinweise für das Büro in München"] == ("de", "german")


def test_the_api_lists_and_filters_by_language(people: dict[str, Any]) -> None:
    german, polish = ingested_document(GERMAN, "drucker.md"), ingested_document(POLISH, "drukarka.md")
    client = as_user(people["carol"])
    listed = client.get("/api/documents?language=pl").json()
    assert [d["id"] for d in listed["items"]] == [polish.pk] and listed["items"][0]["language"] == "pl"
    assert [d["id"] for d in client.get("/api/documents?language=de").json()["items"]] == [german.pk]
    assert client.get("/api/documents?language=xx").json()["count"] == 0
    assert client.get("/api/documents?language=Deutsch").status_code == 422


def test_an_admins_language_is_kept_by_re_indexing(people: dict[str, Any]) -> None:
    document = ingested_document(POLISH, "drukarka.md")
    client = as_user(people["admin"])
    page = client.get(f"/admin/kb/document/{document.pk}/change/")
    assert page.status_code == 200 and 'name="language"' in page.content.decode()
    form = {"title": document.title, "audience_default": "", "language": "cs", "inherit_access": "on",
            "public": "on"}
    response = client.post(f"/admin/kb/document/{document.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    document.refresh_from_db()
    assert document.language == "cs" and document.language_fixed
    assert ingest(document.pk) == Document.Status.READY
    document.refresh_from_db()
    assert (document.language, document.language_detected, document.language_fixed) == ("cs", "pl", True)
    assert set(Chunk.objects.filter(document=document).values_list("language", flat=True)) == {"cs"}


def test_staff_without_change_permission_cannot_set_the_language(people: dict[str, Any]) -> None:
    document = ingested_document(GERMAN, "drucker.md")
    staff = people["sam"]
    staff.is_staff = True
    staff.save()
    response = as_user(staff).post(f"/admin/kb/document/{document.pk}/change/", {"language": "fr"})
    assert response.status_code in (302, 403)
    document.refresh_from_db()
    assert document.language == "de" and not document.language_fixed


def test_the_library_and_the_viewer_show_the_language(people: dict[str, Any]) -> None:
    document = ingested_document(POLISH, "drukarka.md")
    client = as_user(people["carol"])
    library = client.get("/library/").content.decode()
    assert 'data-role="language">PL</abbr>' in library
    viewer = client.get(f"/documents/{document.pk}/").content.decode()
    assert 'data-role="language">PL</span>' in viewer and 'lang="pl"' in viewer


def test_a_code_listing_is_read_as_english_not_as_a_language_of_its_own(db: None) -> None:
    """The detector labels markup and code "zxx" (no linguistic content): it was stored as a language, put the
    listing in the multilingual space and counted its budget in e5's tokens. It is read as English instead."""
    lines = "\n".join(f"<string>-Drefine.o{n}=x{n * 7}</string>" for n in range(40))
    document = ingested_document(f"# Running\n\n## Options\n\n```\n{lines}\n```\n", "running.md")
    assert document.language == "en"
    chunks = Chunk.objects.filter(document=document)
    assert chunks.count() >= 2 and not chunks.filter(multilingual_embedding__isnull=False).exists()
    assert set(chunks.values_list("language", flat=True)) == {"en"}
