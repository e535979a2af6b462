"""Admin for API tokens, sign-in identities and accounts. Whoever may link an identity or change an account
may sign in as anyone, the superuser included, or join any document's group: only superusers may."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy, ngettext

from accounts.models import ApiToken, OidcIdentity
from accounts.tokens import token_revoke


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("prefix", "user", "name", "scope_list", "expires_at", "last_used_at", "revoked_at")
    list_filter = ("revoked_at", "expires_at", "last_used_at")
    list_select_related = ("user",)
    search_fields = ("user__username", "name", "prefix")
    # `user` too: moving a token to another user would let its holder act as them. Scopes and expiry
    # are chosen when the token is made; to change them, make a new token and revoke this one.
    readonly_fields = ("user", "prefix", "scopes", "expires_at", "created_at", "last_used_at", "revoked_at")
    fields = ("user", "name", "prefix", "scopes", "expires_at", "created_at", "last_used_at", "revoked_at")
    actions = ("revoke",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[ApiToken]:
        """Staff who are not superusers list, revoke and delete only their own tokens: another's is their credential."""
        tokens: QuerySet[ApiToken] = super().get_queryset(request)
        return tokens if request.user.is_superuser else tokens.filter(user__in=[request.user.pk])

    def has_add_permission(self, request: HttpRequest) -> bool:
        # A raw token must be shown to its owner once; `manage.py apitoken` does that.
        return False

    @admin.display(description=gettext_lazy("What it may do"))
    def scope_list(self, obj: ApiToken) -> str:
        return ", ".join(obj.scopes)

    @admin.action(description=gettext_lazy("Revoke the selected tokens"), permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        live = list(queryset.filter(revoked_at__isnull=True))
        for token in live:
            token_revoke(token=token)
        self.message_user(request, ngettext("Revoked %(n)d token", "Revoked %(n)d tokens", len(live)) % {"n": len(live)})


def is_superuser(request: HttpRequest) -> bool:
    return bool(request.user.is_active and request.user.is_superuser)


class SuperuserWritesMixin:
    """Django's own account admins, read-only to staff who are not superusers: `change_user` sets groups, superuser
    status and passwords, `change_group` a group's permissions."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return is_superuser(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_superuser(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_superuser(request)


@admin.register(OidcIdentity)
class OidcIdentityAdmin(SuperuserWritesMixin, admin.ModelAdmin):
    """Which account a single sign-on identity (issuer + sub) signs in as. Adding a row by hand hands an
    existing local account to its owner's provider identity; sign-in never matches by e-mail. Superusers
    only, even to look: staff who could link their own provider `sub` to a superuser would sign in as one."""

    list_display = ("user", "subject", "issuer", "created_at")
    list_select_related = ("user",)
    search_fields = ("user__username", "subject")
    raw_id_fields = ("user",)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_superuser(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_superuser(request)


class AccountAdmin(SuperuserWritesMixin, UserAdmin):
    pass


class AccountGroupAdmin(SuperuserWritesMixin, GroupAdmin):
    pass


admin.site.unregister(User)
admin.site.register(User, AccountAdmin)
admin.site.unregister(Group)
admin.site.register(Group, AccountGroupAdmin)
