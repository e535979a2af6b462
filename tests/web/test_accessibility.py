"""Issue 49 item 8 in Chromium against the session's Daphne: axe-core (axe-playwright-python) finds no serious or
critical violation on any page of any role, at 1280×900 and at phone width (390×844); the document viewer takes
keyboard focus to the highlighted passage and leads back to the answer; one date format per locale, the same from
Django's templates and from the scripts (KB.formatDate in chat/static/chat/dom.js).

One browser, one signed-in context per role; each page is checked at both sizes in place (set_viewport_size)."""

from __future__ import annotations

from datetime import UTC, datetime
from importlib.resources import files
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.web.conftest import assert_fits_width, screenshot
from tests.web.test_browser_ask import answered
from tests.web.test_browser_judgements import refused

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

VIEWPORTS = [(1280, 900), (390, 844)]
BLOCKING = {"serious", "critical"}
AXE_SCRIPT = files("axe_playwright_python").joinpath("axe.min.js").read_text()  # axe-core, as the package bundles it

OFFICE_QUESTION = "When does the office open on weekdays?"
FAR_QUESTION = "Which dialog exports the shipments?"

# What a page must have finished drawing before it is checked (scripts fill the Ask page and the review desk).
READY = {
    "ask": "#ask[data-state=connected]",
    "answer": "#ask[data-state=connected] #answer .cite-chip",
    "refusal": "#ask[data-state=connected] #answer .answer-refused",
    "review": "#review-list .review-item",
    "viewer": "#doc-text mark.hl-focus",
}


def axe_page(open_page: Any, user: Any = None, **options: Any) -> Any:
    """A page (signed in as `user`; `options` as for open_page) with axe-core in every document it opens."""
    page = open_page(user, **options)
    page.context.add_init_script(AXE_SCRIPT)
    return page


def violations(page: Any) -> list[str]:
    """The serious and critical axe-core violations on the page as drawn now, one line per element."""
    found = page.evaluate("axe.run(document, {resultTypes: ['violations']})")["violations"]
    return [
        f"{violation['id']} ({violation['impact']}): {' '.join(map(str, node['target']))} {node['html'][:140]}"
        for violation in found if violation["impact"] in BLOCKING
        for node in violation["nodes"]
    ]


def check(page: Any, role: str, name: str, url: str, ready: str | None = None, status: int = 200) -> list[str]:
    """`url` opened once, then checked at each size; the problems, each naming the role, size and page."""
    page.set_viewport_size({"width": VIEWPORTS[0][0], "height": VIEWPORTS[0][1]})
    response = page.goto(url)
    assert response is not None and response.status == status, f"{role} {url}: {response and response.status}"
    if ready:
        page.wait_for_selector(READY.get(ready, ready))
    return check_here(page, role, f"{name} ({url})")


def check_here(page: Any, role: str, name: str) -> list[str]:
    """The page as it is now, checked at each size."""
    problems = []
    for width, height in VIEWPORTS:
        page.set_viewport_size({"width": width, "height": height})
        problems += [f"{role} {width}x{height} {name}: {line}" for line in violations(page)]
    return problems


def served(page: Any, path: str, status: int, html: str) -> None:
    """`path` answered with `html` (a page the server renders only when it fails, 500.html and 503.html)."""
    page.route(f"**{path}", lambda route: route.fulfill(status=status, body=html, content_type="text/html"))


