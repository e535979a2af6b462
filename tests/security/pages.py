"""Reading an admin page for a test that asserts something is absent from it.

An absence proves nothing on the wrong page (the login form, an error, a redirect elsewhere), so the page is
first asserted to be the one meant: status 200 after redirects, a signed-in admin page, and a marker of it.
tests/test_absence_asserts.py counts `admin_page` as that presence.
"""

from __future__ import annotations

from django.test import Client

CHANGELIST = 'id="changelist"'  # a model's list of rows
MISSING = "doesn’t exist. Perhaps it was deleted?"  # where the admin sends a row the reader may not open


def admin_page(client: Client, url: str, marker: str) -> str:
    """The text of `url` after redirects, asserted to be a signed-in admin page (status 200) holding `marker`."""
    response = client.get(url, follow=True)
    assert response.status_code == 200, url
    page = response.content.decode()
    assert 'id="logout-form"' in page, f"{url}: not a signed-in admin page"
    assert marker in page, (url, marker)
    return page
