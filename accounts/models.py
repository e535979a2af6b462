"""API tokens: stored as SHA-256 digests, shown once, revocable, scoped, optionally expiring."""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils.translation import gettext_lazy as _

TOKEN_PREFIX = "kb_"  # noqa: S105  (a public prefix, not a secret)


class Scope(models.TextChoices):
    """What a token may be used for; within that, it never reaches beyond its owner's own access."""

    SEARCH = "search", "Search passages"
    ASK = "ask", "Ask questions, read and review conversations"
    DOCUMENTS_READ = "documents:read", "List and read documents and folders"
    DOCUMENTS_WRITE = "documents:write", "Upload, re-index, change access, delete"


def token_digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, help_text="First characters, to recognise a token without storing it")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    scopes = ArrayField(models.CharField(max_length=32, choices=Scope.choices), default=list, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: never expires")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = _("API token")
        verbose_name_plural = _("API tokens")

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"

    @property
    def active(self) -> bool:
        return self.revoked_at is None


class OidcIdentity(models.Model):
    """Who a person is at the identity provider: the issuer's stable `sub`, never the e-mail alone."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oidc_identities")
    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "OIDC identity"
        verbose_name_plural = "OIDC identities"
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="accounts_oidc_issuer_subject")]

    def __str__(self) -> str:
        return f"{self.subject} @ {self.issuer}"


class Profile(models.Model):
    """What a person chose for themselves; one row, made the first time they choose something."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="kb_profile")
    # One of settings.LANGUAGES (accounts.language checks it); empty: the browser's language.
    language = models.CharField(max_length=16, blank=True)

    def __str__(self) -> str:
        return f"profile of {self.user}"
