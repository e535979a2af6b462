"""Content-Security-Policy on every response.

Every script and style is a static file served by the app, so the policy allows no inline
code and no other origin. Two exceptions, each opted into by the response itself:
the document viewer shows images a document references (https:, loaded at display
time), and the API docs page (django-ninja's bundled Swagger UI) sets inline styles.
A view that sets its own Content-Security-Policy (downloads) keeps it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any
from urllib.parse import urlsplit

from django.http import HttpRequest, HttpResponseBase

BASE_POLICY = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self' data:",
    "font-src": "'self'",
    "connect-src": "'self'",  # CSP3: 'self' also matches ws(s):// on the same host and port
    "object-src": "'none'",
    "base-uri": "'none'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}
REMOTE_IMAGES = "'self' https: data:"


def _policy(**changes: str) -> str:
    policy = {**BASE_POLICY, **{k.replace("_", "-"): v for k, v in changes.items()}}
    return "; ".join(f"{name} {value}" for name, value in policy.items())


def _form_action() -> str:
    """Forms post to us; with single sign-on, logout redirects the form to the provider's end-session
    endpoint, which the browser checks against form-action too."""
    from django.conf import settings

    if not settings.KB_OIDC_ENABLED:
        return "'self'"
    provider = urlsplit(settings.KB_OIDC_DISCOVERY_URL)
    return f"'self' {provider.scheme}://{provider.netloc}"


def allow_remote_images(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """Let this view's page load https: images (the document viewer, and only it)."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        response = view(request, *args, **kwargs)
        response.kb_remote_images = True  # type: ignore[attr-defined]
        return response

    return wrapper


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response
        form_action = _form_action()
        self.strict = _policy(form_action=form_action)
        self.with_remote_images = _policy(form_action=form_action, img_src=REMOTE_IMAGES)
        self.api_docs = _policy(form_action=form_action, style_src="'self' 'unsafe-inline'")

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if "Content-Security-Policy" not in response:
            if getattr(response, "kb_remote_images", False):
                response["Content-Security-Policy"] = self.with_remote_images
            elif request.path.startswith("/api/docs"):
                response["Content-Security-Policy"] = self.api_docs
            else:
                response["Content-Security-Policy"] = self.strict
        return response
