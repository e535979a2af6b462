"""A site source reaches only what the operator allows, and one slow or huge site cannot hold the ingest queue
(issue 47): addresses checked when added and at every request, after DNS and redirects; every request bounded
as a whole in time and, as it streams, in bytes; a run bounded in bytes; a file's type as its URL says."""

from __future__ import annotations

import ipaddress
import json
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.conf import settings as django_settings
from django.test import Client

from kb.library.models import Document, Folder, Source
from kb.library.services import folder_set_access
from kb.library.sources.git import cache_dir
from kb.library.sources.policy import site_address_check
from kb.library.sources.services import SourceRejected, source_check
from kb.library.sources.site import _Pinned
from kb.library.sources.sync import source_sync
from tests.kb.test_source_site import Site, handbook, html, site  # noqa: F401  (fixtures, used by name)
from tests.kb.test_sources_api import send, staff

METADATA = ["http://169.254.169.254/latest/meta-data/", "http://metadata.google.internal/computeMetadata/v1/",
            "http://[fd00:ec2::254]/latest/", "http://[::ffff:169.254.169.254]/", "http://[fe80::1]/"]


def own_ports() -> dict[str, int]:
    return {"database": int(django_settings.DATABASES["default"]["PORT"]),
            "redis": urlsplit(django_settings.REDIS_URL).port or 6379, "web": 8000}


def refused(location: str) -> str:
    with pytest.raises(SourceRejected) as caught:
        source_check(name="intranet", kind="site", location=location, folder_name="Handbook")
    return str(caught.value)


def test_with_nothing_configured_no_site_may_be_a_source(handbook: Folder, settings: Any) -> None:  # noqa: F811
    settings.KB_SOURCE_SITE_HOSTS, settings.KB_SOURCE_SITE_NETWORKS = [], []
    for location in ("http://127.0.0.1:8123/docs/", "http://[::1]:6379/", "http://10.0.0.5/docs/",
                     "https://intranet.example/docs/", *METADATA):
        assert "KB_SOURCE_SITE_HOSTS" in refused(location) or "metadata" in refused(location), location


def test_a_content_manager_cannot_point_a_site_at_the_server_or_the_cloud(handbook: Folder, settings: Any) -> None:  # noqa: F811
    folder_set_access(folder=handbook, public=True)
    manager = Client()
    manager.force_login(staff("cm", "view_source", "add_source", "change_source"))
    settings.KB_SOURCE_SITE_HOSTS = ["intranet.example"]
    for location in ("http://127.0.0.1:8123/", "http://169.254.169.254/latest/meta-data/", "http://[::1]:6379/",
                     "http://10.1.2.3/docs/"):
        response = send(manager, "post", "/api/sources", {"name": "x", "kind": "site", "location": location,
                                                          "folder": handbook.pk})
        assert response.status_code == 400, (location, response.content)
        assert "KB_SOURCE_SITE" in response.json()["detail"] or "metadata" in response.json()["detail"]
    added = send(manager, "post", "/api/sources", {"name": "wiki", "kind": "site", "folder": handbook.pk,
                                                   "location": "https://intranet.example/docs/"})
    assert added.status_code == 201, added.content
    moved = send(manager, "patch", f"/api/sources/{added.json()['id']}", {"location": "http://169.254.169.254/"})
    assert moved.status_code == 400 and Source.objects.get().location == "https://intranet.example/docs/"


def test_what_is_never_reached_whatever_the_operator_lists(handbook: Folder, settings: Any) -> None:  # noqa: F811
    ports = own_ports()
    settings.KB_SOURCE_SITE_HOSTS = ["169.254.169.254", "metadata.google.internal", "[fd00:ec2::254]", "[fe80::1]",
                                     *(f"127.0.0.1:{port}" for port in ports.values()), "[::ffff:169.254.169.254]"]
    settings.KB_SOURCE_SITE_NETWORKS = [ipaddress.ip_network(n) for n in
                                        ("0.0.0.0/0", "::/0", "169.254.0.0/16", "10.0.0.0/8")]
    for location in METADATA:
        assert "link-local or cloud metadata" in refused(location) or "metadata service" in refused(location)
    for name, port in ports.items():
        assert "this server's own database, Redis or web server" in refused(f"http://127.0.0.1:{port}/"), name
        assert "this server's own" in refused(f"http://10.0.0.9:{port}/"), name
    assert "not an address a site can be on" in refused("http://0.0.0.0/")


