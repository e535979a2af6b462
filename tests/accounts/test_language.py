"""The interface in the reader's language (issue 48 item 6): the browser's Accept-Language, a choice in the user
menu stored on the user (so it follows them to another session and browser), the language cookie for the pages
shown signed out; English when nothing supported is asked for. Dates and numbers follow the language too."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from django.utils import formats, translation

from accounts.language import UnknownLanguage, browser_language, user_language, user_language_set
from accounts.models import Profile
from kb.library.models import Document

pytestmark = pytest.mark.django_db

POLISH_BROWSER = "pl-PL,pl;q=0.9,en-US;q=0.6,en;q=0.5"


def signed_in(user: Any, **headers: str) -> Client:
    client = Client(**headers)
    client.force_login(user)
    return client


def page(client: Client, path: str) -> str:
    response = client.get(path)
    assert response.status_code == 200, (path, response.status_code)
    return response.content.decode()


def test_a_polish_browser_gets_polish_pages(people: dict[str, Any]) -> None:
    login = Client(HTTP_ACCEPT_LANGUAGE=POLISH_BROWSER).get("/accounts/login/")
    html = login.content.decode()
    assert '<html lang="pl">' in html and login["Content-Language"] == "pl" and "Accept-Language" in login["Vary"]
    assert ">Zaloguj się</button>" in html and '<label for="id_password">Hasło</label>' in html
    assert "Sign in" not in html

    alice = signed_in(people["alice"], HTTP_ACCEPT_LANGUAGE=POLISH_BROWSER)
    ask = page(alice, "/")
    assert '<html lang="pl">' in ask and "<h1 id=\"ask-title\">Zapytaj bazę wiedzy</h1>" in ask
    assert ">Biblioteka</a>" in ask and ">Wyloguj się</button>" in ask and 'placeholder="np. ' in ask
    assert '<script src="/jsi18n/" defer></script>' in ask  # the scripts' sentences come from the same catalog
    library = page(alice, "/library/")
    assert '<html lang="pl">' in library and "<h1>Biblioteka</h1>" in library and "Dokumenty, które możesz czytać." in library
    missing = Client(HTTP_ACCEPT_LANGUAGE=POLISH_BROWSER).get("/no-such-page/").content.decode()
    assert '<html lang="pl">' in missing and "Nie możemy znaleźć tej strony" in missing


@pytest.mark.parametrize(("accept", "lang", "words"), [
    ("de-DE,de;q=0.9", "de", "Die Wissensdatenbank fragen"),
    ("zh-CN,zh;q=0.9", "zh-hans", "向知识库提问"),
    ("fr-FR,fr;q=0.9", "en", "Ask the knowledge base"),  # not translated: English, as without the header
    ("", "en", "Ask the knowledge base"),
])
def test_each_language_or_english_when_none_supported_is_asked_for(
    people: dict[str, Any], accept: str, lang: str, words: str
) -> None:
    headers = {"HTTP_ACCEPT_LANGUAGE": accept} if accept else {}
    html = page(signed_in(people["carol"], **headers), "/")
    assert f'<html lang="{lang}">' in html and words in html


def test_the_scripts_catalog_is_in_the_readers_language(people: dict[str, Any]) -> None:
    polish = page(signed_in(people["alice"], HTTP_ACCEPT_LANGUAGE=POLISH_BROWSER), "/jsi18n/")
    english = page(signed_in(people["alice"]), "/jsi18n/")
    assert '"Sending\\u2026": "Wysy\\u0142anie\\u2026"' in polish  # the catalog is JSON: non-ASCII escaped
    assert "Wysy" not in english


def test_a_choice_in_the_user_menu_is_stored_on_the_user_and_follows_them(people: dict[str, Any]) -> None:
    alice = signed_in(people["alice"], HTTP_ACCEPT_LANGUAGE=POLISH_BROWSER)
    menu = page(alice, "/library/")
    assert '<select name="language" id="usermenu-language-select">' in menu
    assert '<option value="de" lang="de">Deutsch</option>' in menu and '<option value="pl" lang="pl" selected>polski</option>' in menu

    chosen = alice.post("/accounts/language", {"language": "de", "next": "/library/?folder=3"})
    assert chosen.status_code == 302 and chosen["Location"] == "/library/?folder=3"
    assert chosen.cookies[settings.LANGUAGE_COOKIE_NAME].value == "de"
    assert Profile.objects.get(user=people["alice"]).language == "de" and user_language(people["alice"]) == "de"
    assert "<h1>Bibliothek</h1>" in page(alice, "/library/")

    # Another session, on a browser that asks for Polish and holds no cookie: her choice wins.
    elsewhere = signed_in(people["alice"], HTTP_ACCEPT_LANGUAGE=POLISH_BROWSER)
    response = elsewhere.get("/")
    html = response.content.decode()
    assert '<html lang="de">' in html and "Die Wissensdatenbank fragen" in html
    # ...and that browser is told, so its sign-in page after a logout is in German too.
    assert response.cookies[settings.LANGUAGE_COOKIE_NAME].value == "de"
    elsewhere.post("/accounts/logout/")
    signed_out = page(elsewhere, "/accounts/login/")
    assert '<html lang="de">' in signed_out and ">Anmelden</button>" in signed_out

    # Others are unaffected.
    assert '<html lang="pl">' in page(signed_in(people["bob"], HTTP_ACCEPT_LANGUAGE=POLISH_BROWSER), "/")


def test_the_sign_in_page_has_the_language_menu_and_it_sets_the_cookie_only(people: dict[str, Any]) -> None:
    anonymous = Client()
    login = page(anonymous, "/accounts/login/")
    assert '<label for="page-language-select">Language</label>' in login
    response = anonymous.post("/accounts/language", {"language": "zh-hans", "next": "/accounts/login/"})
    assert response.status_code == 302 and response["Location"] == "/accounts/login/"
    assert '<html lang="zh-hans">' in page(anonymous, "/accounts/login/")
    assert not Profile.objects.exists()


def test_an_unknown_language_is_refused_and_next_never_leaves_the_site(people: dict[str, Any]) -> None:
    alice = signed_in(people["alice"])
    refused = alice.post("/accounts/language", {"language": "xx"})
    assert refused.status_code == 400 and "language: one of en, pl, de, zh-hans" in refused.content.decode()
    assert not Profile.objects.filter(user=people["alice"]).exists()
    away = alice.post("/accounts/language", {"language": "pl", "next": "https://evil.example/"})
    assert away.status_code == 302 and away["Location"] == "/"
    assert alice.get("/accounts/language").status_code == 405
    with pytest.raises(UnknownLanguage, match="one of en, pl, de, zh-hans"):
        user_language_set(user=people["alice"], language="klingon")


def test_the_browsers_language_is_read_as_django_reads_it() -> None:
    assert browser_language(cookie=None, accept=POLISH_BROWSER) == "pl"
    assert browser_language(cookie="de", accept=POLISH_BROWSER) == "de"  # the cookie first
    assert browser_language(cookie="xx", accept="fr, es;q=0.8, de;q=0.5") == "de"  # unsupported ones skipped
    assert browser_language(cookie=None, accept="*") == "en"


def test_dates_and_sizes_follow_the_language(people: dict[str, Any]) -> None:
    document = Document.objects.create(title="Spis", filename="spis.md", mime_type="text/plain", acl=["everyone"],
                                       status=Document.Status.READY, size=1536)
    with translation.override("pl"):
        polish_date = formats.date_format(document.updated_at, "DATE_FORMAT")
    with translation.override("en"):
        english_date = formats.date_format(document.updated_at, "DATE_FORMAT")
    assert polish_date != english_date
    polish = page(signed_in(people["carol"], HTTP_ACCEPT_LANGUAGE=POLISH_BROWSER), "/library/")
    assert f"Tekst · 1,5 KB · zaktualizowano {polish_date}" in polish
    english = page(signed_in(people["carol"]), "/library/")
    assert f"Text · 1.5 KB · updated {english_date}" in english
