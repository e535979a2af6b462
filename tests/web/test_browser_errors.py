"""Errors that say what to do next, in Chromium against a real Daphne: a session that ended keeps the question
and offers to sign in again, after which the question is back in the box; a server error gives a plain
sentence and a reference that the server's log has. No raw error text reaches the page."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import OUTPUT, daphne
from tests.web.conftest import WATCH_PAGE, assert_clean, screenshot, session_cookie
from tests.web.crash_urls import SECRET

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

QUESTION = "How do I fail over the planning database?"
RAW = ("Failed to fetch", "HTTP 500", "HTTP 401", "HTTP 403", "CSRF", "Unauthorized", "Internal Server Error", SECRET)


def assert_no_raw_text(page: Any) -> None:
    text = page.inner_text("body")
    assert not [raw for raw in RAW if raw in text], text


def test_an_expired_session_keeps_the_question_and_brings_it_back_after_signing_in(
    open_page: Any, people: dict[str, Any]
) -> None:
    from django.contrib.auth.hashers import PBKDF2PasswordHasher
    from django.contrib.sessions.models import Session

    from chat.models import Message

    alice = people["alice"]
    alice.password = PBKDF2PasswordHasher().encode("alice", "testsalt1234", iterations=1000)  # the server's hasher
    alice.save(update_fields=["password"])
    page = open_page(alice)
    page.goto("/")
    page.wait_for_selector("#ask[data-state=connected]")

    # The session ends on the server (expired, or signed out elsewhere) while the page stays open.
    key = next(c["value"] for c in page.context.cookies() if c["name"] == "sessionid")
    assert Session.objects.filter(session_key=key).delete()[0] == 1
    page.get_by_label("Your question").fill(QUESTION)
    page.click("#ask-submit")

    notice = page.locator("#ask-notice")
    notice.get_by_role("link", name="Sign in again").wait_for()
    assert notice.inner_text().startswith("Your session has ended, so your question was not sent.")
    assert page.get_by_label("Your question").input_value() == QUESTION
    assert page.locator("#answer .turn").count() == 0  # nothing was asked
    assert page.locator("#answer .retry").count() == 0  # no "Try again" that cannot work
    assert notice.get_by_role("link").get_attribute("href") == "/accounts/login/?next=%2F"
    assert_no_raw_text(page)
    screenshot(page, "ask-session-ended")

    notice.get_by_role("link", name="Sign in again").click()
    page.wait_for_url("**/accounts/login/?next=%2F")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice")
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)
    page.wait_for_selector("#ask[data-state=connected]")
    assert page.get_by_label("Your question").input_value() == QUESTION  # back in the box, not sent
    assert not page.locator("#ask-submit").is_disabled()
    assert page.evaluate("window.sessionStorage.getItem('kb.ask.draft')") is None
    assert page.locator("#answer .turn").count() == 0
    assert not Message.objects.filter(conversation__owner=alice).exists()
    assert_clean(page)


def test_a_dropped_connection_reconnects_and_says_so(open_page: Any, people: dict[str, Any]) -> None:
    """The network drops the socket while an answer is being written: the page says so in its live region, tries
    again after a second, and clears the line once the server streams again. Only the first socket is cut (the
    browser's side, as a lost network does); the second reaches the real server."""
    from chat.services import question_ask

    asked = question_ask(user=people["alice"], question=QUESTION, enqueue=False)  # an answer still to come
    page = open_page(people["alice"])
    sockets: list[str] = []

    def network(ws: Any) -> None:
        sockets.append(ws.url)
        if len(sockets) == 1:
            ws.close(code=1011, reason="")
        else:
            ws.connect_to_server()

    page.route_web_socket(re.compile(r"/ws/chat/"), network)
    page.goto(f"/?c={asked.conversation.pk}")
    notice = page.locator("#ask-notice")
    notice.get_by_text("Connection lost — reconnecting…").wait_for()
    assert notice.get_attribute("role") == "status" and notice.get_attribute("aria-live") == "polite"
    assert_no_raw_text(page)
    page.wait_for_function("() => document.getElementById('ask-notice').textContent === ''")
    assert len(sockets) == 2
    assert page.locator(f"#answer .turn[data-message='{asked.answer.pk}']").count() == 1
    assert_clean(page)


@pytest.fixture(scope="module")
def crash_server(django_db_setup: None) -> Iterator[str]:
    """A Daphne whose /api/ask and /crash/ raise (tests/web/crash_urls.py); its log is OUTPUT/daphne-crash.log."""
    with daphne("crash", DJANGO_SETTINGS_MODULE="tests.web.crash_settings") as base:
        yield base


def test_a_server_error_gives_a_plain_sentence_and_a_reference_the_log_has(
    browser: Any, crash_server: str, people: dict[str, Any]
) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=crash_server)
    try:
        context.set_default_timeout(15_000)
        context.add_init_script(WATCH_PAGE)
        context.add_cookies([{"name": "sessionid", "value": session_cookie(people["alice"]), "url": crash_server}])
        page = context.new_page()
        log = OUTPUT / "daphne-crash.log"

        page.goto("/")
        page.wait_for_selector("#ask[data-state=connected]")
        page.get_by_label("Your question").fill(QUESTION)
        page.click("#ask-submit")
        error = page.locator("#answer .answer-error")
        error.wait_for()
        text = error.inner_text()
        match = re.search(r"give your administrator this reference: ([0-9a-f]{8})\.", text)
        assert text.startswith("The answer could not be finished. Something went wrong on our side.") and match, text
        assert f"reference {match.group(1)}: POST /api/ask" in log.read_text()
        assert error.get_by_role("button", name="Try again").is_visible()  # the session is fine: trying again can work
        assert_no_raw_text(page)
        screenshot(page, "ask-server-error")
        assert_clean(page)

        response = page.goto("/crash/")
        assert response is not None and response.status == 500
        reference = page.locator(".error-reference code").inner_text()
        assert re.fullmatch(r"[0-9a-f]{8}", reference)
        logged = log.read_text()
        assert f"reference {reference}: GET /crash/" in logged and SECRET in logged  # the traceback is in the log
        assert page.locator("h1").inner_text() == "Something went wrong on our side"
        assert_no_raw_text(page)
        assert "500" not in page.inner_text("body").replace(reference, "")
    finally:
        context.close()
