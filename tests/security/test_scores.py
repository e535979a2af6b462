"""Raw scores built from corpus-wide word statistics reach only superusers (issue 11, item 8)."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

from django.core.management import call_command
from django.test import Client

from tests.chat.conftest import SHIPMENTS
from tests.factories import ingested_document


def test_search_hides_scores_computed_from_statistics_over_unreadable_chunks(people: dict[str, Any]) -> None:
    ingested_document(SHIPMENTS, "shipments.md")
    for name, raw in (("carol", False), ("admin", True)):
        client = Client()
        client.force_login(people[name])
        hits = client.get("/api/search", {"q": "export the shipments list as CSV"}).json()["hits"]
        assert hits
        assert all((h["score"] is not None) is raw and (h["late_score"] is not None) in (raw, False) for h in hits), name
        assert all(isinstance(h["distance"], float) for h in hits)
        out = json.loads(call_command("search", "export the shipments list", "--user", name, "--json", stdout=StringIO()))
        assert all((h["score"] is not None) is raw for h in out["hits"]), name
