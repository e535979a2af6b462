"""Issue 48 for the staff's pages and the APIs' sentences: the content-gaps report and the admin's own additions
in Polish for a reader who reads Polish (dates in the language's format, counts in its plural forms), and an
API's error detail in the caller's language while its status stays the machine's word. Real answer path."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.utils import formats, timezone, translation

from tests.chat.conftest import VAULT, VAULT_QUESTION
from tests.chat.review.test_gaps import answer, client_for
from tests.factories import ingested_document

pytestmark = pytest.mark.django_db

# English labels of chat/gaps.html and templates/admin/index.html: none may be left on the Polish pages.
ENGLISH = ["Content gaps", "Asked in the last", "Download CSV", "Show", "question", "questions", "topic", "since",
           "from", "person", "refused", "Nearest documents", "Questions", "readable by", "may read", "last asked",
           "Reports", "The answer may exist"]


def polish(user: Any) -> Client:
    client = client_for(user)
    client.cookies["django_language"] = "pl"
    return client


def visible_text(html: str) -> str:
    """The page's text and its titles and labels, without tags, scripts or the documents' own words."""
    html = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.S)
    attributes = " ".join(re.findall(r'(?:title|aria-label|placeholder)="([^"]*)"', html))
    return re.sub(r"<[^>]+>", " ", html) + " " + attributes


def english_left(text: str) -> list[str]:
    return [label for label in ENGLISH if re.search(rf"(?<![\w-]){re.escape(label)}(?![\w-])", text)]


def test_the_content_gaps_report_reads_in_polish(people: dict[str, Any], settings: Any) -> None:
    ingested_document(VAULT, "vault.md", public=False, groups=[people["groups"]["engineering"]])
    asked = answer(people["carol"], VAULT_QUESTION, settings=settings, refuse=True)
    assert asked.status == "refused"

    page = polish(people["admin"]).get("/gaps/?days=30")
    assert page.status_code == 200
    html = page.content.decode()
    assert '<html lang="pl">' in html
    text = visible_text(html).replace(VAULT_QUESTION, "")
    for polish_text in ("<h1>Luki w treści</h1>", "Zadane w ciągu ostatnich", "30 dni", "Pobierz CSV",
                        "Odpowiedź może istnieć w dokumentach, których pytający nie mogą czytać",
                        "1 pytanie", "w 1 temacie od", "od 1 osoby", "odmowa 1",
                        "1 dokument, którego nie możesz czytać, dostępny dla: engineering",
                        "może czytać jeden z nich: 0 z 1 pytającego"):
        assert polish_text in html, polish_text
    with translation.override("pl"):
        today = formats.date_format(timezone.now(), "DATE_FORMAT")
    with translation.override("en"):
        assert today != formats.date_format(timezone.now(), "DATE_FORMAT")  # "6 grudnia 2026", not "Dec. 6, 2026"
    assert f"ostatnio zadane {today}" in html
    assert english_left(text) == []

    index = visible_text(polish(people["admin"]).get("/admin/").content.decode())
    assert "Raporty" in index and "Luki w treści" in index and english_left(index) == []


def test_an_api_error_detail_is_in_the_callers_language(people: dict[str, Any]) -> None:
    client = client_for(people["carol"])
    english = client.get("/api/review/answers")
    assert english.status_code == 404 and english.json() == {"detail": "no such page"}
    for language, detail in (("pl", "nie ma takiej strony"), ("de", "diese Seite gibt es nicht"),
                             ("zh-CN", "没有这个页面")):
        response = client.get("/api/review/answers", HTTP_ACCEPT_LANGUAGE=language)
        assert response.status_code == 404 and response.json() == {"detail": detail}, language

    staff = people["alice"]
    staff.is_staff = True
    staff.save()
    refused = client_for(staff).post("/api/folders", {"name": "x"}, content_type="application/json",
                                     HTTP_ACCEPT_LANGUAGE="pl")
    assert refused.status_code == 403
    assert refused.json() == {"detail": "Do tego potrzebujesz uprawnienia kb.add_folder."}
