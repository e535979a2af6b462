"""Local passwords, which a company using single sign-on can switch off for all but a break-glass superuser."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend


class PasswordBackend(ModelBackend):
    def user_can_authenticate(self, user: Any) -> bool:
        """With KB_LOCAL_PASSWORDS off only superusers may use a password: the way in when the
        identity provider is down or misconfigured. Everyone else signs in through it."""
        if not super().user_can_authenticate(user):
            return False
        return bool(settings.KB_LOCAL_PASSWORDS or user.is_superuser)