def test_no_serious_or_critical_axe_violation_on_any_page_of_any_role(
    open_page: Any, people: dict[str, Any], library_docs: dict[str, Any], settings: Any
) -> None:
    from django.template.loader import render_to_string

    from kb.library.models import Source

    answer = answered(people["alice"], OFFICE_QUESTION)
    citation = answer.citations.order_by("number").first()
    assert citation is not None, answer.text
    refusal = refused(people["alice"], FAR_QUESTION, settings)
    Source.objects.create(name="handbook", kind="folder", location="/srv/handbook", folder=library_docs["everyone"])
    public = library_docs["public"]
    problems: list[str] = []

    visitor = axe_page(open_page)
    problems += check(visitor, "visitor", "sign-in", "/accounts/login/", "#id_username")
    visitor.fill("#id_username", "alice")
    visitor.fill("#id_password", "not her password")
    visitor.click("button[type=submit]")
    visitor.wait_for_selector(".alert-error")
    problems += check_here(visitor, "visitor", "sign-in (wrong password)")
    problems += check(visitor, "visitor", "404", "/no-such-page/", status=404)
    visitor.goto("/accounts/login/")
    visitor.context.clear_cookies()  # the form's token no longer matches: Django's CSRF failure page
    visitor.fill("#id_username", "alice")
    visitor.fill("#id_password", "alice")
    visitor.click("button[type=submit]")
    visitor.wait_for_selector("text=This page has expired")
    problems += check_here(visitor, "visitor", "403 CSRF")
    served(visitor, "/failed-500", 500, render_to_string("500.html", {"reference": "5f3a9c01"}))
    problems += check(visitor, "visitor", "500", "/failed-500", status=500)
    served(visitor, "/failed-503", 503, render_to_string("503.html", {"message": "The database is being upgraded."}))
    problems += check(visitor, "visitor", "503", "/failed-503", status=503)

    employee = axe_page(open_page, people["alice"])
    problems += check(employee, "employee", "Ask (empty)", "/", "ask")
    problems += check(employee, "employee", "Ask (answer)", f"/?c={answer.conversation_id}", "answer")
    employee.get_by_role("button", name="Not helpful").first.click()
    employee.wait_for_selector(".feedback-panel")
    problems += check_here(employee, "employee", "Ask (answer, feedback open)")
    problems += check(employee, "employee", "Ask (refusal)", f"/?c={refusal.conversation_id}", "refusal")
    problems += check(employee, "employee", "Library", "/library/")
    employee.click(".usermenu summary")
    employee.wait_for_selector(".usermenu-panel", state="visible")
    problems += check_here(employee, "employee", "user menu (open)")
    problems += check(employee, "employee", "viewer (citation)", citation.link, "viewer")
    problems += check(employee, "employee", "404", "/documents/999999/", status=404)

    reviewer = axe_page(open_page, people["sam"])
    problems += check(reviewer, "reviewer", "Ask (empty)", "/", "ask")
    problems += check(reviewer, "reviewer", "review desk", "/review/", "review")
    problems += check(reviewer, "reviewer", "review desk (flagged)", "/review/?filter=flagged")
    problems += check(reviewer, "reviewer", "Library", "/library/")

    admin = axe_page(open_page, people["admin"])
    for name, url, ready in [
        ("Ask (empty)", "/", "ask"),
        ("Library", "/library/", None),
        ("viewer", f"/documents/{public.pk}/", None),
        ("content gaps", "/gaps/", None),
        ("admin index", "/admin/", None),
        ("documents", "/admin/kb/document/", None),
        ("document", f"/admin/kb/document/{public.pk}/change/", None),
        ("sources", "/admin/kb/source/", None),
        ("add source", "/admin/kb/source/add/", None),
        ("folders", "/admin/kb/folder/", None),
        ("folder", f"/admin/kb/folder/{library_docs['everyone'].pk}/change/", None),
        ("users", "/admin/auth/user/", None),
    ]:
        problems += check(admin, "admin", name, url, ready)

    assert problems == [], f"{len(problems)} serious or critical axe-core violations:\n" + "\n".join(problems)


def test_the_viewer_takes_focus_to_the_passage_and_leads_back_to_the_answer(
    open_page: Any, people: dict[str, Any], library_docs: dict[str, Any]
) -> None:
    """Enter on a citation chip: focus lands on the quoted sentence; "Back to the answer" returns to the
    conversation (at the answer, when the link names it); opened from elsewhere, there is no such link."""
    answer = answered(people["alice"], OFFICE_QUESTION)
    page = open_page(people["alice"])
    page.goto(f"/?c={answer.conversation_id}")
    chip = page.locator("#answer .cite-chip").first
    chip.wait_for()
    chip.focus()
    page.keyboard.press("Enter")
    page.wait_for_selector("#doc-text mark.hl-focus")
    page.wait_for_function("() => document.activeElement && document.activeElement.matches('#doc-text mark.hl-focus')")
    assert page.evaluate("document.activeElement.textContent") == "The office opens at 8 and closes at 18 on weekdays."

    back = page.get_by_role("link", name="Back to the answer")
    assert back.is_visible()
    # The chip's link names its answer (`&answer=ID`): back leads to that answer in the conversation.
    assert back.get_attribute("href") == f"/?c={answer.conversation_id}#answer-{answer.pk}"
    page.set_viewport_size({"width": 390, "height": 844})
    assert back.is_visible()
    assert_fits_width(page)
    screenshot(page, "viewer-back-to-the-answer-phone")
    back.focus()
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/?c={answer.conversation_id}*")
    page.wait_for_selector("#ask[data-state=connected] #answer .cite-chip")
    # ...with the focus on that answer, and the address back to the conversation's own.
    page.wait_for_function("id => document.activeElement && document.activeElement.dataset.message === String(id)",
                           arg=answer.pk)
    assert page.evaluate("location.hash") == ""

    # Opened from elsewhere (a link pasted in a chat, a bookmark): no answer to go back to.
    page.goto("/library/")
    page.goto(answer.citations.order_by("number").first().link)
    page.wait_for_selector("#doc-text mark.hl-focus")
    assert page.locator("#passage-back").is_hidden()


