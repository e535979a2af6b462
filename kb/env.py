"""Typed readers for settings from the environment; bad values fail at start-up, naming the variable."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Collection, Iterable
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

Network = ipaddress.IPv4Network | ipaddress.IPv6Network  # one entry of a list of addresses or networks (env_networks)

TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be one of 1/0, true/false, yes/no, on/off (got {raw!r})")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer (got {raw!r})") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum} (got {value})")
    return value


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number (got {raw!r})") from None


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: Collection[str], *, dotted_path: bool = False) -> str:
    """One of `choices`, or with `dotted_path` the dotted path of a class of the operator's own (it holds a dot)."""
    value = os.environ.get(name, default).strip()
    if value in choices or (dotted_path and "." in value):
        return value
    allowed = ", ".join(choices) + (" or a dotted class path" if dotted_path else "")
    raise ImproperlyConfigured(f"{name} must be one of {allowed} (got {value!r})")


def ip_networks(values: Iterable[str], name: str = "networks") -> list[Network]:
    """Addresses or networks (CIDR) as networks; a bad one fails, naming `name` (the setting it came from)."""
    networks = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value, strict=False))
        except ValueError:
            raise ImproperlyConfigured(f"{name} must list IP addresses or networks such as 10.0.0.0/8 (got {value!r})") from None
    return networks


def env_networks(name: str) -> list[Network]:
    """A comma-separated list of addresses or networks; unset or empty: none."""
    return ip_networks(env_list(name, []), name)


def env_secret(name: str) -> str:
    """`NAME`, or the contents of the file named by `NAME_FILE` (Docker/Kubernetes secrets)."""
    value = os.environ.get(name, "")
    path = os.environ.get(f"{name}_FILE", "")
    if value and path:
        raise ImproperlyConfigured(f"set either {name} or {name}_FILE, not both")
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE: cannot read {path}: {exc.strerror}") from None
    return value
