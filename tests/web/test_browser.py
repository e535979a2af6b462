"""The UI in Debian's Chromium against a real Daphne: layout at phone width, labels, who sees
what, the viewer's exact-passage highlight, and hostile documents rendered inert.

The upload flow, which needs a Celery worker, is in test_browser_upload.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.factories import ingested_document
from tests.web.conftest import assert_clean, assert_fits_width, assert_labelled, screenshot

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}

LONG_GUIDE = "# Dispatch console guide\n\nHow to use the dispatch console, screen by screen.\n\n" + "\n\n".join(
    f"## Section {n}\n\n"
    f"Paragraph {n} explains the dispatch board in some detail so that the document is long enough to scroll. "
    "Planners use it every morning to assign shipments to carriers and vehicles, and to watch late tenders.\n\n"
    f"- Step {n}.1: open the board\n- Step {n}.2: filter by hub"
    for n in range(1, 16)
) + (
    "\n\n## Vault rotation\n\nThe vault rotation code for the night shift is ZX-4412-QUARTZ; "
    "rotate it with `lumenctl vault rotate --shift night` and tell the duty manager (café rules apply 🚀).\n"
)

HOSTILE_MD = """# Release notes

<script>window.__pwned = "script";</script>
<img src="x" onerror="window.__pwned = 'onerror'">
<svg onload="window.__pwned = 'svg'"></svg>

