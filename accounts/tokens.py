"""Issuing and checking API tokens; the only code that sees a raw token."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.db.models import Q
from django.utils import timezone

from accounts.models import TOKEN_PREFIX, ApiToken, Scope, token_digest

_DURATION = re.compile(r"(\d{1,5})([hdwy])")
LAST_USED_RESOLUTION = timedelta(minutes=1)
_UNIT = {"h": timedelta(hours=1), "d": timedelta(days=1), "w": timedelta(weeks=1), "y": timedelta(days=365)}


class TokenScopeMissing(PermissionError):
    """A valid token used for something its scopes do not cover; the message names the scope."""


def parse_scopes(value: str | Iterable[str]) -> list[str]:
    """`"search,ask"` (or a list) as known scopes, in a stable order; ValueError names the unknown ones."""
    items = value.split(",") if isinstance(value, str) else list(value)
    wanted = {item.strip() for item in items if item.strip()}
    unknown = sorted(wanted - set(Scope.values))
    if unknown:
        raise ValueError(f"unknown scope(s) {', '.join(unknown)}; choose from {', '.join(Scope.values)}")
    if not wanted:
        raise ValueError(f"give at least one scope: {', '.join(Scope.values)}")
    return [scope for scope in Scope.values if scope in wanted]


def parse_expiry(value: str, *, now: datetime | None = None) -> datetime | None:
    """`90d`, `12h`, `4w`, `1y` from now, or `never` (None); ValueError says what is accepted."""
    text = value.strip().lower()
    if text == "never":
        return None
    match = _DURATION.fullmatch(text)
    if match is None or int(match.group(1)) == 0:
        raise ValueError(f"expiry {value!r} is not a duration such as 12h, 90d, 4w, 1y, or 'never'")
    return (now or timezone.now()) + int(match.group(1)) * _UNIT[match.group(2)]


def token_create(
    *,
    user: User,
    name: str = "",
    scopes: Iterable[str] = (Scope.SEARCH, Scope.ASK),
    expires_at: datetime | None = None,
) -> tuple[ApiToken, str]:
    """A new token and its raw value; the raw value is not stored and cannot be shown again."""
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user,
        name=name,
        prefix=raw[:10],
        digest=token_digest(raw),
        scopes=parse_scopes(scopes),
        expires_at=expires_at,
    )
    return token, raw


def token_authenticate(raw: str, *, scope: str | None) -> ApiToken | None:
    """The live token for `raw` (its user loaded), or None: unknown, revoked, expired, or its user inactive.

    With `scope`, a live token without that scope raises TokenScopeMissing rather than
    passing as anonymous, so the caller learns which scope to ask for. Use is recorded.
    """
    if not raw.startswith(TOKEN_PREFIX):
        return None
    now = timezone.now()
    token = (
        ApiToken.objects.select_related("user")
        .filter(digest=token_digest(raw), revoked_at__isnull=True, user__is_active=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .first()
    )
    if token is None:
        return None
    if scope is not None and scope not in token.scopes:
        raise TokenScopeMissing(f"this token lacks the {scope!r} scope (it has: {', '.join(token.scopes) or 'none'})")
    # At most one write a minute per token: a busy script should not turn every call into an UPDATE.
    stale_use = Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
    ApiToken.objects.filter(stale_use, pk=token.pk).update(last_used_at=now)
    return token


def token_revoke(*, token: ApiToken) -> None:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
