"""A source's credential (an HTTP token, or a password for git over https): from the operator's
KB_SOURCE_<NAME>_TOKEN setting (or its _FILE, a Docker/Kubernetes secret), else the source's write-only
`secret` field. Never in the location, on a command line, in a message or in anything shown back."""

from __future__ import annotations

import os
import re

from django.core.exceptions import ImproperlyConfigured

from kb.env import env_secret
from kb.library.models import Source
from kb.library.sources.listing import ListingError


def secret_setting(source: Source | str) -> str:
    """The setting naming a source's token: KB_SOURCE_ + its name in capitals, other characters as _ + _TOKEN."""
    name = source if isinstance(source, str) else source.name
    return f"KB_SOURCE_{re.sub(r'[^A-Z0-9]+', '_', name.upper()).strip('_')}_TOKEN"


def secret_setting_set(name: str) -> bool:
    """Whether the operator set a token for sources of this name (the setting or its _FILE)."""
    setting = secret_setting(name)
    return bool(os.environ.get(setting) or os.environ.get(f"{setting}_FILE"))


def source_secret(source: Source) -> str | None:
    """The credential a kind sends with its requests (git: the password git asks for; site: the
    `Authorization: Bearer` token), or None. The setting wins over the stored field; a setting that cannot
    be read fails the listing with the reason (never the value)."""
    try:
        value = env_secret(secret_setting(source))
    except ImproperlyConfigured as exc:
        raise ListingError(str(exc)) from None
    return value or source.secret or None


def secret_state(source: Source) -> str:
    """What may be shown of a source's credential: where it comes from, never what it is."""
    try:
        if env_secret(secret_setting(source)):
            return f"set by {secret_setting(source)}"
    except ImproperlyConfigured:
        return f"{secret_setting(source)} cannot be read"
    return "set" if source.secret else "not set"


def scrub(text: str, secret: str | None) -> str:
    """`text` with any occurrence of the secret replaced, for messages that quote a program's output."""
    return text.replace(secret, "…") if secret else text
