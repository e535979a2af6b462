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
