"""An intranet documentation site as a source: crawled from a start URL, or from the pages its
sitemap.xml lists, without leaving the start's directory (the prefix), as robots.txt allows, one
request at a time with a politeness delay. HTML pages and the linked files of the supported types are
the entries.

Incremental: a page indexed before is asked for with its ETag (If-None-Match) or Last-Modified
(If-Modified-Since); a 304 means unchanged, and the stored original stands in for it (its links, and its
bytes should the sync want them). HTTP is the standard library's http.client: one GET at a time to
one host needs no connection pool, HTTP/2 or async, and httpx would be a new dependency for none of
them. Every request goes to an address the operator's policy allows (kb.library.sources.policy), resolved
once and connected to as checked, redirects included (a redirect is followed as a link, checked again);
each is bounded in time as a whole and in bytes as it streams, and a run in bytes (docs/SOURCES.md).
Links come from BeautifulSoup, which the HTML extractor uses already. A site that needs a token gets it as
`Authorization: Bearer` (kb.library.sources.secrets), sent only to the prefix's origin.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import shutil
import socket
import ssl
import threading
import time
from collections import deque
from contextlib import suppress
from dataclasses import dataclass
from email.message import Message
from email.utils import parsedate_to_datetime
from functools import partial
from http.client import HTTPException
from pathlib import PurePosixPath
from urllib.parse import SplitResult, unquote, urldefrag, urljoin, urlsplit
from urllib.robotparser import RobotFileParser
from xml.etree import ElementTree

from django.conf import settings
from django.core.files.storage import Storage

from kb.library.ingest.extract import SUPPORTED
from kb.library.models import Document, Source
from kb.library.sources.git import cache_dir, redact
from kb.library.sources.listing import Entry, ListingError, selected, sub_path
from kb.library.sources.policy import site_address_check, site_location_check
from kb.library.sources.secrets import secret_setting, source_secret

log = logging.getLogger(__name__)

USER_AGENT = "kb-site-sync/1.0 (company knowledge base; docs/SOURCES.md)"  # robots.txt rules name "kb-site-sync"
PAGE_TYPES = {"text/html", "application/xhtml+xml"}
# URL endings fetched besides the supported types': directories, clean URLs and server-side pages. Anything
# else (images, stylesheets, scripts, archives) is never requested.
PAGE_SUFFIXES = {"", ".html", ".htm", ".xhtml", ".shtml", ".php", ".asp", ".aspx", ".jsp"}
# The content types a linked file may come with: a text kind its own or text/plain (Markdown and
# reStructuredText also application/octet-stream, which common web servers send for endings they do not
# know); a binary kind its own or application/octet-stream. Anything else is not the file the URL names.
OCTET_STREAM = "application/octet-stream"
_OOXML = "application/vnd.openxmlformats-officedocument."
FILE_TYPES = {
    ".txt": {"text/plain"},
    ".md": {"text/markdown", "text/x-markdown", "text/plain", OCTET_STREAM},
    ".markdown": {"text/markdown", "text/x-markdown", "text/plain", OCTET_STREAM},
    ".rst": {"text/x-rst", "text/prs.fallenstein.rst", "text/plain", OCTET_STREAM},
    ".csv": {"text/csv", "application/csv", "text/plain"},
    ".eml": {"message/rfc822", "text/plain"},
    ".rtf": {"application/rtf", "text/rtf", OCTET_STREAM},
    ".pdf": {"application/pdf", OCTET_STREAM},
    ".docx": {_OOXML + "wordprocessingml.document", OCTET_STREAM},
    ".pptx": {_OOXML + "presentationml.presentation", OCTET_STREAM},
    ".xlsx": {_OOXML + "spreadsheetml.sheet", OCTET_STREAM},
    ".odt": {"application/vnd.oasis.opendocument.text", OCTET_STREAM},
    ".epub": {"application/epub+zip", OCTET_STREAM},
}
GONE = {404, 410}  # the page was deleted at the site: not listed, so its document goes
MAX_TAG = 190  # characters of an ETag or Last-Modified kept (Document.source_etag holds 200); longer: the content hash


def location_check(location: str) -> None:
    """Refuse what cannot be a start URL: another scheme, no host, credentials, a query string."""
    parts = urlsplit(location.strip())
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ListingError(redact(f"{location!r}: a site source starts at an http:// or https:// URL "
                                  "(a page, a directory ending in '/', or a sitemap.xml)"))
    if parts.username is not None or parts.password is not None:
        raise ListingError("the start URL holds a user name or password; give a token as the source's secret (or "
                           "the KB_SOURCE_<NAME>_TOKEN setting), never in the source's location")
    if parts.query:
        raise ListingError(f"{location!r}: the start URL has a query string; start at a page or directory")
    try:
        parts.port  # noqa: B018  # a port that is not a number raises here
    except ValueError:
        raise ListingError(f"{location!r}: the port is not a number") from None
    site_location_check(location)


START_CHECK_SECONDS = 10.0  # the most an admin's Save waits for the start URL to answer


def start_check(location: str, *, token: str | None = None) -> None:
    """ListingError unless the start URL answers now (a status under 400), asked as a run asks it: the address
    the policy allows (site_address_check), the crawler's user agent, `token` when given. Used before a source
    is saved, so a mistyped address is refused at once rather than at its first run."""
    timeout = min(settings.KB_SOURCE_SITE_TIMEOUT, START_CHECK_SECONDS)
    limit = settings.KB_MAX_UPLOAD_MB * 2**20
    client = _Client(delay=0, timeout=timeout, max_bytes=limit, run_bytes=limit, token=token)
    shown = redact(location.strip())
    try:
        response = client.get(location.strip())
    except OSError as exc:
        raise ListingError(f"{shown}: the site does not answer ({exc}); check the address") from None
    if response.status >= 400:
        phrase = http.client.responses.get(response.status, "")
        hint = "; give the source a token (Secret)" if response.status in (401, 403) else ""
        raise ListingError(f"{shown}: the site answers {response.status} {phrase}{hint}")


def _origin(parts: SplitResult) -> str:
    """scheme://host[:port] in one spelling (lower case, no default port), "" when the port is not a number."""
    try:
        port = parts.port
    except ValueError:
        return ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    scheme = parts.scheme.lower()
    default = {"http": 80, "https": 443}.get(scheme)
    return f"{scheme}://{host}" + (f":{port}" if port is not None and port != default else "")