# The focused element's ring: its colour against the top bar's white, and its width in pixels.
FOCUS_RING = """() => {
  const el = document.activeElement, style = getComputedStyle(el);
  const rgb = style.outlineColor.match(/[\\d.]+/g).map(Number);
  const lin = c => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
  const luminance = 0.2126 * lin(rgb[0]) + 0.7152 * lin(rgb[1]) + 0.0722 * lin(rgb[2]);
  const alpha = rgb.length > 3 ? rgb[3] : 1;
  return {visible: el.matches(":focus-visible"), style: style.outlineStyle, width: parseFloat(style.outlineWidth),
          alpha: alpha, contrast: 1.05 / (luminance + 0.05)};
}"""


def test_signing_in_by_keyboard_lands_in_the_question_box_and_the_focus_ring_shows(
    open_page: Any, people: dict[str, Any], settings: Any
) -> None:
    """WCAG 1.4.11: the keyboard's focus ring is opaque, at least 2 px, and 3:1 against the white it sits on. Signed
    in by keyboard alone, the reader can type the question straight away."""
    from django.conf import global_settings

    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS  # the server's: it checks the password
    people["carol"].set_password("carol")
    people["carol"].save()
    page = open_page()
    page.goto("/accounts/login/")
    page.wait_for_function("() => document.activeElement.id === 'id_username'")  # autofocus
    page.keyboard.press("Shift+Tab")  # back to the name of the product, on the white top bar
    assert page.evaluate("document.activeElement.className") == "brand"
    ring = page.evaluate(FOCUS_RING)
    assert ring["visible"] and ring["style"] == "solid" and ring["width"] >= 2 and ring["alpha"] == 1, ring
    assert ring["contrast"] >= 3, ring

    page.keyboard.press("Tab")
    page.keyboard.type("carol")
    page.keyboard.press("Tab")
    page.keyboard.type("carol")
    page.keyboard.press("Enter")
    page.wait_for_url(lambda url: urlsplit(url).path == "/")
    page.wait_for_function("() => document.activeElement && document.activeElement.id === 'question'")


def test_dates_read_the_same_from_templates_and_from_scripts(open_page: Any, people: dict[str, Any]) -> None:
    """KB.formatDate (the scripts) writes a date, and a date with its time, exactly as Django's DATE_FORMAT and
    DATETIME_FORMAT do in the same language (kb/formats), in every language of the interface."""
    from django.conf import settings
    from django.utils import formats, timezone, translation

    moments = [datetime(2026, 12, 6, 3, 18, tzinfo=UTC), datetime(2026, 5, 21, 15, 4, tzinfo=UTC),
               datetime(2026, 9, 7, 0, 5, tzinfo=UTC)]
    page = open_page(people["carol"])
    page.goto("/")
    page.wait_for_selector("#ask[data-state=connected]")
    assert page.evaluate("window.KB.timeZone()") == settings.TIME_ZONE  # the templates' zone
    for language, _ in settings.LANGUAGES:
        with translation.override(language):
            django = [[formats.date_format(timezone.localtime(m), "DATE_FORMAT"),
                       formats.date_format(timezone.localtime(m), "DATETIME_FORMAT")] for m in moments]
        scripts = page.evaluate(
            """([language, moments]) => {
              document.documentElement.lang = language;
              return moments.map(m => [window.KB.formatDate(m), window.KB.formatDate(m, {time: true})]);
            }""",
            [language, [m.isoformat() for m in moments]],
        )
        assert scripts == django, language
