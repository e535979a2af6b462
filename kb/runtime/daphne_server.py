"""Daphne with request bodies bounded as they arrive: `python -m kb.runtime.daphne_server` (daphne's own options).

Twisted spools a request's whole body into a temporary file before Daphne hands the request to the
app, so kb.edge's limit ran only after the bytes were on disk: `Content-Length: 300000000` without a
login held a 300 MB file. Here the same limit (kb.edge.body_limit, by path) applies while the body
arrives: a declared length over it is answered 413 as soon as the headers end, before any body byte
is stored, and a chunked body is cut at the limit. The 413 goes out, the server stops sending,
and what the client still sends is read and dropped for at most LINGER_SECONDS (so a client
that is still sending sees the 413 rather than a reset), then the connection is closed.

Time is bounded too (docs/SECURITY.md, "Slow clients"). Twisted's only clock is an idle timeout that
every byte resets, so a client sending one byte every few seconds held a connection forever. Here a
request's line and headers must arrive within KB_EDGE_HEADER_SECONDS, and its body within
KB_EDGE_BODY_SECONDS or, past that, at an average of KB_EDGE_BODY_MIN_KBPS (body_seconds_left), else
the client gets a 408 and the connection closes. One address holds at most
KB_EDGE_MAX_CONNECTIONS_PER_ADDRESS connections at once, websockets included (AddressCap).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import unquote

from daphne.cli import CommandLineInterface  # type: ignore[import-untyped]  # first: it installs Twisted's asyncio reactor
from daphne.http_protocol import HTTPFactory, WebRequest  # type: ignore[import-untyped]
from daphne.server import Server  # type: ignore[import-untyped]
from twisted.internet import protocol as twisted_protocol
from twisted.protocols import policies
from twisted.web import http as twisted_http

from kb.edge import body_limit, too_large_body
from kb.env import Network
from kb.runtime.embedded import ensure_services

log = logging.getLogger("kb.runtime.daphne_server")  # also when run as __main__

# Twisted's classes as untyped as Daphne's, which subclass them: its zope interfaces do not type-check as used.
HTTPChannel: Any = twisted_http.HTTPChannel
GenericHTTPChannelProtocol: Any = twisted_http._GenericHTTPChannelProtocol  # what HTTPFactory wraps a channel in
Protocol: Any = twisted_protocol.Protocol
WrappingFactory: Any = policies.WrappingFactory

LINGER_SECONDS = 5.0
ABORT_SECONDS = 2.0  # after a 408 or 429, a client that does not read it is cut off


@dataclass(frozen=True)
class EdgeLimits:
    """The edge's clocks and caps (kb/settings.py, KB_EDGE_*), read once when the server starts."""

    header_seconds: float
    body_seconds: float
    body_min_bytes_per_second: float
    max_connections_per_address: int
    exempt: Sequence[Network]  # KB_TRUSTED_PROXIES

    @classmethod
    def from_settings(cls) -> EdgeLimits:
        from django.conf import settings

        return cls(settings.KB_EDGE_HEADER_SECONDS, settings.KB_EDGE_BODY_SECONDS,
                   settings.KB_EDGE_BODY_MIN_KBPS * 1024, settings.KB_EDGE_MAX_CONNECTIONS_PER_ADDRESS,
                   settings.KB_TRUSTED_PROXIES)

    def capped(self, host: str) -> bool:
        """Whether connections from `host` count against the per-address cap."""
        if not self.max_connections_per_address:
            return False
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return True
        return not any(address in network for network in self.exempt)


def body_seconds_left(elapsed: float, received: int, limits: EdgeLimits) -> float:
    """Seconds a body that has sent `received` bytes in `elapsed` seconds may still take before it is
    too slow: the first `body_seconds` are free, then the body must average the minimum rate (a slow start
    is made up by a faster finish, and a client cannot hold a connection by trickling bytes)."""
    allowed = limits.body_seconds
    if limits.body_min_bytes_per_second > 0:
        allowed = max(allowed, received / limits.body_min_bytes_per_second)
    return allowed - elapsed


