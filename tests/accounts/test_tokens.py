from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from accounts.models import ApiToken, token_digest
from accounts.tokens import token_create, token_revoke


def test_apitoken_prints_a_token_that_is_stored_only_hashed(people: dict[str, Any]) -> None:
    out = StringIO()
    call_command("apitoken", "alice", stdout=out)
    raw = out.getvalue().strip()
    assert raw.startswith("kb_") and len(raw) > 30
    stored = ApiToken.objects.get(user=people["alice"])
    assert stored.digest == token_digest(raw)
    assert raw not in (stored.digest, stored.prefix)


def test_apitoken_for_an_unknown_user_is_a_clear_error(db: None) -> None:
    with pytest.raises(CommandError, match="no user named 'nobody'"):
        call_command("apitoken", "nobody")


def test_bearer_token_authenticates_the_api(people: dict[str, Any], client: Client) -> None:
    _, raw = token_create(user=people["dave"])
    response = client.get("/api/me", headers={"Authorization": f"Bearer {raw}"})
    assert response.status_code == 200
    assert response.json() == {"username": "dave", "groups": ["engineering", "hr"], "is_staff": False}


def test_revoked_unknown_and_missing_tokens_are_refused(people: dict[str, Any], client: Client) -> None:
    token, raw = token_create(user=people["bob"])
    token_revoke(token=token)
    assert client.get("/api/me", headers={"Authorization": f"Bearer {raw}"}).status_code == 401
    assert client.get("/api/me", headers={"Authorization": "Bearer kb_made_up"}).status_code == 401
    assert client.get("/api/me").status_code == 401


def test_token_of_a_deactivated_user_is_refused(people: dict[str, Any], client: Client) -> None:
    _, raw = token_create(user=people["carol"])
    people["carol"].is_active = False
    people["carol"].save()
    assert client.get("/api/me", headers={"Authorization": f"Bearer {raw}"}).status_code == 401


def test_session_login_also_works_for_the_api(people: dict[str, Any], client: Client) -> None:
    client.force_login(people["alice"])
    assert client.get("/api/me").json()["username"] == "alice"


def test_admin_revokes_tokens(people: dict[str, Any], client: Client) -> None:
    token, raw = token_create(user=people["alice"])
    client.force_login(people["admin"])
    response = client.post(
        "/admin/accounts/apitoken/", {"action": "revoke", "_selected_action": [token.pk]}, follow=True
    )
    assert response.status_code == 200
    token.refresh_from_db()
    assert token.revoked_at is not None
    client.logout()
    assert client.get("/api/me", headers={"Authorization": f"Bearer {raw}"}).status_code == 401


def test_login_and_logout_pages(people: dict[str, Any], client: Client) -> None:
    page = client.get("/accounts/login/")
    assert page.status_code == 200 and b'name="username"' in page.content
    assert client.get("/").status_code == 302
    response = client.post("/accounts/login/", {"username": "alice", "password": "alice"})
    assert response.status_code == 302
    assert client.get("/").status_code == 200
    assert client.post("/accounts/logout/").status_code == 302
    assert client.get("/").status_code == 302


def test_openapi_schema_and_docs_are_served_without_a_cdn(people: dict[str, Any], client: Client) -> None:
    schema = client.get("/api/openapi.json")
    assert schema.status_code == 200
    assert "/api/search" in schema.json()["paths"]
    client.force_login(people["alice"])
    docs = client.get("/api/docs")
    assert docs.status_code == 200
    assert b"/static/ninja/swagger-ui-bundle.js" in docs.content
    assert b"cdn." not in docs.content


