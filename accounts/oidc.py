"""OpenID Connect sign-in through mozilla-django-oidc, configured from the provider's discovery document.

mozilla-django-oidc does the protocol (authorization code flow with PKCE, state and nonce,
ID token signature against the provider's JWKS); this module adds what a company needs:
endpoints read from `KB_OIDC_DISCOVERY_URL` instead of five hand-copied URLs, people matched
by the stable `sub` claim of that issuer (never by e-mail alone, which can be reassigned), and
group membership copied from the groups claim at every sign-in, so a group removed at the
provider ends that access at the person's next sign-in (retrieval reads groups per query).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any
from urllib.parse import urlencode

import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ImproperlyConfigured, SuspiciousOperation
from django.db import transaction
from django.http import HttpRequest
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
)

from accounts.models import OidcIdentity

log = logging.getLogger(__name__)

# mozilla-django-oidc setting -> key of the discovery document that provides it.
DISCOVERED = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}
METADATA_TTL = 3600.0

_metadata: tuple[float, dict[str, Any]] | None = None
_metadata_lock = threading.Lock()


def discovery_url() -> str:
    """`KB_OIDC_DISCOVERY_URL` as given, or the issuer with the standard well-known path appended."""
    url: str = settings.KB_OIDC_DISCOVERY_URL
    if url.rstrip("/").endswith("/.well-known/openid-configuration"):
        return url
    return url.rstrip("/") + "/.well-known/openid-configuration"


def provider_metadata() -> dict[str, Any]:
    """The provider's discovery document, fetched on first use and kept for an hour."""
    global _metadata
    with _metadata_lock:
        if _metadata is not None and time.monotonic() - _metadata[0] < METADATA_TTL:
            return _metadata[1]
        url = discovery_url()
        try:
            response = requests.get(url, timeout=settings.KB_OIDC_TIMEOUT)
            response.raise_for_status()
            document: dict[str, Any] = response.json()
        except (requests.RequestException, ValueError) as exc:
            if _metadata is not None:  # a provider blip: keep signing in with what it said an hour ago
                log.warning("OIDC discovery %s failed (%s); using the previous document", url, exc)
                return _metadata[1]
            raise ImproperlyConfigured(f"KB_OIDC_DISCOVERY_URL: cannot read {url}: {exc}") from None
        missing = [key for key in ("issuer", *DISCOVERED.values()) if not document.get(key)]
        if missing:
            raise ImproperlyConfigured(f"KB_OIDC_DISCOVERY_URL: {url} does not name {', '.join(missing)}")
        _metadata = (time.monotonic(), document)
        return document


def oidc_setting(attr: str, *default: Any) -> Any:
    """mozilla-django-oidc's settings lookup, with the provider's endpoints from discovery."""
    if attr in DISCOVERED:
        return provider_metadata()[DISCOVERED[attr]]
    return import_from_settings(attr, *default)


def provider_logout_url(request: HttpRequest) -> str:
    """Where logout sends the browser: the provider's end-session endpoint when it has one (ending the
    single sign-on session too), else our login page."""
    after = request.build_absolute_uri(settings.LOGOUT_REDIRECT_URL)
    id_token = request.session.get("oidc_id_token")
    if not id_token:  # signed in with a password (break-glass): no provider session to end
        return after
    endpoint = provider_metadata().get("end_session_endpoint")
    if not endpoint:
        return after
    params = {"client_id": settings.OIDC_RP_CLIENT_ID, "post_logout_redirect_uri": after, "id_token_hint": id_token}
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{urlencode(params)}"


def claimed_groups(claims: dict[str, Any], claim: str) -> list[str]:
    """The group names in `claims[claim]`: a list of strings (or one string); absent means none."""
    value = claims.get(claim, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise SuspiciousOperation(f"the {claim!r} claim is not a list of group names")
    return sorted({item.strip() for item in value if item.strip()})


@transaction.atomic
def user_sync_groups(*, user: Any, names: list[str], create: bool) -> list[str]:
    """Make `user`'s groups exactly the provider's `names` (unknown names created only with `create`);
    returns the names kept. Retrieval reads groups per query, so this is the whole revocation."""
    existing = {group.name: group for group in Group.objects.filter(name__in=names)}
    if create:
        for name in names:
            if name not in existing:
                existing[name], _ = Group.objects.get_or_create(name=name)
    user.groups.set(existing.values())
    return sorted(existing)


def _unique_username(wanted: str) -> str:
    """`wanted`, or `wanted-2`, `wanted-3`… when a local account already has that name (never taken over)."""
    users = get_user_model().objects
    base = (wanted or "user")[:140]
    name, n = base, 1
    while users.filter(username__iexact=name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


class GroupSyncBackend(OIDCAuthenticationBackend):
    """Authenticates the code flow's result: finds the person by (issuer, sub), creates them on first
    sign-in, and refreshes their name, e-mail and groups from the claims every time."""

    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Not the parent's __init__: it reads every endpoint, and Django builds this backend on each
        # request to load the session's user. Endpoints are read only when a sign-in needs them.
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None
        self.UserModel = get_user_model()

    @property
    def OIDC_OP_TOKEN_ENDPOINT(self) -> str:  # the parent's attribute names
        return str(oidc_setting("OIDC_OP_TOKEN_ENDPOINT"))

    @property
    def OIDC_OP_USER_ENDPOINT(self) -> str:
        return str(oidc_setting("OIDC_OP_USER_ENDPOINT"))

    @property
    def OIDC_OP_JWKS_ENDPOINT(self) -> str:
        return str(oidc_setting("OIDC_OP_JWKS_ENDPOINT"))

    def filter_users_by_claims(self, claims: dict[str, Any]) -> Any:
        subject = claims.get("sub")
        if not subject:
            return self.UserModel.objects.none()
        return self.UserModel.objects.filter(
            oidc_identities__issuer=provider_metadata()["issuer"], oidc_identities__subject=subject
        )

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        return bool(claims.get("sub"))

    def describe_user_by_claims(self, claims: dict[str, Any]) -> str:
        return f"subject {claims.get('sub')!r}"

    @transaction.atomic
    def create_user(self, claims: dict[str, Any]) -> Any:
        wanted = claims.get(settings.KB_OIDC_USERNAME_CLAIM) or claims.get("email") or claims["sub"]
        user = self.UserModel.objects.create_user(_unique_username(str(wanted)))  # no usable password
        OidcIdentity.objects.create(user=user, issuer=provider_metadata()["issuer"], subject=claims["sub"])
        return self.update_user(user, claims)

    def update_user(self, user: Any, claims: dict[str, Any]) -> Any:
        user.email = claims.get("email", user.email) or ""
        user.first_name = (claims.get("given_name") or user.first_name)[:150]
        user.last_name = (claims.get("family_name") or user.last_name)[:150]
        user.save(update_fields=["email", "first_name", "last_name"])
        kept = user_sync_groups(
            user=user,
            names=claimed_groups(claims, settings.KB_OIDC_GROUPS_CLAIM),
            create=settings.KB_OIDC_CREATE_GROUPS,
        )
        log.info("OIDC sign-in of %s (sub %s): groups %s", user.username, claims.get("sub"), kept)
        return user


class DiscoveryAuthenticationRequestView(OIDCAuthenticationRequestView):
    get_settings = staticmethod(oidc_setting)


class DiscoveryCallbackView(OIDCAuthenticationCallbackView):
    get_settings = staticmethod(oidc_setting)
