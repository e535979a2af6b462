"""Single sign-on end to end: a real OpenID Connect provider (django-oauth-toolkit, its own process and
SQLite) on loopback, the app under Daphne, and Chromium signing a person in through the provider."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import OUTPUT, ROOT, daphne, stop_process, wait_until_serving
from tests.factories import ingested_document

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CLIENT_ID, CLIENT_SECRET = "knowledge-base", "s3cret-for-the-test-provider"


class Provider:
    def __init__(self, directory: Path, base: str) -> None:
        self.directory, self.base = directory, base

    def admin(self, *args: str) -> None:
        """What an IT admin does in the provider's console, here its bootstrap script."""
        subprocess.run(
            [sys.executable, "-m", "tests.oidc_idp.bootstrap", str(self.directory), *args],
            cwd=ROOT, check=True, timeout=120, capture_output=True,
        )


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[Provider]:
    from kb.runtime.embedded import free_port

    directory = tmp_path / "idp"
    subprocess.run([sys.executable, "-m", "tests.oidc_idp.bootstrap", str(directory), "init"], cwd=ROOT, check=True,
                   timeout=120)
    port = free_port()
    base = f"http://127.0.0.1:{port}/"
    OUTPUT.mkdir(exist_ok=True)
    log = OUTPUT / "oidc-provider.log"
    env = {"PATH": "/usr/bin:/bin", "IDP_DIR": str(directory), "DJANGO_SETTINGS_MODULE": "tests.oidc_idp.settings",
           "PYTHONPATH": str(ROOT)}
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "django", "runserver", f"127.0.0.1:{port}", "--noreload"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        wait_until_serving(base, process, log, path="o/.well-known/openid-configuration")
        yield Provider(directory, base)
    finally:
        stop_process(process, 20)


def search_hits(page: Any, base: str, query: str) -> set[int]:
    # The first search loads the embedding model in the server: slow on a busy machine.
    response = page.request.get(base + "api/search", params={"q": query}, timeout=180_000)
    assert response.status == 200, response.text()
    return {hit["document_id"] for hit in response.json()["hits"] if hit["passed"]}


def listed_titles(page: Any, base: str) -> set[str]:
    response = page.request.get(base + "api/documents")
    assert response.status == 200, response.text()
    return {d["title"] for d in response.json()["items"]}


def sign_in(page: Any, base: str, *, expect_provider_form: bool) -> None:
    page.goto(base + "accounts/login/")
    page.click("#sso-login")
    if expect_provider_form:
        page.wait_for_selector("#idp-username")
        page.fill("#idp-username", "erin")
        page.fill("#idp-password", "erin-at-example")
        page.click("#idp-submit")
    page.wait_for_url(base)


def test_a_person_signs_in_with_the_company_provider_and_gets_exactly_its_groups(
    people: dict[str, Any], provider: Provider, browser: Any
) -> None:
    from django.contrib.auth.models import Group, User

    from accounts.models import OidcIdentity

    groups = people["groups"]
    runbook = ingested_document("# Deploy runbook\n\n## Rollback\n\nTo roll back a release, switch the blue-green "
                            "router back to the previous slot.\n", "runbook.md", public=False,
                            groups=[groups["engineering"]])
    leave = ingested_document("# Parental leave\n\n## Duration\n\nParental leave lasts sixteen weeks at full pay.\n",
                          "leave.md", public=False, groups=[groups["hr"]])
    ingested_document("# Payroll\n\n## Bonus pool\n\nThe confidential bonus pool is 4.2 million.\n", "payroll.md",
                  public=False, groups=[groups["finance"]])
    provider.admin("user", "erin", "--password", "erin-at-example", "--email", "erin@example.com",
                   "--groups", "engineering,hr,contractors")
    # A local account with the same name and e-mail: the provider's erin must not take it over.
    local = User.objects.create_user("erin", email="erin@example.com", password="local-erin")
    local.groups.set([groups["finance"]])

    with daphne(
        "sso",
        KB_OIDC_DISCOVERY_URL=provider.base + "o",
        KB_OIDC_CLIENT_ID=CLIENT_ID,
        KB_OIDC_CLIENT_SECRET=CLIENT_SECRET,
        KB_OIDC_SCOPES="openid profile email groups",
        KB_OIDC_PROVIDER_NAME="Example Corp",
        KB_LOCAL_PASSWORDS="off",
    ) as base:
        provider.admin("client", "--id", CLIENT_ID, "--secret", CLIENT_SECRET, "--redirect", base + "oidc/callback/",
                       "--post-logout", base + "accounts/login/")
        context = browser.new_context()
        page = context.new_page()
        try:
            page.goto(base + "accounts/login/")
            assert page.inner_text("#sso-login") == "Sign in with Example Corp"
            assert page.is_visible("text=Administrator sign-in")  # local passwords off: break-glass only

            sign_in(page, base, expect_provider_form=True)
            erin = User.objects.get(oidc_identities__subject__isnull=False)
            assert erin.username == "erin-2" and erin.pk != local.pk  # matched by sub, never by e-mail
            assert erin.email == "erin@example.com" and not erin.has_usable_password()
            assert list(local.groups.values_list("name", flat=True)) == ["finance"]
            assert set(erin.groups.values_list("name", flat=True)) == {"engineering", "hr"}  # contractors: unknown here
            assert not Group.objects.filter(name="contractors").exists()
            assert OidcIdentity.objects.get(user=erin).issuer == provider.base + "o"
            assert listed_titles(page, base) == {"Deploy runbook", "Parental leave"}
            assert leave.pk in search_hits(page, base, "How long is parental leave?")
            assert runbook.pk in search_hits(page, base, "How do I roll back a release?")

            # IT removes erin from hr at the provider; she signs out (ending the provider's session too)…
            provider.admin("user", "erin", "--password", "erin-at-example", "--groups", "engineering")
            page.click("summary.usermenu-trigger, .usermenu summary")
            page.click("text=Log out")
            page.wait_for_url(base + "accounts/login/")
            # …and signing in again asks the provider for her password: its session ended with ours.
            sign_in(page, base, expect_provider_form=True)
            assert User.objects.filter(username__startswith="erin").count() == 2  # matched by sub, not re-created
            assert set(erin.groups.values_list("name", flat=True)) == {"engineering"}
            assert listed_titles(page, base) == {"Deploy runbook"}
            assert leave.pk not in search_hits(page, base, "How long is parental leave?")
            assert runbook.pk in search_hits(page, base, "How do I roll back a release?")
        finally:
            page.screenshot(path=str(OUTPUT / "sso-final.png"))
            context.close()
