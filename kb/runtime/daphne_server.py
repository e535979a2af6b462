"""Daphne with request bodies bounded as they arrive: `python -m kb.runtime.daphne_server` (daphne's own options).

Twisted spools a request's whole body into a temporary file before Daphne hands the request to the
app, so kb.edge's limit ran only after the bytes were on disk: `Content-Length: 300000000` without a
login held a 300 MB file. Here the same limit (kb.edge.body_limit, by path) applies while the body
arrives: a declared length over it is answered 413 as soon as the headers end, before any body byte
is stored, and a chunked body is cut at the limit. The 413 goes out, the server stops sending,
and what the client still sends is read and dropped for at most LINGER_SECONDS (so a client
that is still sending sees the 413 rather than a reset), then the connection is closed.
"""

from __future__ import annotations

import logging
import os
from typing import IO, Any
from urllib.parse import unquote

from daphne.cli import CommandLineInterface  # type: ignore[import-untyped]  # first: it installs Twisted's asyncio reactor
from daphne.http_protocol import HTTPFactory, WebRequest  # type: ignore[import-untyped]
from daphne.server import Server  # type: ignore[import-untyped]

from kb.edge import body_limit, too_large_body
from kb.runtime.embedded import ensure_services

log = logging.getLogger("kb.runtime.daphne_server")  # also when run as __main__

LINGER_SECONDS = 5.0


def too_large_response(limit: int) -> bytes:
    body = too_large_body(limit)
    head = (
        "HTTP/1.1 413 Content Too Large\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


def request_path(target: bytes) -> str:
    """The path Daphne puts in the ASGI scope for this request-target, so both layers pick one limit."""
    return unquote(target.split(b"?", 1)[0].decode("ascii", "replace"))


class BoundedRequest(WebRequest):  # type: ignore[misc]
    """Twisted calls gotLength when the headers end and handleContentChunk with each piece of body."""

    content: IO[bytes] | None = None  # the spooled body (Twisted's)
    limit = 0
    received = 0
    refused = False

    def gotLength(self, length: int | None) -> None:
        self.limit = body_limit(request_path(self.channel._path))
        if length is not None and length > self.limit:
            self.requestHeaders.removeHeader(b"expect")  # the 413 answers "Expect: 100-continue"
            self.refuse()
        else:
            super().gotLength(length)

    def handleContentChunk(self, data: bytes) -> None:
        if self.refused:
            return
        self.received += len(data)
        if self.received > self.limit:
            self.refuse()
        else:
            super().handleContentChunk(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        if not self.refused:  # a refused body that ends in the same read never reaches the app
            super().requestReceived(command, path, version)

    def refuse(self) -> None:
        self.refused = True
        if self.content is not None:
            self.content.close()  # what was spooled of a chunked body goes now, not after the linger
            self.content = None
        channel, transport = self.channel, self.channel.transport
        log.info("413: a body over %s bytes to %s", self.limit, request_path(channel._path))
        transport.write(too_large_response(self.limit))
        channel.dataReceived = lambda data: None  # the rest is read and dropped, unparsed
        # The 413, then end of output; a TLS transport cannot half-close, so it closes at once.
        getattr(transport, "loseWriteConnection", transport.loseConnection)()
        linger = channel.callLater(LINGER_SECONDS, transport.abortConnection)
        self.notifyFinish().addBoth(lambda _: linger.cancel() if linger.active() else None)


class BoundedHTTPFactory(HTTPFactory):  # type: ignore[misc]
    def buildProtocol(self, addr: Any) -> Any:
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = BoundedRequest
        return protocol


class BoundedServer(Server):  # type: ignore[misc]
    """Server.run builds its HTTPFactory and listens with it at once: this one builds ours instead."""

    @property
    def http_factory(self) -> BoundedHTTPFactory:
        return self._bounded_factory

    @http_factory.setter
    def http_factory(self, daphnes: HTTPFactory) -> None:
        self._bounded_factory = BoundedHTTPFactory(self)


class BoundedCommandLine(CommandLineInterface):  # type: ignore[misc]
    server_class = BoundedServer


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.settings")
    ensure_services()  # before kb.asgi reads the settings, which only read where the servers are
    BoundedCommandLine.entrypoint()


if __name__ == "__main__":
    main()