@dataclass(frozen=True)
class Prefix:
    """The part of the web the crawl stays in: one origin and the directory of the start URL."""

    origin: str
    path: str  # unquoted, ends with "/"

    @classmethod
    def of(cls, location: str) -> Prefix:
        parts = urlsplit(location.strip())
        return cls(_origin(parts), unquote(parts.path or "/").rsplit("/", 1)[0] + "/")

    def relative(self, url: str) -> str | None:
        """The unquoted path of `url` below the prefix, or None when the URL is outside it: another scheme,
        host or port, another directory, a '.' or '..' segment, a query string, credentials."""
        parts = urlsplit(url)
        if parts.query or parts.username is not None or _origin(parts) != self.origin:
            return None
        path = unquote(parts.path or "/")
        if not path.startswith(self.path):
            return None
        relative = path[len(self.path):]
        return None if any(segment in (".", "..") for segment in relative.split("/")) else relative

    def __str__(self) -> str:
        return self.origin + self.path


def document_path(relative: str) -> str:
    """The entry's path for a URL path below the prefix: a directory is its index.html, and a page without
    a supported type's ending gets .html, so that `selected` takes pages by their type like files."""
    if relative == "" or relative.endswith("/"):
        return relative + "index.html"
    return relative if PurePosixPath(relative).suffix.lower() in SUPPORTED else relative + ".html"


