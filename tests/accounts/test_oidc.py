"""Single sign-on pieces that need no provider: group sync, the groups claim, break-glass passwords,
and misconfiguration. The whole flow against a real provider is tests/web/test_sso.py."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import authenticate
from django.contrib.auth.models import Group
from django.core.exceptions import SuspiciousOperation
from django.test import RequestFactory

from accounts.oidc import claimed_groups, discovery_url, user_sync_groups
from tests.conftest import manage, service_env


def test_groups_become_exactly_the_providers(people: dict[str, Any]) -> None:
    dave = people["dave"]  # engineering + hr locally
    kept = user_sync_groups(user=dave, names=["engineering", "finance", "contractors"], create=False)
    assert kept == ["engineering", "finance"]
    assert set(dave.groups.values_list("name", flat=True)) == {"engineering", "finance"}  # hr removed
    assert not Group.objects.filter(name="contractors").exists()
    assert user_sync_groups(user=dave, names=["contractors"], create=True) == ["contractors"]
    assert list(dave.groups.values_list("name", flat=True)) == ["contractors"]
    assert user_sync_groups(user=dave, names=[], create=False) == []
    assert not dave.groups.exists()


def test_a_group_removed_at_the_provider_is_gone_from_retrieval_at_once(people: dict[str, Any]) -> None:
    from accounts.acl import user_principals

    hr = people["groups"]["hr"]
    assert f"g:{hr.pk}" in user_principals(people["dave"])
    user_sync_groups(user=people["dave"], names=["engineering"], create=False)
    assert f"g:{hr.pk}" not in user_principals(people["dave"])


@pytest.mark.parametrize(
    ("claims", "expected"),
    [
        ({"groups": ["b", "a", " a ", ""]}, ["a", "b"]),
        ({"groups": "staff"}, ["staff"]),
        ({}, []),
    ],
)
def test_the_groups_claim(claims: dict[str, Any], expected: list[str]) -> None:
    assert claimed_groups(claims, "groups") == expected


def test_a_malformed_groups_claim_refuses_the_sign_in() -> None:
    with pytest.raises(SuspiciousOperation, match="'roles' claim is not a list of group names"):
        claimed_groups({"roles": [{"id": 1}]}, "roles")


def test_discovery_url_accepts_the_issuer_or_the_document(settings: Any) -> None:
    settings.KB_OIDC_DISCOVERY_URL = "https://login.example.com/realms/acme/"
    assert discovery_url() == "https://login.example.com/realms/acme/.well-known/openid-configuration"
    settings.KB_OIDC_DISCOVERY_URL = "https://idp.example.com/.well-known/openid-configuration"
    assert discovery_url() == "https://idp.example.com/.well-known/openid-configuration"


def test_with_local_passwords_off_only_a_superuser_may_use_one(people: dict[str, Any], settings: Any) -> None:
    login = RequestFactory().post("/accounts/login/")  # login throttling (django-axes) needs the request
    assert authenticate(login, username="alice", password="alice") == people["alice"]
    settings.KB_LOCAL_PASSWORDS = False
    assert authenticate(login, username="alice", password="alice") is None
    assert authenticate(login, username="admin", password="admin") == people["admin"]  # break-glass


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"KB_OIDC_CLIENT_ID": "kb"}, "single sign-on needs KB_OIDC_DISCOVERY_URL, KB_OIDC_CLIENT_SECRET too"),
        ({"KB_OIDC_DISCOVERY_URL": "https://idp.example.com", "KB_OIDC_CLIENT_ID": "kb", "KB_OIDC_CLIENT_SECRET": "s",
          "KB_OIDC_SCOPES": "email"}, "KB_OIDC_SCOPES must include openid"),
        ({"KB_LOCAL_PASSWORDS": "off"}, "KB_LOCAL_PASSWORDS=off needs single sign-on"),
        ({"KB_OIDC_DISCOVERY_URL": "https://idp.example.com", "KB_OIDC_CLIENT_ID": "kb",
          "KB_OIDC_CLIENT_SECRET_FILE": "/nonexistent/secret"}, "KB_OIDC_CLIENT_SECRET_FILE: cannot read"),
    ],
)
@pytest.mark.django_db
def test_incomplete_sso_settings_are_a_startup_error(env: dict[str, str], message: str) -> None:
    result = manage("check", env=service_env(**env))
    assert result.returncode != 0
    assert message in result.stderr


def test_admins_see_which_account_an_identity_signs_in_as(people: dict[str, Any], client: Any) -> None:
    from accounts.models import OidcIdentity

    OidcIdentity.objects.create(user=people["alice"], issuer="https://login.example.com/realms/acme", subject="f3a1")
    client.force_login(people["admin"])
    page = client.get("/admin/accounts/oidcidentity/").content.decode()
    assert "f3a1" in page and "alice" in page
