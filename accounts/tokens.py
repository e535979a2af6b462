"""Issuing and checking API tokens; the only code that sees a raw token."""

from __future__ import annotations

import secrets

from django.contrib.auth.models import User
from django.utils import timezone

from accounts.models import TOKEN_PREFIX, ApiToken, token_digest


def token_create(*, user: User, name: str = "") -> tuple[ApiToken, str]:
    """A new token and its raw value; the raw value is not stored and cannot be shown again."""
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(user=user, name=name, prefix=raw[:10], digest=token_digest(raw))
    return token, raw


def token_user(raw: str) -> User | None:
    """The active user a raw token belongs to, or None (unknown, revoked, or inactive user)."""
    if not raw.startswith(TOKEN_PREFIX):
        return None
    token = (
        ApiToken.objects.select_related("user")
        .filter(digest=token_digest(raw), revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    if token is None:
        return None
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    return token.user


def token_revoke(*, token: ApiToken) -> None:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
