"""Login throttling behind a reverse proxy (issue 28, item 11): by REMOTE_ADDR, every sign-in comes from the proxy, and
five wrong passwords lock that username (the break-glass superuser included) out for everyone. KB_TRUSTED_PROXIES
names the proxy; the address that counts is then the right-most X-Forwarded-For entry it did not add, and an
X-Forwarded-For from anyone else is ignored."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from accounts.client_address import client_address
from kb.env import env_networks, ip_networks
from tests.security.test_login_throttle import fail, sign_in, signed_in_as

pytestmark = pytest.mark.django_db

PROXY, OTHER_PROXY = "10.0.0.2", "10.0.5.9"
ATTACKER, COLLEAGUE = "203.0.113.7", "198.51.100.9"
ADMIN_LOGIN = "/admin/login/?next=/admin/"


def via_proxy(client_address: str, proxy: str = PROXY) -> Client:
    """A browser at `client_address` behind `proxy`, which appends the peer it saw to X-Forwarded-For."""
    return Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR=client_address)


def test_behind_a_trusted_proxy_one_client_is_locked_out_and_another_still_signs_in(
    people: dict[str, Any], settings: Any
) -> None:
    settings.KB_TRUSTED_PROXIES = ip_networks(["10.0.0.0/16"])
    attacker = via_proxy(ATTACKER)
    assert fail(attacker, "admin", django_settings.AXES_FAILURE_LIMIT, path=ADMIN_LOGIN)[-1] == 429
    assert sign_in(attacker, "admin", "admin", path=ADMIN_LOGIN).status_code == 429

    # The superuser, through the same proxy (and through another of the trusted ones), from their own address.
    for proxy in (PROXY, OTHER_PROXY):
        admin = sign_in(via_proxy(COLLEAGUE, proxy), "admin", "admin", path=ADMIN_LOGIN)
        assert admin.status_code == 302 and signed_in_as(admin) == "admin", proxy
    # The attacker's own X-Forwarded-For is kept by the proxy, left of what it appends: it changes nothing.
    spoofed = Client(REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR=f"{COLLEAGUE}, {ATTACKER}")
    assert sign_in(spoofed, "admin", "admin", path=ADMIN_LOGIN).status_code == 429


def test_x_forwarded_for_from_an_untrusted_address_is_ignored(people: dict[str, Any], settings: Any) -> None:
    settings.KB_TRUSTED_PROXIES = ip_networks([PROXY])
    attacker = Client(REMOTE_ADDR=ATTACKER)  # straight to the server, each try claiming another address
    for n in range(django_settings.AXES_FAILURE_LIMIT):
        sign_in(Client(REMOTE_ADDR=ATTACKER, HTTP_X_FORWARDED_FOR=f"192.0.2.{n}"), "alice", "wrong")
    assert sign_in(attacker, "alice", "alice").status_code == 429
    claims_colleague = Client(REMOTE_ADDR=ATTACKER, HTTP_X_FORWARDED_FOR=COLLEAGUE)
    assert sign_in(claims_colleague, "alice", "alice").status_code == 429


def test_without_trusted_proxies_x_forwarded_for_is_ignored(people: dict[str, Any], settings: Any) -> None:
    settings.KB_TRUSTED_PROXIES = []  # the default
    assert fail(via_proxy(ATTACKER), "carol", django_settings.AXES_FAILURE_LIMIT)[-1] == 429
    assert sign_in(via_proxy(COLLEAGUE), "carol", "carol").status_code == 429  # one address: the proxy's


def test_the_address_read_from_a_chain_of_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    trusted = ip_networks(["10.0.0.0/8", "fd00::/8"])
    assert client_address(PROXY, ATTACKER, trusted) == ATTACKER
    assert client_address(PROXY, f"{COLLEAGUE}, {ATTACKER}, 10.1.2.3", trusted) == ATTACKER  # two proxies
    assert client_address(ATTACKER, COLLEAGUE, trusted) == ATTACKER
    assert client_address(PROXY, "", trusted) == PROXY  # the proxy's own request (its health probe)
    assert client_address(PROXY, "not-an-address", trusted) is None  # garbage: unknown, never the proxy
    assert client_address(f"::ffff:{PROXY}", ATTACKER, trusted) == ATTACKER
    assert client_address("fd00::1", "2001:db8::7", trusted) == "2001:db8::7"
    assert client_address(PROXY, ATTACKER, []) == PROXY
    monkeypatch.setenv("KB_TRUSTED_PROXIES", "10.0.0.0/8, 10.0.0.0/33")
    with pytest.raises(ImproperlyConfigured, match="KB_TRUSTED_PROXIES must list"):  # kb.settings fails at start-up
        env_networks("KB_TRUSTED_PROXIES")


@pytest.mark.parametrize(("written", "client"), [
    ("203.0.113.5:4711", "203.0.113.5"),
    ('"203.0.113.5:4711"', "203.0.113.5"),
    ("2001:db8::7", "2001:db8::7"),
    ("[2001:db8::7]", "2001:db8::7"),
    ("[2001:db8::7]:4711", "2001:db8::7"),
    ('"[2001:db8::7]:4711"', "2001:db8::7"),
    ("[::ffff:203.0.113.5]:80", "203.0.113.5"),
])
def test_forwarded_entries_are_read_as_proxies_write_them(written: str, client: str) -> None:
    trusted = ip_networks(["10.0.0.0/8"])
    assert client_address(PROXY, written, trusted) == client
    assert client_address(PROXY, f"{written}, 10.1.2.3", trusted) == client  # behind a second proxy


@pytest.mark.parametrize("written", ["unknown", "_hidden", "203.0.113.5:", "203.0.113.5:port", "[203.0.113.5]",
                                     "[2001:db8::7", "2001:db8::7]:80", "203.0.113.5:4711:1", '"203.0.113.5'])
def test_an_entry_no_proxy_writes_makes_the_client_unknown_never_the_proxy(written: str) -> None:
    trusted = ip_networks(["10.0.0.0/8"])
    assert client_address(PROXY, written, trusted) is None
    # Left of a readable untrusted entry it is never reached: the client is the right-most untrusted one.
    assert client_address(PROXY, f"{written}, {ATTACKER}", trusted) == ATTACKER


def test_a_port_in_x_forwarded_for_does_not_lock_out_everyone_behind_the_proxy(
    people: dict[str, Any], settings: Any
) -> None:
    """A proxy writing ip:port (as some do): each client is still counted apart, not as the proxy."""
    settings.KB_TRUSTED_PROXIES = ip_networks(["10.0.0.0/16"])
    attacker = via_proxy(f"{ATTACKER}:4711")
    assert fail(attacker, "admin", django_settings.AXES_FAILURE_LIMIT, path=ADMIN_LOGIN)[-1] == 429
    colleague = sign_in(via_proxy(f"{COLLEAGUE}:5123"), "admin", "admin", path=ADMIN_LOGIN)
    assert colleague.status_code == 302 and signed_in_as(colleague) == "admin"
