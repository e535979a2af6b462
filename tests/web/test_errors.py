"""The error pages in plain words (kb.errors): a server error shows a reference that the log has beside its
traceback, and a refused form (an expired page) says to reload it; neither shows the exception, the status code
or the word CSRF."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
from django.test import Client

from tests.web.crash_urls import SECRET

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.web.crash_urls")]

RAW = ("CSRF", "HTTP 500", "Internal Server Error", "Traceback", "RuntimeError", SECRET)


def logged_reference(caplog: Any) -> str:
    """The one record kb.errors wrote for the error, with its traceback; its reference."""
    records = [r for r in caplog.records if r.name == "kb.errors"]
    assert len(records) == 1, [r.getMessage() for r in caplog.records]
    assert records[0].exc_info and SECRET in str(records[0].exc_info[1])
    match = re.search(r"reference ([0-9a-f]{8})\b", records[0].getMessage())
    assert match, records[0].getMessage()
    return match.group(1)


def test_a_server_error_page_shows_the_reference_the_log_has(caplog: Any, people: dict[str, Any]) -> None:
    client = Client(raise_request_exception=False)
    client.force_login(people["alice"])
    with caplog.at_level(logging.INFO):
        response = client.get("/crash/")
    assert response.status_code == 500
    reference = logged_reference(caplog)
    # Logged once: Django's own "Internal Server Error" record would repeat the traceback without the reference.
    assert not [r for r in caplog.records if r.name == "django.request"]
    page = response.content.decode()
    assert f"<code>{reference}</code>" in page
    assert "Something went wrong on our side" in page
    assert not [word for word in RAW if word in page]


def test_an_api_server_error_carries_the_reference_in_its_detail(caplog: Any, people: dict[str, Any]) -> None:
    client = Client(raise_request_exception=False)
    client.force_login(people["alice"])
    with caplog.at_level(logging.INFO):
        response = client.post("/api/ask", {"question": "x"}, content_type="application/json")
    assert response.status_code == 500
    reference = logged_reference(caplog)
    body = response.json()
    assert body["reference"] == reference
    assert body["detail"] == ("Something went wrong on our side. If it keeps happening, give your administrator "
                              f"this reference: {reference}.")


def test_the_error_pages_are_in_the_readers_language(people: dict[str, Any]) -> None:
    client = Client(raise_request_exception=False, headers={"Accept-Language": "pl"})
    response = client.get("/crash/")
    page = response.content.decode()
    assert response.status_code == 500
    assert 'lang="pl"' in page
    assert "Something went wrong on our side" not in page
    assert re.search(r"podaj administratorowi ten identyfikator: <code>[0-9a-f]{8}</code>", page)
    expired = Client(enforce_csrf_checks=True, headers={"Accept-Language": "pl"}).post("/accounts/login/", {})
    assert "Ta strona wygasła" in expired.content.decode() and ">Odśwież stronę</a>" in expired.content.decode()


def test_an_expired_form_says_to_reload_the_page_it_came_from() -> None:
    client = Client(enforce_csrf_checks=True)
    response = client.post("/accounts/login/", {"username": "alice", "password": "alice"},
                           headers={"Referer": "http://testserver/accounts/login/?next=/library/"})
    assert response.status_code == 403
    page = response.content.decode()
    assert "This page has expired" in page
    assert '<a class="btn btn-primary" href="/accounts/login/?next=/library/">Reload the page</a>' in page
    assert not [word for word in RAW if word in page]
    assert "403" not in re.sub(r"<[^>]+>", " ", page)  # no status code in the text


@pytest.mark.parametrize(("referer", "back"), [
    ("https://evil.example/phish", "/"),  # another site: not a place to send the reader
    ("http://testserver//evil.example/x", "/evil.example/x"),  # never "//…", which a browser reads as a site
    ("", "/"),
])
def test_an_expired_form_links_back_only_to_this_site(referer: str, back: str) -> None:
    client = Client(enforce_csrf_checks=True)
    response = client.post("/accounts/login/", {}, headers={"Referer": referer} if referer else {})
    assert response.status_code == 403
    assert f'href="{back}">Reload the page' in response.content.decode()


def test_a_script_refused_for_an_expired_page_gets_the_sentence_in_json(people: dict[str, Any]) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(people["admin"])
    response = client.post("/library/upload", {}, headers={"Accept": "application/json"})
    assert response.status_code == 403
    assert response.json()["error"] == "This page has expired. Reload the page and try again."
