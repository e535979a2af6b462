"""The `site` kind of source (issue 27) against a real HTTP server process (tests/kb/site_server.py): a
small intranet site with robots.txt, a sitemap, ETags and Last-Modified dates, links outside the prefix
that must never be requested, a linked Markdown file and a broken PDF, through the real pipeline and search."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from kb.library.models import Chunk, Document, Folder, Source
from kb.library.sources.site import Prefix, document_path, list_entries
from kb.library.sources.sync import source_sync
from tests.kb.test_sources import EXPENSES, ONCALL, counts, found, indexed

REPO = Path(__file__).resolve().parents[2]


def html(title: str, body: str) -> str:
    return f"<!doctype html>\n<html><head><title>{title}</title></head><body>\n<h1>{title}</h1>\n{body}\n</body></html>\n"


FACTS = [f"Valve {n} of the cooling loop is opened with the brass key number {n}0{n}." for n in range(1, 7)]


def manual(facts: list[str]) -> str:
    sections = []
    for number, fact in enumerate(facts, 1):
        words = " ".join(f"step{number}x{i}" for i in range(90))
        sections.append(f"<h2>Procedure {number}</h2>\n<p>{fact} The operator then follows the checklist: {words}.</p>")
    return html("Plant manual", "\n".join(sections))


@dataclass
class Site:
    """The site's files (served as they are at each request), its request log and its forced answers."""

    root: Path
    log: Path
    control: Path
    process: subprocess.Popen[str]
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def write(self, path: str, content: str | bytes) -> None:
        file = self.root / path
        file.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            file.write_bytes(content)
        else:
            file.write_text(content)

    def force(self, status: dict[str, int], token: str = "") -> None:
        self.control.write_text(json.dumps({"status": status, "token": token}))

    def requests(self) -> list[dict[str, Any]]:
        """The requests since the last call."""
        lines = self.log.read_text().splitlines()
        self.log.write_text("")
        return [json.loads(line) for line in lines]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def index(port: int, extra: str = "", expenses: str = "expenses/") -> str:
    return html("Handbook", f"""<p>Everything the company writes down.</p>
<ul>
<li><a href="manual.html">Plant manual</a>, <a href="manual.html#procedure-3">its third procedure</a>,
    <a href="manual.html?print=1">printable</a></li>
<li><a href="{expenses}">Travel expenses</a></li>
<li><a href="oncall.md">On-call rota</a></li>
<li><a href="broken.pdf">Scanned form</a></li>
<li><a href="logo.png">Logo</a></li>
<li><a href="internal/salaries.html">Salaries</a> (robots.txt keeps crawlers out)</li>
<li><a href="../private/board.html">Board</a>, <a href="/private/board.html">board</a>,
    <a href="http://localhost:{port}/docs/other-host.html">the same server under another name</a>,
    <a href="mailto:hr@example.com">HR</a></li>
{extra}
</ul>""")


