"""Headings are located once at ingest and stored; the document page reads them, never the extractor."""

from __future__ import annotations

import importlib
import re
from typing import Any

from django.apps import apps
from django.test import Client

from kb.library.ingest import headings
from kb.library.ingest.extract import Heading
from kb.library.models import Document
from tests.factories import ingested_document

GUIDE = """# Shipments guide

Intro text that sits before any section and says who keeps the guide up to date.

## Filters

The Shipments screen has a filter bar with the fields Carrier, Status and Date range.

Exports
-------

The Export button at the top right of the Shipments screen opens the Export dialog.

```
# a comment in code, not a heading
```
"""

TOC_LINK = re.compile(r'<li class="toc-l(\d)"><a href="#sec-(\d+)">([^<]*)</a></li>')
HEADING_ID = re.compile(r'<h\d class="doc-h doc-h\d" id="sec-(\d+)">')


def page(client: Client, document: Document) -> str:
    response = client.get(f"/documents/{document.pk}/")
    assert response.status_code == 200
    return response.content.decode()


def shown(html: str) -> tuple[list[tuple[int, int, str]], list[int]]:
    """The table of contents as (level, start, title), and the offsets of the headings in the text."""
    toc = [(int(level), int(start), title) for level, start, title in TOC_LINK.findall(html)]
    return toc, [int(start) for start in HEADING_ID.findall(html)]


def test_ingest_stores_the_headings_the_page_shows(db: None, people: dict[str, Any]) -> None:
    document = ingested_document(GUIDE)
    stored = headings.loaded(document.headings, len(document.canonical_text))
    assert [(h.level, h.title, h.start) for h in stored] == [
        (1, "Shipments guide", 0),
        (2, "Filters", GUIDE.index("## Filters")),
        (2, "Exports", GUIDE.index("Exports\n---")),
    ]
    assert stored[2].end == GUIDE.index("-------") + len("-------")
    client = Client()
    client.force_login(people["alice"])
    toc, anchors = shown(page(client, document))
    assert toc == [(h.level, h.start, h.title) for h in stored]
    assert anchors == [h.start for h in stored]


def test_the_page_uses_the_stored_headings_and_does_not_locate_them_again(db: None, people: dict[str, Any]) -> None:
    document = ingested_document(GUIDE)
    start = GUIDE.index("## Filters")
    only = Heading(level=1, title="Stored, not found", start=start, end=start + len("## Filters"))
    Document.objects.filter(pk=document.pk).update(headings=headings.stored([only]))
    client = Client()
    client.force_login(people["alice"])
    toc, anchors = shown(page(client, document))
    # Locating them in the text again would find three headings, titled as the text says.
    assert toc == [(1, start, "Stored, not found")]
    assert anchors == [start]


def test_stored_headings_that_do_not_fit_the_text_are_left_out() -> None:
    value = [
        {"level": 1, "title": "fits", "start": 0, "end": 5},
        {"level": 2, "title": "overlaps the previous one", "start": 3, "end": 8},
        {"level": 2, "title": "past the end", "start": 8, "end": 99},
        {"level": "x", "title": "malformed", "start": 6, "end": 7},
        "not a heading",
    ]
    assert headings.loaded(value, 10) == (Heading(level=1, title="fits", start=0, end=5),)
    assert headings.loaded(None, 10) == ()


def test_documents_indexed_before_the_migration_get_their_headings(db: None) -> None:
    document = ingested_document(GUIDE)
    pdf = Document.objects.create(title="scan", mime_type="application/pdf", canonical_text="# not a heading in a PDF\n")
    never_indexed = Document.objects.create(title="queued", mime_type="text/markdown")
    Document.objects.filter(pk=document.pk).update(headings=[])
    migration = importlib.import_module("kb.library.migrations.0006_document_headings")
    migration.locate_stored_headings(apps, None)
    document.refresh_from_db()
    assert document.headings == headings.stored(headings.locate(text=GUIDE, mime="text/markdown"))
    assert len(document.headings) == 3
    pdf.refresh_from_db()
    never_indexed.refresh_from_db()
    assert pdf.headings == [] and never_indexed.headings == []
