"""Sign-in and sign-out pages: passwords and, where configured, the company's single sign-on."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from mozilla_django_oidc.views import OIDCLogoutView


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
