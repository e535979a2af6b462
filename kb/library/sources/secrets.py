"""A source's credential (an HTTP token, or a password for git over https): from the operator's
KB_SOURCE_<NAME>_TOKEN setting (or its _FILE, a Docker/Kubernetes secret), else the source's write-only
`secret` field. Never in the location, on a command line, in a message or in anything shown back.

A Git source's webhook secret (kb.library.sources.webhooks: what a forge signs its push deliveries with) is kept
the same way: KB_SOURCE_<NAME>_WEBHOOK_SECRET (or its _FILE), else the write-only `webhook_secret` field."""

from __future__ import annotations

import os
import re

from django.core.exceptions import ImproperlyConfigured

from kb.env import env_secret
from kb.library.models import Source
from kb.library.sources.listing import ListingError

TOKEN, WEBHOOK = "TOKEN", "WEBHOOK_SECRET"  # the settings' last words: the credential sent, the secret received


def secret_setting(source: Source | str, what: str = TOKEN) -> str:
    """The setting naming a source's token (or, with WEBHOOK, its webhook secret): KB_SOURCE_ + its name in
    capitals, other characters as _, + _TOKEN (_WEBHOOK_SECRET)."""
    name = source if isinstance(source, str) else source.name
    return f"KB_SOURCE_{re.sub(r'[^A-Z0-9]+', '_', name.upper()).strip('_')}_{what}"


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


def webhook_secret(source: Source) -> str | None:
    """The secret a forge signs the source's push webhooks with, or None (pushes are then refused). The setting
    wins over the stored field; a setting that cannot be read raises ImproperlyConfigured (its reason, never the value)."""
    return env_secret(secret_setting(source, WEBHOOK)) or source.webhook_secret or None


def secret_state(source: Source, what: str = TOKEN) -> str:
    """What may be shown of a source's credential (or, with WEBHOOK, its webhook secret): where it comes from,
    never what it is."""
    setting = secret_setting(source, what)
    try:
        if env_secret(setting):
            return f"set by {setting}"
    except ImproperlyConfigured:
        return f"{setting} cannot be read"
    return "set" if (source.webhook_secret if what == WEBHOOK else source.secret) else "not set"


def scrub(text: str, secret: str | None) -> str:
    """`text` with any occurrence of the secret replaced, for messages that quote a program's output."""
    return text.replace(secret, "…") if secret else text