def _is_page(path: str) -> bool:
    return PurePosixPath(path).suffix.lower() in (".html", ".htm")


@dataclass
class _Response:
    status: int
    headers: Message
    body: bytes = b""


class _Pinned(http.client.HTTPConnection):
    """HTTP to the address the policy checked (kb.library.sources.policy.site_address_check): the name is never
    resolved again, so DNS cannot send the connection elsewhere; the Host header is still the name."""

    def __init__(self, host: str, port: int, *, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._create_connection = partial(_connect, address)


class _PinnedTLS(http.client.HTTPSConnection):
    """HTTPS likewise; the certificate is checked for the name (SNI and host name), not the address."""

    def __init__(self, host: str, port: int, *, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._create_connection = partial(_connect, address)


def _connect(address: str, where: tuple[str, int], timeout: float, source: tuple[str, int] | None = None) -> socket.socket:
    return socket.create_connection((address, where[1]), timeout, source)


def _cut(connection: http.client.HTTPConnection, expired: threading.Event) -> None:
    """The request's deadline passed: its socket is shut, whatever read or handshake is waiting on it returns."""
    expired.set()
    if connection.sock is not None:
        with suppress(OSError):
            connection.sock.shutdown(socket.SHUT_RDWR)


class _Client:
    """GETs to the site, one at a time and `delay` seconds apart, each whole within `timeout` seconds and
    `max_bytes`, all of a run within `run_bytes`, each to an address the policy allows, with the source's
    token when it has one (the crawl never asks another origin)."""

    def __init__(self, *, delay: float, timeout: float, max_bytes: int, run_bytes: int, token: str | None) -> None:
        self.delay, self.timeout, self.max_bytes, self.run_bytes = delay, timeout, max_bytes, run_bytes
        self.headers = {"User-Agent": USER_AGENT} | ({"Authorization": f"Bearer {token}"} if token else {})
        self.requests = 0
        self.fetched = 0  # bytes of bodies read this run
        self._next_at = 0.0

    def get(self, url: str, headers: dict[str, str] | None = None) -> _Response:
        """The response whatever its status (a body only with a 200); OSError when there is none (refused, no
        such host, too large); ListingError, which fails the run, when the address is outside the policy, the
        request takes longer than `timeout` or the run's bytes would pass `run_bytes`."""
        wait = self._next_at - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        self.requests += 1
        parts = urlsplit(url)
        https = parts.scheme.lower() == "https"
        port = parts.port or (443 if https else 80)
        address = site_address_check(parts.hostname or "", port)
        kind = _PinnedTLS if https else _Pinned
        connection = kind(parts.hostname or "", port, address=address, timeout=self.timeout)
        deadline = time.monotonic() + self.timeout
        expired = threading.Event()
        timer = threading.Timer(self.timeout, _cut, (connection, expired))
        timer.daemon = True
        timer.start()
        try:
            connection.request("GET", parts.path or "/", headers=self.headers | (headers or {}))
            response = connection.getresponse()
            body = self._body(response, deadline) if response.status == 200 else b""
            if expired.is_set():
                raise TimeoutError
            return _Response(response.status, response.headers, body)
        except (OSError, HTTPException, ValueError) as exc:  # refused, reset, a broken response, a URL http.client refuses
            if expired.is_set() or time.monotonic() >= deadline:
                raise ListingError(f"{url}: no complete answer within {self.timeout:g} s (KB_SOURCE_SITE_TIMEOUT); "
                                   "the site is too slow, nothing was changed") from None
            if isinstance(exc, OSError):
                raise
            raise OSError(f"{type(exc).__name__}: {exc}") from None
        finally:
            timer.cancel()
            connection.close()
            self._next_at = time.monotonic() + self.delay

    def _body(self, response: http.client.HTTPResponse, deadline: float) -> bytes:
        """The body, read as it comes and stopped at the first byte over a limit (before anything is kept)."""
        limit = min(self.max_bytes, self.run_bytes - self.fetched)
        length = response.headers.get("Content-Length", "")
        if length.isdigit() and int(length) > limit:
            self._too_large(int(length))
        chunks, size = [], 0
        while chunk := response.read1(2**16):
            size += len(chunk)
            if size > limit:
                self._too_large(size)
            if time.monotonic() >= deadline:
                raise TimeoutError
            chunks.append(chunk)
        self.fetched += size
        return b"".join(chunks)

    def _too_large(self, size: int) -> None:
        if self.fetched + size > self.run_bytes:
            raise ListingError(f"the site sent more than {self.run_bytes // 2**20} MB in this run "
                               "(KB_SOURCE_SITE_MAX_RUN_MB); nothing was changed")
        raise OSError(f"larger than {self.max_bytes // 2**20} MB (KB_MAX_UPLOAD_MB)")


def _read_stored(storage: Storage, name: str) -> bytes:
    with storage.open(name, "rb") as handle:
        return bytes(handle.read())


def _unreadable(reason: str) -> bytes:
    raise OSError(reason)


def _etag(headers: Message, digest: str) -> str:
    """"http:" + the ETag, else the Last-Modified date, else (neither sent, or too long) the content hash."""
    tag = (headers.get("ETag") or headers.get("Last-Modified") or "").strip()
    return f"http:{tag}" if tag and len(tag) <= MAX_TAG else f"sha256:{digest}"


def _modified(headers: Message) -> float | None:
    """Last-Modified as a POSIX time (where the index lag of a change starts), None when absent or unreadable."""
    try:
        return parsedate_to_datetime(headers.get("Last-Modified", "")).timestamp()
    except (TypeError, ValueError):
        return None


def _conditional(document: Document | None) -> dict[str, str]:
    """The headers that let the server answer 304 for a document indexed before (when its original is stored)."""
    if document is None or not document.file.name or not document.source_etag.startswith("http:"):
        return {}
    tag = document.source_etag.removeprefix("http:")
    return {"If-None-Match": tag} if tag.startswith(('"', "W/")) else {"If-Modified-Since": tag}


class _Crawl:
    """One listing of a site: breadth first from the start (or the sitemap's pages), each path once."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.location = source.location.strip()
        self.prefix = Prefix.of(self.location)
        self.client = _Client(delay=settings.KB_SOURCE_SITE_DELAY, timeout=settings.KB_SOURCE_SITE_TIMEOUT,
                              max_bytes=settings.KB_MAX_UPLOAD_MB * 2**20,
                              run_bytes=settings.KB_SOURCE_SITE_MAX_RUN_MB * 2**20, token=source_secret(source))
        self.budget = settings.KB_SOURCE_SITE_MAX_PAGES
        self.robots = RobotFileParser()
        self.stored = {d.source_path: d for d in source.documents.only("source_path", "source_etag", "file", "size")}
        self.under = sub_path(source.path)
        self.spool = cache_dir(source) / "site"  # fetched bodies wait here for the sync, not in memory
        self.entries: list[Entry] = []
        self.queue: deque[tuple[str, str]] = deque()  # (URL, path)
        self.seen: set[str] = set()

    def run(self) -> list[Entry]:
        shutil.rmtree(self.spool, ignore_errors=True)
        self.spool.mkdir(parents=True)
        self._read_robots()
        start = None
        if urlsplit(self.location).path.endswith("sitemap.xml"):
            for url in self._sitemap(self.location, index=True):
                self._enqueue(url)
            if not self.queue:
                raise ListingError(f"{self.location}: the sitemap lists no page under {self.prefix} that may be fetched")
        else:
            start = urldefrag(self.location)[0]
            if not self.robots.can_fetch(USER_AGENT, start):
                raise ListingError(f"{start}: the site's robots.txt does not allow {USER_AGENT.split('/')[0]} to fetch it")
            self._enqueue(start)
            if not self.queue:
                raise ListingError(f"{start}: not a page or a file of a supported type")
        while self.queue:
            if self.client.requests >= self.budget:
                raise ListingError(f"{self.prefix}: more than {self.budget} requests would be needed "
                                   "(KB_SOURCE_SITE_MAX_PAGES); nothing was changed: raise it or start deeper in the site")
            url, path = self.queue.popleft()
            self._visit(url, path, start=url == start)
        return self.entries

    def _read_robots(self) -> None:
        """robots.txt's rules for our user agent; none when it is missing (any 4xx, RFC 9309) or redirected,
        and no listing at all when it cannot be read (a 5xx or no answer: the site may be down)."""
        url = self.prefix.origin + "/robots.txt"
        try:
            response = self.client.get(url)
        except OSError as exc:
            raise ListingError(f"{self.prefix}: the site could not be reached: {exc}") from None
        if response.status >= 500:
            raise ListingError(f"{url}: HTTP {response.status}; the site's rules could not be read")
        if response.status == 200:
            self.robots.parse(response.body.decode("utf-8", errors="replace").splitlines())
        else:
            self.robots.parse([])  # no rules: everything allowed
        delay = self.robots.crawl_delay(USER_AGENT)
        if delay:
            self.client.delay = max(self.client.delay, float(delay))

    def _sitemap(self, url: str, *, index: bool) -> list[str]:
        """The page URLs a sitemap lists; a sitemap index's sitemaps under the prefix are read in turn."""
        if not self.robots.can_fetch(USER_AGENT, url):
            raise ListingError(f"{url}: the site's robots.txt does not allow fetching the sitemap")
        try:
            response = self.client.get(url)
        except OSError as exc:
            raise ListingError(f"{url}: the sitemap could not be read: {exc}") from None
        if response.status != 200:
            raise ListingError(f"{url}: the sitemap answered HTTP {response.status}")
        try:
            # Expat (>= 2.4.1) refuses entity expansion bombs and ElementTree never loads external entities.
            root = ElementTree.fromstring(response.body)  # noqa: S314
        except ElementTree.ParseError as exc:
            raise ListingError(f"{url}: not a sitemap ({exc})") from None
        locations = [e.text.strip() for e in root.iter() if e.tag.rsplit("}", 1)[-1] == "loc" and e.text]
        if root.tag.rsplit("}", 1)[-1] != "sitemapindex":
            return locations
        if not index:
            raise ListingError(f"{url}: a sitemap index inside a sitemap index")
        return [page for nested in locations if self.prefix.relative(nested) is not None
                for page in self._sitemap(nested, index=False)]

    def _enqueue(self, url: str) -> None:
        """Queue a link when it is inside the prefix, may be a document, is allowed by robots.txt and new."""
        url = urldefrag(url)[0]
        try:
            relative = self.prefix.relative(url)
        except ValueError:  # not a URL urllib can read (a bad port or IPv6 literal)
            return
        if relative is None or PurePosixPath(relative).suffix.lower() not in PAGE_SUFFIXES | SUPPORTED.keys():
            return
        path = document_path(relative)
        if path in self.seen:
            return
        # Pages are fetched for their links even when left out; a file the source leaves out is not fetched.
        if not _is_page(path) and not selected(path, under=self.under, include=self.source.include,
                                                exclude=self.source.exclude):
            return
        if not self.robots.can_fetch(USER_AGENT, url):
            return
        self.seen.add(path)
        self.queue.append((url, path))

    def _visit(self, url: str, path: str, *, start: bool) -> None:
        stored = self.stored.get(path)
        conditional = _conditional(stored)
        try:
            response = self.client.get(url, conditional)
        except OSError as exc:
            if start:
                raise ListingError(f"{url}: the site could not be reached: {exc}") from None
            self._failed(url, path, stored, str(exc))
            return
        status = response.status
        if status == 304 and conditional and stored is not None:
            self._keep(url, path, stored)
        elif 300 <= status < 400 and response.headers.get("Location"):
            target = urljoin(url, response.headers["Location"])
            if start and self.prefix.relative(urldefrag(target)[0]) is None:
                raise ListingError(f"{url} redirects to {target}, outside {self.prefix}: start the source there")
            self._enqueue(target)
        elif status == 200:
            self._fetched(url, path, response)
        elif start:
            hint = (f" (check the source's token: its secret or the {secret_setting(self.source)} setting)"
                    if status in (401, 403) else "")
            raise ListingError(f"{url}: the start page answered HTTP {status}{hint}")
        elif status not in GONE:
            self._failed(url, path, stored, f"HTTP {status}")

    def _fetched(self, url: str, path: str, response: _Response) -> None:
        served = response.headers.get_content_type()
        if _is_page(path) and served not in PAGE_TYPES:
            return  # a URL that looked like a page serves something else (an image, a download): not a document
        suffix = PurePosixPath(path).suffix.lower()
        if not _is_page(path) and served not in FILE_TYPES[suffix]:
            # An error page or an API's JSON at a URL ending in .txt is not the file its name promises.
            self._failed(url, path, self.stored.get(path), f"served as {served}, not as a {suffix} file "
                                                           f"({', '.join(sorted(FILE_TYPES[suffix]))})")
            return
        digest = hashlib.sha256(response.body).hexdigest()
        spooled = self.spool / str(len(self.entries))
        spooled.write_bytes(response.body)
        self.entries.append(Entry(path=path, size=len(response.body), etag=_etag(response.headers, digest),
                                  read=spooled.read_bytes, modified=_modified(response.headers), _sha256=digest))
        if _is_page(path):
            self._links(url, response.body)

    def _keep(self, url: str, path: str, document: Document) -> None:
        """The document as indexed stands for the page (unchanged, or failing this run); its links are followed."""
        entry = Entry(path=path, size=document.size, etag=document.source_etag,
                      read=partial(_read_stored, document.file.storage, str(document.file.name)))
        self.entries.append(entry)
        if _is_page(path):
            try:
                self._links(url, entry.read())
            except OSError as exc:
                log.warning("site source %s: the stored copy of %s could not be read: %s", self.source.name, url, exc)

    def _failed(self, url: str, path: str, stored: Document | None, reason: str) -> None:
        """A page or file that could not be fetched this run. Indexed before: kept as it is, never deleted for
        a passing fault. New: listed with a read that fails, so the run reports it with the reason."""
        log.warning("site source %s: %s failed: %s", self.source.name, url, reason)
        if stored is not None and stored.file.name:
            self._keep(url, path, stored)
        else:
            self.entries.append(Entry(path=path, size=0, etag="", read=partial(_unreadable, f"{url}: {reason}"),
                                      _sha256=f"unread:{path}"))

    def _links(self, url: str, body: bytes) -> None:
        from bs4 import BeautifulSoup  # the HTML extractor's parser, loaded where it is needed

        soup = BeautifulSoup(body, "html.parser")
        base_tag = soup.find("base", href=True)
        base = url
        if base_tag is not None and isinstance(href := base_tag.get("href"), str):
            base = urljoin(url, href.strip())
        for link in soup.find_all(["a", "area"], href=True):
            href = link.get("href")
            if isinstance(href, str):
                try:
                    self._enqueue(urljoin(base, href.strip()))
                except ValueError:
                    continue


def list_entries(source: Source) -> list[Entry]:
    """The pages and files of the site under its prefix (see the module's docstring); ListingError when the
    start, the sitemap or robots.txt cannot be read or the site needs more requests than the budget."""
    location_check(source.location)
    return _Crawl(source).run()
