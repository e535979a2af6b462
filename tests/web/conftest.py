"""Browser-test fixtures: Debian's Chromium driven through the pip `playwright` package against the session's
real Daphne (tests.conftest.web_server), documents built by the real pipeline."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import OUTPUT
from tests.factories import ingested_document

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
SCREENSHOTS = OUTPUT / "web"

# What the browser must never report on our pages: a blocked inline script or style means a
# template or script broke the Content-Security-Policy (or something was injected).
WATCH_PAGE = """
window.__kb = { csp: [], errors: [] };
document.addEventListener("securitypolicyviolation", function (e) {
  window.__kb.csp.push(e.violatedDirective + " " + (e.blockedURI || "inline"));
});
window.addEventListener("error", function (e) { window.__kb.errors.push(String(e.message)); });
"""


# --------------------------------------------------------------------------- documents


@pytest.fixture
def library_docs(people: dict[str, Any]) -> dict[str, Any]:
    """A public folder and a finance-only folder, one ready document in each."""
    from kb.library.models import Folder
    from kb.library.services import folder_set_access

    everyone = Folder.objects.create(name="everyone")
    finance = Folder.objects.create(name="finance")
    folder_set_access(folder=everyone, public=True)
    folder_set_access(folder=finance, public=False, groups=[people["groups"]["finance"]])
    public = ingested_document(
        "# Office guide\n\n## Opening hours\n\nThe office opens at 8 and closes at 18 on weekdays.\n",
        "office-guide.md", folder=everyone,
    )
    secret = ingested_document(
        "# Payroll secrets\n\n## Bonus pool\n\nThe confidential bonus pool for this year is 4.2 million.\n",
        "payroll-secrets.md", folder=finance,
    )
    return {"everyone": everyone, "finance": finance, "public": public, "secret": secret}


# --------------------------------------------------------------------------- browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make chromium` installs Debian's Chromium")
    from playwright.sync_api import sync_playwright

    with pytest.MonkeyPatch.context() as patch:
        # Playwright's sync API keeps an event loop on this thread; the ORM calls the tests make
        # between browser steps are ordinary synchronous code, so Django's async guard must stand down.
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with pytest.MonkeyPatch.context() as driver:
            # Playwright's driver, started now, copies Chromium's own output to this process's stderr, which
            # pytest shows for a failing test: a browser that went away under load said nothing (CI 42). Only
            # the driver gets it: the app's settings read DEBUG in every process started later.
            driver.setenv("DEBUG", "pw:browser")
            playwright = sync_playwright().start()
        try:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield chromium
            chromium.close()
        finally:
            playwright.stop()


def session_cookie(user: Any) -> str:
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


@pytest.fixture
def open_page(browser: Any, web_server: str) -> Iterator[Callable[..., Any]]:
    """open_page(user=None, width=1280, height=900) -> a page signed in as `user` (None: signed out).

    At the end every page must have reported no CSP violation and no script error."""
    contexts: list[Any] = []
    pages: list[Any] = []

    def _open(user: Any = None, width: int = 1280, height: int = 900) -> Any:
        context = browser.new_context(viewport={"width": width, "height": height}, base_url=web_server,
                                      accept_downloads=False)
        context.set_default_timeout(15_000)
        context.add_init_script(WATCH_PAGE)
        if user is not None:
            context.add_cookies([{"name": "sessionid", "value": session_cookie(user), "url": web_server}])
        page = context.new_page()
        contexts.append(context)
        pages.append(page)
        return page

    yield _open
    try:
        for page in pages:
            if page.is_closed():
                continue
            report = page.evaluate("window.__kb || {csp: [], errors: []}")
            assert report["csp"] == [], f"CSP violations on {page.url}: {report['csp']}"
            assert report["errors"] == [], f"script errors on {page.url}: {report['errors']}"
    finally:
        for context in contexts:
            context.close()


@pytest.fixture
def reader(browser: Any, web_server: str) -> Iterator[Callable[..., Any]]:
    """reader(user, locale="pl-PL") -> a page signed in as `user` in a browser context of that locale."""
    contexts: list[Any] = []

    def _open(user: Any, locale: str = "pl-PL") -> Any:
        context = browser.new_context(locale=locale, base_url=web_server, viewport={"width": 1280, "height": 900})
        context.set_default_timeout(15_000)
        context.add_init_script(WATCH_PAGE)
        context.add_cookies([{"name": "sessionid", "value": session_cookie(user), "url": web_server}])
        contexts.append(context)
        return context.new_page()

    yield _open
    for context in contexts:
        context.close()


def screenshot(page: Any, name: str, *, full_page: bool = False) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


# Every input, select and textarea a person can reach has a label (a <label>, aria-label or
# aria-labelledby); every button has a name. Returns the ones that do not.
UNLABELLED = """
() => {
  const bad = [];
  for (const el of document.querySelectorAll("input, select, textarea")) {
    if (el.type === "hidden") continue;
    const named = (el.labels && el.labels.length) || el.getAttribute("aria-label") || el.getAttribute("aria-labelledby");
    if (!named) bad.push(el.outerHTML.slice(0, 120));
  }
  for (const el of document.querySelectorAll("button")) {
    if (!(el.textContent.trim() || el.getAttribute("aria-label"))) bad.push(el.outerHTML.slice(0, 120));
  }
  return bad;
}
"""


def assert_clean(page: Any) -> None:
    """No CSP violation and no script error on the page as loaded now."""
    report = page.evaluate("window.__kb")
    assert report == {"csp": [], "errors": []}, f"{page.url}: {report}"


def assert_labelled(page: Any) -> None:
    assert page.evaluate(UNLABELLED) == []


def assert_fits_width(page: Any) -> None:
    """Nothing scrolls sideways: the layout fits the viewport (else the first elements reaching past it are named)."""
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    wide = page.evaluate("""() => Array.from(document.querySelectorAll('body *')).filter(e => {
      const r = e.getBoundingClientRect(); return r.width > 0 && r.right > window.innerWidth + 1; })
      .slice(0, 8).map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().width) + 'px')""")
    assert overflow <= 0, f"{page.url} is {overflow}px wider than the viewport: {wide}"
