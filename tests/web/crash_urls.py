"""The app's own URLs plus a page and the Ask API failing on purpose: the error tests' server error, raised by a
real view (tests/web/test_errors.py through the test client, test_browser_errors.py in a Daphne of its own)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path

from kb import urls

SECRET = "flux capacitor melted at 0x7f3a"  # the exception's text: the log has it, no page may


def crash(request: HttpRequest) -> HttpResponse:
    raise RuntimeError(SECRET)


urlpatterns = [path("crash/", crash), path("api/ask", crash), *urls.urlpatterns]
handler500 = urls.handler500
