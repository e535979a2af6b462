"""Where a source may point: the operator's settings, never a staff user's (docs/SOURCES.md, "Where sources
may point"). Checked when a source is added or changed and again at every run, since the settings may have
changed in between.

- A folder source, and a Git source cloned from a local path or file:// URL, must lie under one of
  KB_SOURCE_FOLDER_ROOTS (none by default: refused), and never in or above the server's own data (the var
  directory, the media root with every upload's original, the sources' caches, the static root) or the
  kernel's and system's directories. Files are read with `read_listed`, which no link swapped in after the
  listing can redirect.
- A site source reaches a host named in KB_SOURCE_SITE_HOSTS or an address in KB_SOURCE_SITE_NETWORKS.
  A loopback address only for a host:port listed as such, a private one only for a listed host or a listed
  private network; link-local and cloud metadata addresses and the server's own database, Redis and web
  ports never. The name is resolved once per request and the connection goes to the address checked
  (`site_address_check`), so DNS cannot answer one address to the check and another to the connection.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings

from kb.library.sources.listing import ListingError

FOLDER_ROOTS = "KB_SOURCE_FOLDER_ROOTS"
SITE_HOSTS = "KB_SOURCE_SITE_HOSTS"
SITE_NETWORKS = "KB_SOURCE_SITE_NETWORKS"

# The kernel's and the system's own files: never a source, whatever root is listed.
SYSTEM_PLACES = ("/proc", "/sys", "/dev", "/run", "/boot", "/etc")
# Cloud instance metadata (credentials of the machine's role): never reached, whatever is listed.
METADATA_HOSTS = frozenset({"metadata", "metadata.google.internal", "metadata.goog", "instance-data",
                            "instance-data.ec2.internal", "metadata.azure.com", "metadata.tencentyun.com"})
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200", "168.63.129.16", "192.0.0.192"))

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


# --------------------------------------------------------------------------- local paths


def forbidden_places() -> list[Path]:
    """The server's own data and the system's directories, as real paths: no source reads in or above them."""
    places = [Path(settings.VAR_DIR), Path(settings.MEDIA_ROOT), Path(settings.VAR_DIR) / "sources",
              Path(settings.STATIC_ROOT), *(Path(p) for p in SYSTEM_PLACES)]
    return [Path(os.path.realpath(p)) for p in places]


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def local_root_check(path: str) -> Path:
    """The real path of a folder source's directory (or a local Git repository), links resolved; ListingError,
    naming KB_SOURCE_FOLDER_ROOTS, unless it lies under one of the allowed roots and neither in nor above
    any of `forbidden_places`."""
    if not path.strip() or not os.path.isabs(path.strip()):
        raise ListingError(f"{path!r}: a local source needs an absolute path on the server, under one of "
                           f"{FOLDER_ROOTS}")
    real = Path(os.path.realpath(path.strip()))
    roots = [Path(os.path.realpath(r)) for r in settings.KB_SOURCE_FOLDER_ROOTS]
    if not roots:
        raise ListingError(f"{path!r}: no local directory may be a source on this server; the operator lists the "
                           f"directories that may in {FOLDER_ROOTS}")
    if not any(_within(real, root) for root in roots):
        raise ListingError(f"{path!r}: not under a directory this server allows sources in ({FOLDER_ROOTS}: "
                           f"{', '.join(map(str, roots))})")
    for place in forbidden_places():
        if _within(real, place) or _within(place, real):
            raise ListingError(f"{path!r}: {'inside' if _within(real, place) else 'holds'} {place}, the server's "
                               f"own data or system files, which no source may read (whatever {FOLDER_ROOTS} lists)")
    return real


_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # a FIFO swapped in does not block the open


def read_listed(root: Path, relative: str, expected: os.stat_result) -> bytes:
    """The bytes of the file `relative` (a POSIX path) under `root`, as listed: every directory on the way
    and the file itself are opened without following a symbolic link, from `root`'s descriptor, and the
    file opened must be the one listed (device, inode, size, modification time as `expected`, an lstat).
    OSError with the reason otherwise: a link or another file swapped in since the listing is never read."""
    parts = [part for part in relative.split("/") if part]
    if not parts or any(part in (".", "..") for part in parts):
        raise OSError(f"{relative!r}: not a path inside the source")
    fd = os.open(root, _DIRECTORY)
    try:
        for part in parts[:-1]:
            try:
                inner = os.open(part, _DIRECTORY, dir_fd=fd)
            except OSError as exc:
                raise OSError(f"{relative}: the directory {part!r} changed since it was listed "
                              f"(a symbolic link or no directory now): {exc.strerror}") from None
            os.close(fd)
            fd = inner
        try:
            file = os.open(parts[-1], _FILE, dir_fd=fd)
        except OSError as exc:
            raise OSError(f"{relative}: changed since it was listed (a symbolic link or gone now): {exc.strerror}") from None
    finally:
        os.close(fd)
    with os.fdopen(file, "rb") as handle:
        found = os.fstat(handle.fileno())
        if not stat.S_ISREG(found.st_mode) or (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns) != (
                expected.st_dev, expected.st_ino, expected.st_size, expected.st_mtime_ns):
            raise OSError(f"{relative}: another file than the one listed (replaced or changed since); "
                          "the next run reads it")
        os.set_blocking(handle.fileno(), True)
        data = handle.read(found.st_size + 1)
    if len(data) != found.st_size:
        raise OSError(f"{relative}: changed while it was read; the next run reads it")
    return data


# --------------------------------------------------------------------------- sites


@dataclass(frozen=True)
class _Listed:
    host: str  # lower case; an IPv6 address without brackets
    port: int | None


def _listed_hosts() -> list[_Listed]:
    """KB_SOURCE_SITE_HOSTS read as host or host:port ([v6] or [v6]:port for IPv6 addresses)."""
    listed = []
    for value in settings.KB_SOURCE_SITE_HOSTS:
        parts = urlsplit("//" + value.strip().lower())
        try:
            port = parts.port
        except ValueError:
            raise ListingError(f"{SITE_HOSTS}: {value!r} is not a host name or host:port") from None
        if not parts.hostname:
            raise ListingError(f"{SITE_HOSTS}: {value!r} is not a host name or host:port")
        listed.append(_Listed(parts.hostname, port))
    return listed


def _address(host: str) -> IPAddress | None:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    return address.ipv4_mapped or address if isinstance(address, ipaddress.IPv6Address) else address


def _own_ports() -> set[int]:
    """The ports of this server's database, Redis and web server: never a site's, on any local or private address."""
    database = settings.DATABASES["default"]
    ports = {int(database.get("PORT") or 5432), 8000, int(os.environ.get("PORT", "8000") or 8000)}
    redis = urlsplit(settings.REDIS_URL)
    if redis.scheme in ("redis", "rediss"):
        ports.add(redis.port or 6379)
    return ports


def _refusal(address: IPAddress, host: str, port: int, listed: list[_Listed]) -> str:
    """Why `address` (what `host` resolved to) may not be reached on `port`; "" when it may."""
    if address in METADATA_ADDRESSES or address.is_link_local:
        return f"{address} is a link-local or cloud metadata address, never reached by a source"
    if address.is_unspecified or address.is_multicast or (address.is_reserved and not address.is_loopback):
        return f"{address} is not an address a site can be on"
    if not address.is_global and port in _own_ports():
        return f"port {port} on {address} may be this server's own database, Redis or web server"
    exact = any(entry.host == host and entry.port == port for entry in listed)
    named = exact or any(entry.host == host and entry.port is None for entry in listed)
    if address.is_loopback:
        return "" if exact else (f"{address} is this server itself (loopback): list {host}:{port} in {SITE_HOSTS} "
                                 "to allow that one port")
    if named:
        return ""
    networks = [n for n in settings.KB_SOURCE_SITE_NETWORKS if address.version == n.version and address in n]
    if address.is_global and networks:
        return ""
    if not address.is_global and any(not n.is_global for n in networks):
        return ""
    return (f"{host} ({address}) is not on a host or network this server allows sites on: list it in "
            f"{SITE_HOSTS} or its network in {SITE_NETWORKS}")


def site_address_check(host: str, port: int) -> str:
    """The IP address to connect to for `host`:`port`, resolved once here: every address the name has must be
    allowed (a name answering one good and one forbidden address is refused). ListingError naming the
    setting otherwise. The caller connects to the address returned, never to the name again."""
    host = host.lower().rstrip(".")
    listed = _listed_hosts()
    if host in METADATA_HOSTS:
        raise ListingError(f"{host} is a cloud metadata service, never reached by a source")
    literal = _address(host)
    if literal is not None:
        addresses = [literal]
    else:
        try:
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            raise ListingError(f"{host}: the name could not be resolved ({exc})") from None
        addresses = list(dict.fromkeys(a for a in (_address(str(info[4][0])) for info in found) if a is not None))
        if not addresses:
            raise ListingError(f"{host}: the name has no address")
    for address in addresses:
        reason = _refusal(address, host, port, listed)
        if reason:
            raise ListingError(reason)
    return str(addresses[0])


def site_location_check(url: str) -> None:
    """Whether a site source's start URL is on a host the operator allows, when it is added or changed: a
    listed name passes without being resolved (each request resolves and checks it); any other name must
    resolve to allowed addresses now."""
    parts = urlsplit(url.strip())
    host = (parts.hostname or "").rstrip(".")
    port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    listed = _listed_hosts()
    if _address(host) is None and host not in METADATA_HOSTS and any(entry.host == host for entry in listed):
        return
    if not listed and not settings.KB_SOURCE_SITE_NETWORKS:
        raise ListingError(f"{host}: no site may be a source on this server yet; the operator lists the hosts "
                           f"that may in {SITE_HOSTS} (or their networks in {SITE_NETWORKS})")
    site_address_check(host, port)
