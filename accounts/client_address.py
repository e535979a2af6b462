"""The address a request came from, as login throttling (django-axes) counts it.

Behind a reverse proxy REMOTE_ADDR is the proxy's: counted by it, five wrong passwords would lock
that username out for everyone. X-Forwarded-For names the client, but anyone can send one, so it is
read only from the proxies KB_TRUSTED_PROXIES names, and only its right-most untrusted address
counts (each trusted proxy appends the peer it saw; what lies left of that came from the client).
Proxies write an entry as `ip`, `ip:port`, `[v6]` or `[v6]:port`, some in quotes; an entry in none of
these forms makes the address unknown (None: refused where an address must match, one shared key for
throttling), never the trusted proxy's own address, which would make every client the proxy.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import Any

from django.conf import settings

from kb.env import Network

_BRACKETED = re.compile(r"^\[([^\]]+)\](?::(\d{1,5}))?$")
_V4_PORT = re.compile(r"^([0-9.]+):(\d{1,5})$")


def _address(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address of one X-Forwarded-For entry in any form a proxy writes, None when it is none of them."""
    text = value.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1].strip()
    bracketed, with_port = _BRACKETED.match(text), _V4_PORT.match(text)
    if bracketed:
        text = bracketed.group(1)
    elif with_port:
        text = with_port.group(1)
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if bracketed and address.version != 6:
        return None  # "[192.0.2.1]" is no form a proxy writes
    return (address.ipv4_mapped or address) if isinstance(address, ipaddress.IPv6Address) else address


def client_address(remote_addr: str | None, forwarded_for: str, trusted: Sequence[Network]) -> str | None:
    """The client's address: `remote_addr` unless it is a trusted proxy, then the right-most address of
    `forwarded_for` (X-Forwarded-For) that is not. An unreadable entry makes the client unknown (None)."""
    if remote_addr is None or not trusted:
        return remote_addr
    client = remote_addr
    for entry in reversed([*(e for e in forwarded_for.split(",") if e.strip()), remote_addr]):
        address = _address(entry)
        if address is None:
            return None
        client = str(address)
        if not any(address in network for network in trusted):
            return client
    return client  # only trusted proxies: the request came from the left-most of them


def request_client_address(request: Any) -> str | None:
    """AXES_CLIENT_IP_CALLABLE: the client's address of a request, by KB_TRUSTED_PROXIES."""
    meta = request.META
    return client_address(meta.get("REMOTE_ADDR"), meta.get("HTTP_X_FORWARDED_FOR", ""), settings.KB_TRUSTED_PROXIES)
