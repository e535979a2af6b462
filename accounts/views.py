"""Sign-in and sign-out pages (passwords and, where configured, the company's single sign-on), and the
language choice of the user menu."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseRedirect
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST
from mozilla_django_oidc.views import OIDCLogoutView

from accounts.language import language_cookie, supported, user_language_set


class LoginView(auth_views.LoginView):
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context.update(
            sso_enabled=settings.KB_OIDC_ENABLED,
            sso_name=settings.KB_OIDC_PROVIDER_NAME,
            sso_failed=self.request.GET.get("sso") == "failed",
            local_passwords=settings.KB_LOCAL_PASSWORDS,
        )
        return context


class LogoutView(OIDCLogoutView):
    """POST only. After a single sign-on it also sends the browser to end the provider's session
    (OIDC_OP_LOGOUT_URL_METHOD); after a password sign-in it is Django's plain logout."""


@require_POST
def language(request: HttpRequest) -> HttpResponse:
    """The language menu: stored on a signed-in user (accounts.language), and in the language cookie for the
    pages shown signed out; then back to `next` or the page it was chosen on (the Referer, sent same-origin only:
    the form does not echo the page's address, so no page carries a path it was asked for) or the start page."""
    code = supported(request.POST.get("language"))
    if code is None:
        known = ", ".join(c for c, _ in settings.LANGUAGES)
        return HttpResponseBadRequest(f"language: one of {known}", content_type="text/plain")
    if request.user.is_authenticated:
        user_language_set(user=request.user, language=code)
    target = request.POST.get("next") or request.headers.get("Referer", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        target = "/"
    response = HttpResponseRedirect(target)
    language_cookie(response, code)
    return response
