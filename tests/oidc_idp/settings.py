"""Settings of the test identity provider (a separate Django project; not the knowledge base's settings).

Run as its own process on loopback: `IDP_DIR=... django-admin runserver --settings tests.oidc_idp.settings`.
IDP_DIR holds its SQLite database and its RSA signing key (made by bootstrap.py).
"""

from __future__ import annotations

import os
from pathlib import Path

DIR = Path(os.environ["IDP_DIR"])
SECRET_KEY = "test-identity-provider-only"
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "tests.oidc_idp.urls"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": DIR / "idp.sqlite3"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [Path(__file__).parent / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
# The knowledge base runs on the same host (127.0.0.1), another port: cookies must not collide.
SESSION_COOKIE_NAME = "idp_session"
CSRF_COOKIE_NAME = "idp_csrf"
LOGIN_URL = "/login/"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
USE_TZ = True
OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_RSA_PRIVATE_KEY": (DIR / "signing-key.pem").read_text() if (DIR / "signing-key.pem").exists() else "",
    "OAUTH2_VALIDATOR_CLASS": "tests.oidc_idp.validator.GroupsClaimValidator",
    "SCOPES": {
        "openid": "OpenID Connect",
        "profile": "Name and username",
        "email": "E-mail address",
        "groups": "Group membership",
    },
    "PKCE_REQUIRED": True,
    "OIDC_RP_INITIATED_LOGOUT_ENABLED": True,
    "OIDC_RP_INITIATED_LOGOUT_ALWAYS_PROMPT": False,
}