def test_loopback_only_as_a_listed_host_and_port_private_only_in_a_private_network(
        handbook: Folder, settings: Any) -> None:  # noqa: F811
    settings.KB_SOURCE_SITE_HOSTS = ["127.0.0.1"]
    assert "list 127.0.0.1:8123 in KB_SOURCE_SITE_HOSTS" in refused("http://127.0.0.1:8123/docs/")
    settings.KB_SOURCE_SITE_HOSTS = ["127.0.0.1:8123"]
    source_check(name="intranet", kind="site", location="http://127.0.0.1:8123/docs/", folder_name="Handbook")
    assert "KB_SOURCE_SITE_HOSTS" in refused("http://127.0.0.1:8124/docs/")

    settings.KB_SOURCE_SITE_HOSTS, settings.KB_SOURCE_SITE_NETWORKS = [], [ipaddress.ip_network("0.0.0.0/0"),
                                                                          ipaddress.ip_network("::/0")]
    assert "KB_SOURCE_SITE_NETWORKS" in refused("http://10.1.2.3/docs/")  # "anywhere" is public addresses only
    assert "loopback" in refused("http://localhost:8123/docs/")  # a name is checked for what it resolves to
    source_check(name="intranet", kind="site", location="http://93.184.215.14/docs/", folder_name="Handbook")
    settings.KB_SOURCE_SITE_NETWORKS = [ipaddress.ip_network("10.0.0.0/8")]
    source_check(name="intranet", kind="site", location="http://10.1.2.3/docs/", folder_name="Handbook")
    assert "KB_SOURCE_SITE_NETWORKS" in refused("http://192.168.1.2/docs/")


def test_the_connection_goes_to_the_address_checked_never_to_the_name_again(site: Site, settings: Any) -> None:  # noqa: F811
    # A name that resolves nowhere: the connection still reaches the checked address, with the name as Host.
    connection = _Pinned("docs.invalid", site.port, address="127.0.0.1", timeout=5)
    connection.request("GET", "/docs/")
    assert connection.getresponse().status == 200
    connection.close()
    assert site.requests()[-1]["host"] == f"docs.invalid:{site.port}"
    assert site_address_check("127.0.0.1", site.port) == "127.0.0.1"  # listed by the fixture as 127.0.0.1:port


def test_the_policy_is_checked_again_at_each_run_and_after_redirects(
        site: Site, handbook: Folder, settings: Any) -> None:  # noqa: F811
    source = Source.objects.create(name="intranet", kind="site", location=f"{site.url}/docs/", folder=handbook)
    assert source_sync(source).new == 5
    site.requests()
    settings.KB_SOURCE_SITE_HOSTS = []  # the operator closes it: the next run fails with the reason, deletes nothing
    closed = source_sync(source)
    assert closed.status == "failed" and "KB_SOURCE_SITE_HOSTS" in closed.reason and closed.deleted == 0
    assert Document.objects.filter(source=source).count() == 5
    assert not site.requests()

    settings.KB_SOURCE_SITE_HOSTS = [f"127.0.0.1:{site.port}"]
    site.control.write_text(json.dumps({"redirect": {"/docs/": "http://169.254.169.254/latest/meta-data/"}}))
    moved = source_sync(source)
    assert moved.status == "failed" and "outside" in moved.reason and moved.deleted == 0
    # A page that redirects off the site is not followed (a request there would fail the run: outside the policy).
    site.control.write_text(json.dumps({"redirect": {"/docs/manual.html": "http://169.254.169.254/latest/"}}))
    result = source_sync(source)
    assert result.status == "ok" and result.deleted == 1, result.summary()


def test_a_file_must_come_with_the_type_its_url_names(site: Site, handbook: Folder) -> None:  # noqa: F811
    site.write("docs/index.html", html("Notes", '<a href="notes.txt">notes</a> <a href="plain.txt">plain</a>'))
    site.write("docs/notes.txt", '{"aws_secret_access_key": "wJalrXUtnFEMI-K7MDENG"}')
    site.write("docs/plain.txt", "The fire drill is on the first Monday of the month.\n")
    site.control.write_text(json.dumps({"type": {"/docs/notes.txt": "application/json"}}))
    source = Source.objects.create(name="intranet", kind="site", location=f"{site.url}/docs/", folder=handbook)
    result = source_sync(source)
    assert result.status == "ok" and result.new == 2, result.summary()
    assert result.failures == [("notes.txt", f"could not be read: {site.url}/docs/notes.txt: served as "
                                             "application/json, not as a .txt file (text/plain)")]
    assert set(Document.objects.filter(source=source).values_list("source_path", flat=True)) == {"index.html",
                                                                                               "plain.txt"}