Click [the release checklist](javascript:window.__pwned='link') or [this](JaVaScRiPt:window.__pwned='link2').
![diagram](javascript:window.__pwned='img') <a href="javascript:window.__pwned='anchor'">anchor</a>
<iframe src="javascript:window.__pwned='iframe'"></iframe>
"""

HOSTILE_HTML = """<html><head><title>Hostile page</title><script>window.__pwned = "html-script";</script></head>
<body onload="window.__pwned='body'"><h1>Hostile page</h1>
<p>Text with <img src="https://example.invalid/x.png" alt="a picture" onerror="window.__pwned='img'"> inside.</p>
<p><a href="javascript:window.__pwned='a'">a javascript link</a></p>
<h2>Second</h2><p onclick="window.__pwned='p'">&lt;script&gt;window.__pwned='escaped'&lt;/script&gt;</p>
</body></html>"""


def text_of_marks(page: Any) -> str:
    return page.evaluate("Array.from(document.querySelectorAll('#doc-text mark.hl')).map(m => m.textContent).join('')")


def first_mark_in_view(page: Any) -> bool:
    return page.evaluate(
        """() => {
          const m = Array.from(document.querySelectorAll('#doc-text mark.hl')).find(x => x.getClientRects().length);
          if (!m) return false;
          const r = m.getBoundingClientRect();
          return r.top >= 0 && r.bottom <= window.innerHeight && r.height > 0;
        }"""
    )


# --------------------------------------------------------------------------- layout and labels


def test_login_and_ask_work_at_phone_width(open_page: Any, people: dict[str, Any]) -> None:
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    # The server process uses the real hashers, not the tests' fast MD5 one.
    alice = people["alice"]
    alice.password = PBKDF2PasswordHasher().encode("alice", "testsalt1234", iterations=1000)
    alice.save(update_fields=["password"])

    page = open_page(**PHONE)
    page.goto("/")
    assert "/accounts/login/" in page.url
    assert_labelled(page)
    assert_fits_width(page)
    assert_clean(page)
    screenshot(page, "login-390")

    page.fill("#id_username", "alice")
    page.fill("#id_password", "wrong")
    page.click("button[type=submit]")
    assert page.locator("[role=alert]").inner_text().startswith("That username and password")
    screenshot(page, "login-error-390")
    page.fill("#id_password", "alice")
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)

    assert page.locator("h1").inner_text() == "Ask the knowledge base"
    assert page.locator(".mainnav a").all_inner_texts() == ["Ask", "Library"]  # no Review, no Admin for alice
    assert page.get_by_label("Your question").is_visible()
    page.wait_for_selector("#ask[data-state=connected]")
    assert_labelled(page)
    assert_fits_width(page)
    screenshot(page, "ask-390", full_page=True)

    page.click(".usermenu summary")
    page.click("text=Log out")
    page.wait_for_url("**/accounts/login/")


def test_every_page_works_at_phone_width(open_page: Any, people: dict[str, Any], library_docs: dict[str, Any]) -> None:
    # A file whose name is one long word: the library shows file names under the titles, and it must wrap there.
    ingested_document("# Carrier rates\n\nRates are reviewed every quarter.\n",
                      "carrier-rates-and-surcharges-for-the-northern-region-2026-final-approved-v3.md",
                      folder=library_docs["everyone"])
    page = open_page(people["admin"], **PHONE)
    for path, name in [("/library/", "library-admin-390"), ("/review/", "review-390"),
                       (f"/documents/{library_docs['public'].pk}/", "viewer-390"), ("/", "ask-admin-390")]:
        response = page.goto(path)
        assert response is not None and response.status == 200, path
        assert page.locator(".mainnav a").all_inner_texts() == ["Ask", "Library", "Review", "Gaps", "Admin"]
        assert_labelled(page)
        assert_fits_width(page)
        assert_clean(page)
        screenshot(page, name, full_page=True)

    page.set_viewport_size({"width": 1280, "height": 900})
    for path, name in [("/library/", "library-admin-desktop"), ("/", "ask-desktop"), ("/review/", "review-desktop")]:
        page.goto(path)
        assert_fits_width(page)
        screenshot(page, name)


# --------------------------------------------------------------------------- who sees what


def test_carol_cannot_see_restricted_documents(open_page: Any, people: dict[str, Any], library_docs: dict[str, Any]) -> None:
    secret, public = library_docs["secret"], library_docs["public"]
    page = open_page(people["carol"])
    page.goto("/library/")
    titles = page.locator(".doc-row-title").all_inner_texts()
    assert titles == [public.title]
    assert page.locator(".folder-nav a").all_inner_texts() != [] and "finance" not in page.locator(".folder-nav").inner_text()
    screenshot(page, "library-carol")

    page.fill("#library-q", "payroll")
    page.press("#library-q", "Enter")
    page.wait_for_url("**/library/?q=payroll")
    assert page.locator(".doc-row-title").count() == 0
    assert "No titles match" in page.locator(".empty-state").inner_text()

    for path in (f"/documents/{secret.pk}/", f"/documents/{secret.pk}/download", f"/documents/{secret.pk}/#char=0,10"):
        response = page.goto(path)
        assert response is not None and response.status == 404, path
        assert "Payroll" not in page.content()
    assert page.locator("h1").inner_text() == "We can't find that page"
    screenshot(page, "not-found-carol")

    bob = open_page(people["bob"])
    bob.goto("/library/")
    assert sorted(bob.locator(".doc-row-title").all_inner_texts()) == sorted([public.title, secret.title])


# --------------------------------------------------------------------------- the viewer


def test_the_viewer_highlights_the_exact_passage_in_view(open_page: Any, people: dict[str, Any]) -> None:
    document = ingested_document(LONG_GUIDE, "dispatch-console-guide.md")
    chunk = document.chunks.get(content__contains="ZX-4412-QUARTZ")
    assert chunk.content == document.canonical_text[chunk.start : chunk.end]

    page = open_page(people["carol"])
    page.goto(f"/documents/{document.pk}/#char={chunk.start},{chunk.end}")
    page.wait_for_selector("#doc-text mark.hl")
    # The article's text is the canonical text, so character offsets mean the same on both sides.
    assert page.evaluate("document.getElementById('doc-text').textContent") == document.canonical_text
    assert text_of_marks(page) == chunk.content
    assert first_mark_in_view(page)
    assert page.locator("#passage-bar").is_visible()
    assert page.locator("h2.doc-h").first.inner_text() == "Dispatch console guide"  # "#" hidden, text kept
    screenshot(page, "viewer-highlight")

    # Another citation of the same document: only the hash changes.
    other = document.chunks.get(content__contains="Paragraph 3 explains")
    page.evaluate(f"location.hash = 'char={other.start},{other.end}'")
    page.wait_for_function(
        "expected => Array.from(document.querySelectorAll('#doc-text mark.hl')).map(m => m.textContent).join('') === expected",
        arg=other.content,
    )
    assert text_of_marks(page) == other.content
    page.wait_for_timeout(600)  # smooth scrolling
    assert first_mark_in_view(page)

    phone = open_page(people["carol"], **PHONE)
    phone.goto(f"/documents/{document.pk}/#char={chunk.start},{chunk.end}")
    phone.wait_for_selector("#doc-text mark.hl")
    assert text_of_marks(phone) == chunk.content and first_mark_in_view(phone)
    assert_fits_width(phone)
    screenshot(phone, "viewer-highlight-390")


def test_a_pdf_passage_links_to_its_page_of_the_original(open_page: Any, people: dict[str, Any]) -> None:
    pdf = ROOT / "demo" / "corpus" / "everyone" / "handbook-welcome-and-workplace.pdf"
    document = ingested_document(Path(pdf).read_bytes(), pdf.name)
    assert len(document.pages) >= 2
    chunk = document.chunks.filter(page__gte=2).order_by("ordinal").first()
    page = open_page(people["carol"])
    page.goto(f"/documents/{document.pk}/#char={chunk.start},{chunk.end}&page={chunk.page}")
    page.wait_for_selector("#doc-text mark.hl")
    assert text_of_marks(page) == chunk.content
    assert first_mark_in_view(page)
    link = page.locator("#pdf-link")
    assert link.get_attribute("href") == f"/documents/{document.pk}/download?inline=1#page={chunk.page}"
    assert link.inner_text() == f"Open PDF at page {chunk.page}"
    assert f"on page {chunk.page}" in page.locator("#passage-label").inner_text()
    screenshot(page, "viewer-pdf-page")

    # A page locator alone (`#page=N`) goes to that page of the text.
    last = len(document.pages)
    page.evaluate(f"location.hash = 'page={last}'")
    page.wait_for_function(
        "n => { const r = document.getElementById('page-' + n).getBoundingClientRect(); return r.top >= 0 && r.top < window.innerHeight; }",
        arg=last,
    )
    assert link.get_attribute("href").endswith(f"#page={last}")
    assert page.locator("#doc-text mark.hl").count() == 0
    response = page.request.get(f"/documents/{document.pk}/download?inline=1")
    assert response.status == 200 and response.headers["content-type"] == "application/pdf"
    assert response.body().startswith(b"%PDF")


def test_a_passage_across_a_page_break_is_highlighted_on_both_pages(open_page: Any, people: dict[str, Any]) -> None:
    from tests.kb.test_pdf_pages import ANSWER, answer_across_a_page_break

    document = ingested_document(answer_across_a_page_break(), "handbook.pdf")
    chunk = next(c for c in document.chunks.order_by("ordinal") if ANSWER in " ".join(c.content.split()))
    page = open_page(people["carol"])
    page.goto(f"/documents/{document.pk}/#char={chunk.start},{chunk.end}&page={chunk.page}")
    page.wait_for_selector("#doc-text mark.hl")
    assert text_of_marks(page) == chunk.content
    assert page.locator("#page-1 mark.hl").count() and page.locator("#page-2 mark.hl").count()
    assert "on pages 1–2" in page.locator("#passage-label").inner_text()


def test_a_quoted_sentence_on_a_later_page_of_its_passage_is_brought_into_view(open_page: Any, people: dict[str, Any]) -> None:
    """A citation's `&focus=` (the sentence the answer quotes): the whole passage stays highlighted, the
    sentence is marked more strongly and shown, and the PDF opens at its page."""
    from tests.kb.test_pdf_pages import ANSWER, answer_across_a_page_break

    document = ingested_document(answer_across_a_page_break(), "handbook.pdf")
    text = document.canonical_text
    start = text.index("ZX-4412-QUARTZ")  # page 2: the answer sentence runs on across the page break
    end = text.index("quarter.", start) + len("quarter.")
    chunk = next(c for c in document.chunks.order_by("ordinal") if ANSWER[:30] in c.content)
    assert chunk.page == 1 and chunk.start < document.pages[1][0] <= start < end <= chunk.end
    page = open_page(people["carol"])
    page.set_viewport_size({"width": 900, "height": 240})  # a few lines: the sentence needs a scroll
    page.goto(f"/documents/{document.pk}/#char={chunk.start},{chunk.end}&page=2&focus={start},{end}")
    page.wait_for_selector("#doc-text mark.hl-focus")
    assert text_of_marks(page) == chunk.content
    focused = page.evaluate("Array.from(document.querySelectorAll('#doc-text mark.hl-focus')).map(m => m.textContent).join('')")
    assert focused == text[start:end]
    page.wait_for_timeout(400)  # smooth scrolling
    assert page.evaluate(
        """() => {
          const m = Array.from(document.querySelectorAll('#doc-text mark.hl-focus')).find(x => x.getClientRects().length);
          const r = m.getBoundingClientRect();
          return r.top >= 0 && r.top < window.innerHeight;
        }"""
    )
    assert not first_mark_in_view(page)  # the passage begins above, out of view
    assert page.locator("#pdf-link").inner_text() == "Open PDF at page 2"
    assert "on pages 1–2" in page.locator("#passage-label").inner_text()


def test_hostile_documents_render_inert(open_page: Any, people: dict[str, Any]) -> None:
    markdown = ingested_document(HOSTILE_MD, "release-notes.md")
    html = ingested_document(HOSTILE_HTML, "hostile.html")
    page = open_page(people["carol"])
    for document in (markdown, html):
        page.goto(f"/documents/{document.pk}/")
        page.wait_for_load_state("load")
        assert page.evaluate("document.getElementById('doc-text').textContent") == document.canonical_text
        found = page.evaluate(
            """() => {
              const root = document.getElementById('doc-text');
              return {
                elements: Array.from(root.querySelectorAll('script, iframe, svg, object, embed, style')).length,
                handlers: Array.from(root.querySelectorAll('*')).filter(e => Array.from(e.attributes).some(a => a.name.startsWith('on'))).length,
                jsLinks: Array.from(root.querySelectorAll('a[href], img[src]')).filter(e => !/^https:/i.test(e.getAttribute('href') || e.getAttribute('src'))).length,
              };
            }"""
        )
        assert found == {"elements": 0, "handlers": 0, "jsLinks": 0}
        for text in page.get_by_text("javascript", exact=False).all():  # click what looks like a link
            if text.is_visible():
                text.click()
        page.wait_for_timeout(300)
        assert page.evaluate("typeof window.__pwned") == "undefined"
        assert page.evaluate("window.__kb.csp") == []  # nothing was even attempted: CSP had nothing to block
    page.goto(f"/documents/{markdown.pk}/")
    assert "<script>window.__pwned" in page.locator("#doc-text").inner_text()  # shown as text
    screenshot(page, "viewer-hostile")


def test_the_admin_and_api_docs_work_under_the_csp(open_page: Any, people: dict[str, Any]) -> None:
    page = open_page(people["admin"])
    for path in ("/admin/", "/admin/kb/document/", "/admin/auth/user/add/"):
        response = page.goto(path)
        assert response is not None and response.status == 200, path
        assert_clean(page)
    page.goto("/api/docs")
    page.wait_for_selector("#swagger-ui .info")  # Swagger UI, from the app's own static files, rendered
    # open_page's teardown asserts no CSP violation and no script error on each of these pages