def test_apitoken_takes_scopes_and_an_expiry(people: dict[str, Any]) -> None:
    from datetime import timedelta

    from django.utils import timezone

    out = StringIO()
    call_command("apitoken", "alice", "--scopes", "documents:read, search", "--expires", "90d", stdout=out)
    token = ApiToken.objects.get(digest=token_digest(out.getvalue().strip()))
    assert token.scopes == ["search", "documents:read"]
    assert token.expires_at is not None
    assert abs(token.expires_at - (timezone.now() + timedelta(days=90))) < timedelta(minutes=1)
    call_command("apitoken", "alice", "--expires", "never", stdout=StringIO())
    assert ApiToken.objects.filter(user=people["alice"], expires_at__isnull=True, scopes=["search", "ask"]).exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scopes", "search,admin"], "unknown scope(s) admin; choose from search, ask, documents:read, documents:write"),
        (["--scopes", " , "], "give at least one scope"),
        (["--expires", "soon"], "expiry 'soon' is not a duration such as 12h, 90d, 4w, 1y, or 'never'"),
        (["--expires", "0d"], "expiry '0d' is not a duration"),
    ],
)
def test_apitoken_rejects_bad_scopes_and_expiries(people: dict[str, Any], args: list[str], message: str) -> None:
    with pytest.raises(CommandError) as raised:
        call_command("apitoken", "alice", *args)
    assert str(raised.value).startswith(message)
    assert not ApiToken.objects.exists()


def test_a_token_works_only_within_its_scopes_and_lifetime(people: dict[str, Any], client: Client) -> None:
    from datetime import timedelta

    from django.utils import timezone

    token, raw = token_create(user=people["alice"], scopes=["ask"], expires_at=timezone.now() + timedelta(hours=1))
    auth = {"Authorization": f"Bearer {raw}"}
    assert client.get("/api/me", headers=auth).status_code == 200  # any live token says who it is
    refused = client.get("/api/search", {"q": "vacation"}, headers=auth)
    assert refused.status_code == 403
    assert refused.json() == {"detail": "this token lacks the 'search' scope (it has: ask)"}
    assert client.get("/api/conversations", headers=auth).status_code == 200
    token.refresh_from_db()
    first_use = token.last_used_at
    assert first_use is not None
    client.get("/api/conversations", headers=auth)
    token.refresh_from_db()
    assert token.last_used_at == first_use  # recorded at most once a minute
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=first_use - timedelta(minutes=2))
    client.get("/api/conversations", headers=auth)
    token.refresh_from_db()
    assert token.last_used_at > first_use
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert client.get("/api/conversations", headers=auth).status_code == 401


def test_a_token_never_reaches_beyond_its_owner(people: dict[str, Any], client: Client) -> None:
    """Every scope on a non-admin's token still leaves admin-only endpoints out of reach, and a
    user who loses admin rights loses them on their tokens at once."""
    _, raw = token_create(user=people["alice"], scopes=["search", "ask", "documents:read", "documents:write"])
    auth = {"Authorization": f"Bearer {raw}"}
    assert client.post("/api/folders", {"name": "x"}, content_type="application/json", headers=auth).status_code == 404
    _, admin_raw = token_create(user=people["admin"], scopes=["documents:write"])
    admin_auth = {"Authorization": f"Bearer {admin_raw}"}
    made = client.post("/api/folders", {"name": "one"}, content_type="application/json", headers=admin_auth)
    assert made.status_code == 201
    people["admin"].is_superuser = people["admin"].is_staff = False
    people["admin"].save()
    again = client.post("/api/folders", {"name": "two"}, content_type="application/json", headers=admin_auth)
    assert again.status_code == 404


def test_admin_lists_tokens_with_scopes_expiry_and_last_use(people: dict[str, Any], client: Client) -> None:
    token, raw = token_create(user=people["bob"], name="nightly sync", scopes=["documents:read"])
    client.get("/api/me", headers={"Authorization": f"Bearer {raw}"})
    client.force_login(people["admin"])
    page = client.get("/admin/accounts/apitoken/").content.decode()
    assert "nightly sync" in page and "documents:read" in page
    token.refresh_from_db()
    assert token.last_used_at is not None
    assert "Last used at" in page
