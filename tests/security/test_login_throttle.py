"""Issue 12 item 7: login throttling (django-axes) on the sign-in page and the admin's.

Before it, a script could try passwords against /accounts/login/ as fast as the server
answered. Now KB_LOGIN_FAILURES wrong passwords for one username from one address pause that
pair (429, a page that says so and for how long), the right password included, until the
cool-off has passed; other people and other addresses sign in as usual; a success clears the count.
"""

from __future__ import annotations

from typing import Any

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.test import Client
from django.utils import timezone

pytestmark = pytest.mark.django_db

HERE, ELSEWHERE = "203.0.113.7", "198.51.100.9"


def sign_in(client: Client, username: str, password: str, *, path: str = "/accounts/login/") -> Any:
    return client.post(path, {"username": username, "password": password})


def signed_in_as(response: Any) -> str | None:
    user = response.wsgi_request.user
    return user.get_username() if user.is_authenticated else None


def fail(client: Client, username: str, times: int, *, path: str = "/accounts/login/") -> list[int]:
    return [sign_in(client, username, "not-the-password", path=path).status_code for _ in range(times)]


def test_wrong_passwords_lock_out_that_username_from_that_address(people: dict[str, Any]) -> None:
    limit = settings.AXES_FAILURE_LIMIT
    here = Client(REMOTE_ADDR=HERE)
    assert fail(here, "alice", limit - 1) == [200] * (limit - 1)  # the form again, with its error
    assert fail(here, "alice", 1) == [429]

    refused = sign_in(here, "alice", "alice")  # the right password, while paused
    assert refused.status_code == 429 and signed_in_as(refused) is None
    page = refused.content.decode()
    assert "Too many wrong passwords for <strong>alice</strong>" in page
    assert "0:15:00" in page  # the default cool-off, shown

    bob = sign_in(Client(REMOTE_ADDR=HERE), "bob", "bob")  # someone else at the same address
    assert bob.status_code == 302 and signed_in_as(bob) == "bob"
    alice_elsewhere = sign_in(Client(REMOTE_ADDR=ELSEWHERE), "alice", "alice")
    assert alice_elsewhere.status_code == 302 and signed_in_as(alice_elsewhere) == "alice"

    # Once the cool-off has passed since the last try, the right password works here again.
    AccessAttempt.objects.update(attempt_time=timezone.now() - settings.AXES_COOLOFF_TIME)
    after = sign_in(here, "alice", "alice")
    assert after.status_code == 302 and signed_in_as(after) == "alice"


def test_a_try_during_the_pause_restarts_it(people: dict[str, Any]) -> None:
    here = Client(REMOTE_ADDR=HERE)
    fail(here, "carol", settings.AXES_FAILURE_LIMIT)
    almost_over = timezone.now() - settings.AXES_COOLOFF_TIME * 0.9
    AccessAttempt.objects.update(attempt_time=almost_over)
    assert sign_in(here, "carol", "carol").status_code == 429
    AccessAttempt.objects.update(attempt_time=timezone.now() - settings.AXES_COOLOFF_TIME * 0.5)
    assert sign_in(here, "carol", "carol").status_code == 429  # the wait counts from the last try


def test_a_success_clears_the_count(people: dict[str, Any]) -> None:
    limit = settings.AXES_FAILURE_LIMIT
    here = Client(REMOTE_ADDR=HERE)
    assert fail(here, "dave", limit - 1) == [200] * (limit - 1)
    assert signed_in_as(sign_in(here, "dave", "dave")) == "dave"
    here.logout()
    assert fail(here, "dave", limit - 1) == [200] * (limit - 1)  # counted afresh: not locked at 1 more
    assert signed_in_as(sign_in(here, "dave", "dave")) == "dave"


def test_the_admin_sign_in_is_throttled_too(people: dict[str, Any]) -> None:
    here = Client(REMOTE_ADDR=HERE)
    statuses = fail(here, "admin", settings.AXES_FAILURE_LIMIT, path="/admin/login/?next=/admin/")
    assert statuses[-1] == 429
    assert sign_in(here, "admin", "admin", path="/admin/login/?next=/admin/").status_code == 429
    # One count for both pages: the pause holds on the main sign-in page as well.
    assert sign_in(here, "admin", "admin").status_code == 429