def plain_response(status: str, detail: str) -> bytes:
    """A whole HTTP/1.1 response that closes the connection, with the JSON body the app's errors have."""
    body = json.dumps({"detail": detail}).encode()
    head = (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n")
    return head.encode() + body


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
        if isinstance(self.channel, DeadlineChannel):
            self.channel.deadline_cancel()  # the linger below bounds what is left
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


class DeadlineChannel(HTTPChannel):  # type: ignore[misc]
    """Twisted's HTTP/1.1 channel with a deadline for each request's headers and one for its body.

    The header clock starts when the connection opens and, on a kept-alive connection, at the first byte
    of the next request (an idle kept-alive connection is Twisted's idle timeout's, 60 s); it stops when
    the headers end. The body clock runs from there until the body ends. While the app works on a request
    no clock runs: a long answer is not the client's slowness. A connection that sent nothing at all is
    closed without the 408, which a browser that sends its request at that moment would take for its answer.
    """

    limits: EdgeLimits
    _deadline: Any = None  # an IDelayedCall
    _heard = False  # a byte of the current request has arrived
    _body_started = 0.0
    _body_received = 0

    def connectionMade(self) -> None:
        super().connectionMade()
        self._arm(self.limits.header_seconds, self._headers_late)

    def dataReceived(self, data: bytes) -> None:
        if data and not self._handlingRequest and not self._heard:
            self._heard = True
            if self._deadline is None:
                self._arm(self.limits.header_seconds, self._headers_late)
        super().dataReceived(data)

    def allHeadersReceived(self) -> None:
        self.deadline_cancel()
        if self.length != 0:  # a body follows (None: chunked)
            self._body_started, self._body_received = time.monotonic(), 0
            self._arm(self.limits.body_seconds, self._body_check)
        super().allHeadersReceived()  # a body refused for its size cancels the clock (BoundedRequest.refuse)

    def rawDataReceived(self, data: bytes) -> None:
        if not self._handlingRequest:
            self._body_received += len(data)
        super().rawDataReceived(data)

    def allContentReceived(self) -> None:
        self.deadline_cancel()
        self._heard = False
        super().allContentReceived()

    def connectionLost(self, reason: Any) -> None:
        self.deadline_cancel()
        super().connectionLost(reason)

    def deadline_cancel(self) -> None:
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None

    def _arm(self, seconds: float, expired: Any) -> None:
        self.deadline_cancel()
        self._deadline = self.callLater(seconds, expired)

    def _headers_late(self) -> None:
        self._deadline = None
        if not self._heard:
            self.loseConnection()
            return
        seconds = self.limits.header_seconds
        self._cut(f"the request headers did not arrive within {seconds:g} s (KB_EDGE_HEADER_SECONDS)")

    def _body_check(self) -> None:
        self._deadline = None
        left = body_seconds_left(time.monotonic() - self._body_started, self._body_received, self.limits)
        if left > 0:  # still on pace: look again when the bytes so far no longer cover the time
            self._arm(max(left, 0.1), self._body_check)
            return
        rate = self.limits.body_min_bytes_per_second / 1024
        self._cut(f"the request body was too slow: it may take {self.limits.body_seconds:g} s (KB_EDGE_BODY_SECONDS), "
                  f"longer only at {rate:g} KB/s or more (KB_EDGE_BODY_MIN_KBPS)")

    def _cut(self, detail: str) -> None:
        """408, then close; a client that does not even read it is cut off ABORT_SECONDS later."""
        log.info("408 to %s: %s", self.transport.getPeer(), detail)
        self.transport.write(plain_response("408 Request Timeout", detail))
        self.dataReceived = lambda data: None  # type: ignore[method-assign]  # whatever else arrives is dropped
        self.loseConnection()
        self._abortingCall = self.callLater(ABORT_SECONDS, self.forceAbortClient)  # cancelled by connectionLost


class BoundedHTTPFactory(HTTPFactory):  # type: ignore[misc]
    def __init__(self, server: Any, limits: EdgeLimits) -> None:
        super().__init__(server)
        self.limits = limits

    def protocol(self) -> Any:
        """What http.HTTPFactory builds for each connection: its generic protocol around our channel."""
        channel = DeadlineChannel()
        channel.limits = self.limits
        return GenericHTTPChannelProtocol(channel)

    def buildProtocol(self, addr: Any) -> Any:
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = BoundedRequest
        return protocol


class Refusal(Protocol):  # type: ignore[misc]
    """The answer to a connection over the per-address cap: 429, then closed."""

    _abort: Any = None  # an IDelayedCall

    def __init__(self, cap: int) -> None:
        self.cap = cap

    def connectionMade(self) -> None:
        from twisted.internet import reactor as installed

        reactor: Any = installed
        detail = (f"too many open connections from this address: at most {self.cap} "
                  "(KB_EDGE_MAX_CONNECTIONS_PER_ADDRESS)")
        self.transport.write(plain_response("429 Too Many Requests", detail))
        self.transport.loseConnection()
        self._abort = reactor.callLater(ABORT_SECONDS, self.transport.abortConnection)

    def connectionLost(self, reason: Any) -> None:
        if self._abort is not None and self._abort.active():
            self._abort.cancel()


class AddressCap(WrappingFactory):  # type: ignore[misc]
    """Counts each address's open connections around the HTTP factory; over the cap a connection gets
    a Refusal. The wrapper stays when Daphne hands a connection to its websocket protocol (it swaps
    our wrappedProtocol, as it does TLS's), so an upgraded socket counts until it closes."""

    def __init__(self, wrapped: BoundedHTTPFactory, limits: EdgeLimits) -> None:
        super().__init__(wrapped)
        self.limits = limits
        self.open: Counter[str] = Counter()

    def buildProtocol(self, addr: Any) -> Any:
        host = getattr(addr, "host", None)
        if host is None or not self.limits.capped(host):
            return super().buildProtocol(addr)
        if self.open[host] >= self.limits.max_connections_per_address:
            log.info("429: %s already holds %s connections (KB_EDGE_MAX_CONNECTIONS_PER_ADDRESS)",
                        host, self.open[host])
            return Refusal(self.limits.max_connections_per_address)
        wrapper = super().buildProtocol(addr)
        wrapper.capped_host = host
        return wrapper

    def registerProtocol(self, protocol: Any) -> None:
        super().registerProtocol(protocol)
        host = getattr(protocol, "capped_host", None)
        if host is not None:
            self.open[host] += 1

    def unregisterProtocol(self, protocol: Any) -> None:
        super().unregisterProtocol(protocol)
        host = getattr(protocol, "capped_host", None)
        if host is not None:
            self.open[host] -= 1
            if not self.open[host]:
                del self.open[host]


class BoundedServer(Server):  # type: ignore[misc]
    """Server.run builds its HTTPFactory and listens with it at once: this one builds ours instead."""

    @property
    def http_factory(self) -> AddressCap:
        return self._bounded_factory

    @http_factory.setter
    def http_factory(self, daphnes: HTTPFactory) -> None:
        limits = EdgeLimits.from_settings()
        self._bounded_factory = AddressCap(BoundedHTTPFactory(self, limits), limits)


class BoundedCommandLine(CommandLineInterface):  # type: ignore[misc]
    server_class = BoundedServer


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.settings")
    ensure_services()  # before kb.asgi reads the settings, which only read where the servers are
    BoundedCommandLine.entrypoint()


if __name__ == "__main__":
    main()
