"""How the API knows who is calling: a session (with CSRF) or a scoped Bearer token."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja.errors import HttpError
from ninja.security import HttpBearer, django_auth

from accounts.tokens import TokenScopeMissing, token_authenticate


class BearerToken(HttpBearer):
    """`Authorization: Bearer kb_…`; the request then runs as the token's owner, so every
    ACL rule applies unchanged. `scope` None accepts any live token (e.g. /api/me)."""

    def __init__(self, scope: str | None = None) -> None:
        super().__init__()
        self.scope = None if scope is None else str(scope)  # the plain value, also in messages

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        try:
            found = token_authenticate(token, scope=self.scope)
        except TokenScopeMissing as exc:
            raise HttpError(403, str(exc)) from None
        if found is None:
            return None
        request.user = found.user
        return found.user


def api_auth(scope: str | None = None) -> list[Any]:
    """Auth for an operation: a token carrying `scope`, or a signed-in session (which has every scope)."""
    return [BearerToken(scope), django_auth]