def test_a_run_that_would_fetch_more_than_its_budget_fails_and_changes_nothing(
        site: Site, handbook: Folder, settings: Any) -> None:  # noqa: F811
    links = " ".join(f'<a href="scan-{n}.pdf">scan {n}</a>' for n in range(3))
    site.write("docs/index.html", html("Scans", links))
    for n in range(3):
        site.write(f"docs/scan-{n}.pdf", b"%PDF-1.4\n" + bytes(400_000))
    settings.KB_SOURCE_SITE_MAX_RUN_MB = 1
    source = Source.objects.create(name="intranet", kind="site", location=f"{site.url}/docs/", folder=handbook)
    result = source_sync(source)
    assert result.status == "failed" and "KB_SOURCE_SITE_MAX_RUN_MB" in result.reason, result.summary()
    assert not Document.objects.filter(source=source).exists()
    spooled = sum(f.stat().st_size for f in (cache_dir(source) / "site").iterdir())
    assert spooled <= 2**20


# --------------------------------------------------------------------------- slow and huge servers


@contextmanager
def raw_server(respond: Callable[[str, Any, threading.Event], None]) -> Iterator[int]:
    """A real TCP server on 127.0.0.1 answering each request through `respond(path, socket, stop)`: for the
    answers no well-behaved server gives (a byte at a time, a body that never ends). Yields its port."""
    stop = threading.Event()

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            request = self.request.recv(65536).decode(errors="replace")
            try:
                respond(request.split(" ")[1] if " " in request else "/", self.request, stop)
            except OSError:
                pass  # the client hung up: what these tests want

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


def _drip_headers(path: str, sock: Any, stop: threading.Event) -> None:
    for byte in b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok":
        if stop.wait(0.1):
            return
        sock.send(bytes([byte]))


def _drip_body(path: str, sock: Any, stop: threading.Event) -> None:
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n")
    while not stop.wait(0.1):
        sock.send(b"x")


@pytest.mark.parametrize("respond", [_drip_headers, _drip_body], ids=["headers", "body"])
def test_a_site_that_drips_fails_its_run_within_the_timeout(
        handbook: Folder, settings: Any, respond: Callable[..., None]) -> None:  # noqa: F811
    settings.KB_SOURCE_SITE_TIMEOUT, settings.KB_SOURCE_SITE_DELAY = 1.0, 0
    with raw_server(respond) as port:
        settings.KB_SOURCE_SITE_HOSTS = [f"127.0.0.1:{port}"]
        source = Source.objects.create(name="slow", kind="site", location=f"http://127.0.0.1:{port}/docs/",
                                       folder=handbook)
        started = time.monotonic()
        result = source_sync(source)
        took = time.monotonic() - started
    assert result.status == "failed" and "within 1 s (KB_SOURCE_SITE_TIMEOUT)" in result.reason, result.reason
    assert took < 2.5, took  # one deadline for the whole request, not one per read (11.6 s before)


def _flood(path: str, sock: Any, stop: threading.Event) -> None:
    if path == "/robots.txt":
        sock.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
    elif path == "/docs/":
        page = html("Big", '<a href="big.txt">big</a>').encode()
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s" % (len(page), page))
    else:  # no Content-Length: only counting the bytes as they come can stop it
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
        for _ in range(200):
            if stop.is_set():
                return
            sock.sendall(b"y" * 65536)


def test_a_response_over_the_size_limit_is_cut_while_it_streams(handbook: Folder, settings: Any, tmp_path: Path) -> None:  # noqa: F811
    settings.KB_MAX_UPLOAD_MB, settings.KB_SOURCE_SITE_DELAY = 1, 0
    with raw_server(_flood) as port:
        settings.KB_SOURCE_SITE_HOSTS = [f"127.0.0.1:{port}"]
        source = Source.objects.create(name="huge", kind="site", location=f"http://127.0.0.1:{port}/docs/",
                                       folder=handbook)
        result = source_sync(source)
    assert result.status == "ok" and result.failures == [
        ("big.txt", f"could not be read: http://127.0.0.1:{port}/docs/big.txt: larger than 1 MB (KB_MAX_UPLOAD_MB)")]
    assert all(f.stat().st_size <= 2**20 for f in (cache_dir(source) / "site").iterdir())
