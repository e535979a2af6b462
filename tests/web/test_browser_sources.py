"""A Git source in the admin, in Chromium against a real Daphne and a real Celery worker (issue 27): an
admin adds it, presses "Sync now" and watches the run's progress, and an employee then finds a sentence
from the repository in the chat page, with a citation that opens the passage in the viewer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.kb.test_sources import commit, git
from tests.security.conftest import signed_in
from tests.web.conftest import assert_clean, screenshot
from tests.web.test_browser import text_of_marks
from tests.web.test_browser_ask import ask_in_page

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RELEASES = """# Release trains

## Freeze

The Juniper release train leaves every second Tuesday, and the code freeze starts at two in the afternoon
on the Monday before; a change that misses the freeze waits for the next train.

## Hotfixes

A hotfix skips the train only with the approval of the duty release manager, recorded in the change ticket.
"""
QUESTION = "When does the code freeze start for the Juniper release train?"
SENTENCE = "the code freeze starts at two in the afternoon"
# Enough files that a run lasts a while on the worker: the admin shows it running before it ends.
FILLER = "# Team notes {n}\n\n## Meetings\n\nThe team {n} meets on Thursdays in room {n} to plan the week ahead.\n"


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "handbook"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    files: dict[str, str | None] = {"docs/releases.md": RELEASES, "README.md": "# Not under docs/\n"}
    files.update({f"docs/teams/team-{n}.md": FILLER.format(n=n) for n in range(1, 13)})
    commit(repo, files, "the handbook")
    return repo


@pytest.fixture
def handbook(people: dict[str, Any]) -> Any:
    from kb.library.models import Folder
    from kb.library.services import folder_set_access

    folder = Folder.objects.create(name="Handbook")
    folder_set_access(folder=folder, public=True)
    return folder


def add_in_admin(page: Any, repository: Path) -> Any:
    """Admin → Sources → Add: the form an admin fills for a Git source."""
    from kb.library.models import Source

    page.goto("/admin/kb/source/")
    page.get_by_role("link", name="Add source").click()
    page.get_by_label("Name").fill("handbook")
    page.get_by_label("Kind").select_option("git")
    page.get_by_label("Location").fill(f"file://{repository}")
    page.get_by_label("Branch").fill("main")
    page.get_by_label("Path").fill("docs")
    page.get_by_label("Folder").select_option(label="Handbook")
    page.get_by_role("button", name="Save", exact=True).click()
    page.wait_for_selector(".messagelist .success")
    return Source.objects.get(name="handbook")


def test_an_admin_adds_a_git_source_in_the_admin(open_page: Any, people: dict[str, Any], handbook: Any,
                                                  repository: Path) -> None:
    source = add_in_admin(open_page(people["admin"]), repository)
    assert (source.kind, source.location, source.branch, source.path, source.folder) == (
        "git", f"file://{repository}", "main", "docs", handbook)
    assert source.last_status == ""  # added, not run yet


# The cell of a source's last run: each text it shows, kept as it changes (sources.js updates it live).
RECORD_RUN = """pk => {
  const cell = document.querySelector(`[data-source-run="${pk}"]`);
  window.__runTexts = [cell.textContent.trim()];
  new MutationObserver(() => window.__runTexts.push(cell.textContent.trim()))
    .observe(cell, {childList: true, subtree: true, characterData: true});
}"""


def test_sync_now_in_the_admin_then_an_employee_finds_the_repositorys_sentence_with_its_citation(
    open_page: Any, people: dict[str, Any], handbook: Any, repository: Path, celery_worker: Any
) -> None:
    from chat.models import Citation
    from kb.library.models import Document, Source

    # Added as the admin's API does today; once the admin has its add form, `add_in_admin` replaces this.
    admin_client = signed_in(people["admin"])
    added = admin_client.post("/api/sources", {"name": "handbook", "kind": "git", "location": f"file://{repository}",
                                               "branch": "main", "path": "docs", "folder": handbook.pk},
                              content_type="application/json")
    assert added.status_code == 201, added.content
    source = Source.objects.get(name="handbook")

    page = open_page(people["admin"])
    page.goto("/admin/kb/source/")
    row = page.locator(f"#result_list tr:has([data-source-run='{source.pk}'])")
    assert "never run" in row.inner_text()
    row.locator("input[name=_selected_action]").check()
    page.locator("select[name=action]").select_option("sync_now")
    page.get_by_role("button", name="Go").click()
    page.wait_for_selector(".messagelist li")
    assert "Queued a run of 1 source: handbook" in page.locator(".messagelist").inner_text()

    # The page reloaded with the message: watch the run's cell from here, without reloading.
    page.evaluate(RECORD_RUN, source.pk)
    try:
        page.wait_for_selector(f"[data-source-run='{source.pk}'] .kb-badge.kb-ok", timeout=240_000)
    except PlaywrightTimeout:
        pytest.fail(f"the run's cell never showed ok without a reload; it showed {page.evaluate('window.__runTexts')}")
    texts = page.evaluate("window.__runTexts")
    assert any("running" in text.lower() and "indexed" in text for text in texts), texts  # progress shown while it ran
    final = page.locator(f"[data-source-run='{source.pk}']").inner_text()
    assert "13 files" in final and "failed" not in final, final  # the list's line; every count on hover
    counts = page.locator(f"[data-source-run='{source.pk}'] .kb-badge").get_attribute("title") or ""
    assert "listed 13" in counts and "new 13" in counts and "failed 0" in counts, counts
    screenshot(page, "admin-source-synced")
    assert_clean(page)
    releases = Document.objects.get(source=source, source_path="docs/releases.md")
    assert releases.status == "ready" and releases.folder == handbook

    # An employee in no group asks in the chat page; the answer cites the repository's file.
    employee = open_page(people["carol"])
    employee.goto("/")
    ask_in_page(employee, QUESTION)
    employee.wait_for_function("() => window.__kbAsk.events.includes('done')", timeout=240_000)
    assert SENTENCE in employee.locator("#answer").inner_text()
    citation = Citation.objects.filter(message__conversation__owner=people["carol"], document=releases).first()
    assert citation is not None and SENTENCE in citation.quote
    chip = employee.locator(f"#answer .cite-chip[href^='/documents/{releases.pk}/']").first
    chip.click()
    employee.wait_for_url(f"**/documents/{releases.pk}/#char={citation.start},{citation.end}*")
    employee.wait_for_selector("#doc-text mark.hl")
    assert SENTENCE in text_of_marks(employee)
    assert text_of_marks(employee) == citation.quote == releases.canonical_text[citation.start : citation.end]
    screenshot(employee, "source-citation-viewer")
    assert_clean(employee)