@pytest.fixture
def site(tmp_path: Path, settings: Any) -> Iterator[Site]:
    settings.KB_SOURCE_SITE_DELAY = 0
    root, log, control = tmp_path / "www", tmp_path / "requests.log", tmp_path / "control.json"
    root.mkdir()
    log.touch()
    process = subprocess.Popen([sys.executable, "-m", "tests.kb.site_server", str(root), str(log), str(control)],
                               cwd=REPO, stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert process.stdout is not None
    site = Site(root, log, control, process, int(process.stdout.readline()))
    settings.KB_SOURCE_SITE_HOSTS = [f"127.0.0.1:{site.port}"]  # the operator allows this one port of this host
    site.write("robots.txt", "User-agent: *\nDisallow: /docs/internal/\n")
    site.write("docs/index.html", index(site.port))
    site.write("docs/manual.html", manual(FACTS))
    site.write("docs/expenses/index.html", html("Travel expenses", f"<p>{EXPENSES.split(chr(10), 2)[2]}</p>"))
    site.write("docs/oncall.md", ONCALL)
    site.write("docs/broken.pdf", b"%PDF-1.4\n" + os.urandom(2000))
    site.write("docs/logo.png", b"\x89PNG not fetched")
    site.write("docs/internal/salaries.html", html("Salaries", "<p>The salary bands are secret.</p>"))
    site.write("docs/other-host.html", html("Elsewhere", "<p>Reached under another host name.</p>"))
    site.write("docs/unlinked.html", html("Parking", "<p>The car park gate opens with the badge from seven.</p>"))
    site.write("private/board.html", html("Board", "<p>The board minutes are private.</p>"))
    site.write("docs/sitemap.xml", f"""<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <url><loc>{site.url}/docs/</loc></url>
  <url><loc>{site.url}/docs/unlinked.html</loc><lastmod>2026-01-05</lastmod></url>
  <url><loc>{site.url}/private/board.html</loc></url>
</urlset>
""")
    yield site
    if process.poll() is None:
        site.stop()


@pytest.fixture
def handbook(db: None) -> Folder:
    return Folder.objects.create(name="Handbook", public=True)


NEVER_REQUESTED = {"/private/board.html", "/docs/internal/salaries.html", "/docs/other-host.html", "/docs/logo.png"}


def test_a_site_is_crawled_under_its_prefix_as_robots_allow_and_fetched_again_only_when_changed(
        people: dict[str, Any], site: Site, handbook: Folder) -> None:
    carol = people["carol"]
    source = Source.objects.create(name="intranet", kind="site", location=f"{site.url}/docs/", folder=handbook)

    first = source_sync(source)
    # index, manual, expenses, the linked Markdown file and the broken PDF, which fails alone in the pipeline.
    assert first.status == "ok" and counts(first) == (5, 0, 0, 5, 0, 0, 1), first.failures
    assert [path for path, _ in first.failures] == ["broken.pdf"]
    statuses = dict(Document.objects.filter(source=source).values_list("source_path", "status"))
    assert statuses == {"index.html": "ready", "manual.html": "ready", "expenses/index.html": "ready",
                        "oncall.md": "ready", "broken.pdf": "failed"}
    assert found(carol, "How is valve 3 of the cooling loop opened?", "brass key number 303")
    assert found(carol, "reimbursed meals abroad per day", "ninety-four euros")
    assert found(carol, "Who answers a pager alert?", "fifteen minutes")
    seen = site.requests()
    paths = [r["path"] for r in seen]
    # Each page once (fragments stripped, the query variant skipped), robots.txt first, nothing outside the prefix,
    # nothing robots.txt disallows, no image, no other host.
    assert paths == ["/robots.txt", "/docs/", "/docs/manual.html", "/docs/expenses/", "/docs/oncall.md", "/docs/broken.pdf"]
    assert not NEVER_REQUESTED & set(paths) and not any(r["query"] for r in seen)
    assert all(r["agent"].startswith("kb-site-sync/") for r in seen)
    assert not indexed("salary bands") and not indexed("board minutes")
    before = {d.pk: (d.version, d.indexed_at) for d in Document.objects.filter(source=source)}

    again = source_sync(source)
    assert counts(again) == (5, 5, 0, 0, 0, 0, 0) and again.chunks_embedded == 0
    pages = site.requests()[1:]
    # Every page asked with what it was indexed at: HTML with its ETag, the files with their Last-Modified; all 304.
    assert [r["path"] for r in pages] == paths[1:] and {r["status"] for r in pages} == {304}
    assert all(r["if_none_match"].startswith('"') for r in pages if r["path"].endswith(("/", ".html")))
    assert all(r["if_modified_since"].endswith("GMT") for r in pages if r["path"].endswith((".md", ".pdf")))
    assert {d.pk: (d.version, d.indexed_at) for d in Document.objects.filter(source=source)} == before


def test_a_site_edit_rename_and_deletion_reach_the_index(people: dict[str, Any], site: Site, handbook: Folder) -> None:
    carol, admin = Client(), Client()
    carol.force_login(people["carol"])
    admin.force_login(people["admin"])
    source = Source.objects.create(name="intranet", kind="site", location=f"{site.url}/docs/index.html",
                                   folder=handbook)
    assert source_sync(source).new == 5
    documents = {d.source_path: d for d in Document.objects.filter(source=source)}

    new_fact = "Valve 4 of the cooling loop is opened with the red lever beside the pump."
    site.write("docs/manual.html", manual([new_fact if n == 4 else f for n, f in enumerate(FACTS, 1)]))
    edited = source_sync(source)
    assert counts(edited) == (5, 4, 1, 0, 0, 0, 0) and edited.chunks_embedded == 1
    assert found(people["carol"], "How is valve 4 of the cooling loop opened?", "red lever")
    assert not indexed("brass key number 404")

    (site.root / "docs" / "travel").mkdir()
    (site.root / "docs" / "expenses" / "index.html").rename(site.root / "docs" / "travel" / "expenses.html")
    site.write("docs/index.html", index(site.port, expenses="travel/expenses.html"))
    moved = source_sync(source)
    assert counts(moved) == (5, 3, 1, 0, 0, 1, 0)  # the index page changed (its link); expenses moved, not re-read
    expenses = Document.objects.get(source=source, source_path="travel/expenses.html")
    assert expenses.pk == documents["expenses/index.html"].pk and expenses.version == 1
    assert Chunk.objects.filter(content__contains="ninety-four euros").count() == 1

    (site.root / "docs" / "oncall.md").unlink()  # still linked: the site answers 404
    gone = source_sync(source)
    assert counts(gone) == (4, 4, 0, 0, 1, 0, 0)
    oncall = documents["oncall.md"].pk
    assert not Document.objects.filter(pk=oncall).exists() and not indexed("pager alert")
    assert not found(people["carol"], "Who answers a pager alert?", "pager")
    assert carol.get(f"/documents/{oncall}/").status_code == 404
    assert admin.get(f"/api/documents/{oncall}").status_code == 404


def test_a_failing_page_keeps_its_document_and_a_site_that_cannot_be_listed_deletes_nothing(
        people: dict[str, Any], site: Site, handbook: Folder, settings: Any) -> None:
    source = Source.objects.create(name="intranet", kind="site", location=f"{site.url}/docs/", folder=handbook)
    assert source_sync(source).new == 5
    before = set(Document.objects.values_list("pk", "version"))

    # Mid-crawl: a page indexed before answers 500 (kept as indexed), a new page answers 503 (reported, tried again).
    site.write("docs/index.html", index(site.port, extra='<li><a href="canteen.html">Canteen</a></li>'))
    site.force({"/docs/manual.html": 500, "/docs/canteen.html": 503})
    faulty = source_sync(source)
    assert faulty.status == "ok" and counts(faulty) == (6, 4, 1, 0, 0, 0, 1)
    assert faulty.failures == [("canteen.html", f"could not be read: {site.url}/docs/canteen.html: HTTP 503")]
    assert Document.objects.get(source=source, source_path="manual.html").version == 1
    assert found(people["carol"], "How is valve 3 of the cooling loop opened?", "brass key number 303")
    before = set(Document.objects.values_list("pk", "version"))

    def fails(why: str) -> None:
        result = source_sync(source)
        assert result.status == "failed" and why in result.reason and counts(result) == (0,) * 7, result.reason
        source.refresh_from_db()
        assert source.last_status == "failed" and why in source.last_reason
        assert set(Document.objects.values_list("pk", "version")) == before

    site.force({"/docs/": 401})
    fails("the start page answered HTTP 401 (check the source's token")
    site.force({"/robots.txt": 503})
    fails("/robots.txt: HTTP 503; the site's rules could not be read")
    site.force({})
    settings.KB_SOURCE_SITE_MAX_PAGES = 4
    fails(f"{site.url}/docs/: more than 4 requests would be needed (KB_SOURCE_SITE_MAX_PAGES)")
    settings.KB_SOURCE_SITE_MAX_PAGES = 2000
    site.stop()
    fails("the site could not be reached")
    assert found(people["carol"], "reimbursed meals abroad per day", "ninety-four euros")


@pytest.mark.slow
def test_a_sitemap_lists_pages_no_link_reaches_and_requests_wait_the_politeness_delay(
        site: Site, handbook: Folder, settings: Any) -> None:
    settings.KB_SOURCE_SITE_DELAY = 0.25
    source = Source.objects.create(name="intranet", kind="site", location=f"{site.url}/docs/sitemap.xml",
                                   folder=handbook, exclude=["*.pdf"])
    # A file's Last-Modified is when it changed at the source (the start of its index lag); an ETag tells no time.
    modified = {e.path: e.modified for e in list_entries(source)}
    assert modified["oncall.md"] == int((site.root / "docs" / "oncall.md").stat().st_mtime)
    assert modified["manual.html"] is None
    site.requests()
    result = source_sync(source)
    assert result.status == "ok" and counts(result) == (5, 0, 0, 5, 0, 0, 0), result.failures
    assert "unlinked.html" in set(Document.objects.filter(source=source).values_list("source_path", flat=True))
    assert indexed("car park gate")
    seen = site.requests()
    paths = [r["path"] for r in seen]
    assert paths[:2] == ["/robots.txt", "/docs/sitemap.xml"] and "/docs/unlinked.html" in paths
    assert "/docs/broken.pdf" not in paths  # excluded files are not even fetched
    assert not NEVER_REQUESTED & set(paths)
    gaps = [later["time"] - earlier["time"] for earlier, later in zip(seen, seen[1:], strict=False)]
    assert min(gaps) >= 0.25 * 0.9, gaps


def test_a_site_behind_a_token_gets_the_sources_secret(site: Site, handbook: Folder) -> None:
    site.force({}, token="t0ken-7Qx")
    source = Source.objects.create(name="intranet", kind="site", location=f"{site.url}/docs/", folder=handbook)
    refused = source_sync(source)
    assert refused.status == "failed" and refused.reason == (
        f"{site.url}/docs/: the start page answered HTTP 401 (check the source's token: its secret or the "
        "KB_SOURCE_INTRANET_TOKEN setting)")
    assert not any(r["authorized"] for r in site.requests())
    source.secret = "t0ken-7Qx"
    source.save()
    result = source_sync(source)
    assert result.status == "ok" and result.new == 5, result.reason
    assert all(r["authorized"] for r in site.requests())


def test_a_site_location_is_checked_when_added(handbook: Folder, settings: Any) -> None:
    with pytest.raises(CommandError, match="user name or password") as refused:
        call_command("source", "add", "secret", "--kind", "site", "--location", "https://bot:s3cr3t@intra.example/docs/",
                     "--folder", "Handbook")
    assert "s3cr3t" not in str(refused.value)
    with pytest.raises(CommandError, match="http:// or https://"):
        call_command("source", "add", "ftp", "--kind", "site", "--location", "ftp://intra.example/docs/",
                     "--folder", "Handbook")
    with pytest.raises(CommandError, match="query string"):
        call_command("source", "add", "query", "--kind", "site", "--location", "https://intra.example/docs/?page=1",
                     "--folder", "Handbook")
    with pytest.raises(CommandError, match="KB_SOURCE_SITE_HOSTS"):  # a host the operator has not listed
        call_command("source", "add", "intranet", "--kind", "site", "--location", "https://intra.example/docs/",
                     "--folder", "Handbook")
    assert not Source.objects.exists()
    settings.KB_SOURCE_SITE_HOSTS = ["intra.example"]
    call_command("source", "add", "intranet", "--kind", "site", "--location", "https://intra.example/docs/",
                 "--folder", "Handbook", "--exclude", "drafts/*")
    assert Source.objects.get().kind == "site"


def test_urls_map_to_paths_below_the_prefix_and_nothing_outside_it() -> None:
    prefix = Prefix.of("https://Intra.Example:443/docs/start.html")
    assert str(prefix) == "https://intra.example/docs/"
    assert prefix.relative("https://intra.example/docs/a%20b/c.html") == "a b/c.html"
    assert prefix.relative("https://INTRA.example:443/docs/") == ""
    for outside in ("http://intra.example/docs/a.html", "https://intra.example:8443/docs/a.html",
                    "https://other.example/docs/a.html", "https://intra.example/docsx/a.html",
                    "https://intra.example/docs/../private/a.html", "https://intra.example/docs/%2e%2e/private/a.html",
                    "https://intra.example/docs/a.html?print=1", "https://u:p@intra.example/docs/a.html"):
        assert prefix.relative(outside) is None, outside
    assert [document_path(p) for p in ("", "guide/", "guide", "guide.md", "manual.PDF", "page.php")] == [
        "index.html", "guide/index.html", "guide.html", "guide.md", "manual.PDF", "page.php.html"]
