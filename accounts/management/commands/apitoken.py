from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import Scope
from accounts.tokens import parse_expiry, parse_scopes, token_create


class Command(BaseCommand):
    help = (
        "Create an API token for USERNAME and print it (it is stored hashed and shown only once). "
        "The token acts as USERNAME: it never reaches beyond that user's own access."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="A label to recognise the token in the admin")
        parser.add_argument(
            "--scopes",
            default="search,ask",
            help=f"Comma-separated, from: {', '.join(Scope.values)} (default: search,ask)",
        )
        parser.add_argument(
            "--expires", default="90d", help="Lifetime such as 12h, 90d, 4w, 1y, or 'never' (default: 90d)"
        )

    def handle(self, *args: Any, username: str, name: str, scopes: str, expires: str, **options: Any) -> str:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}")
        if not user.is_active:
            raise CommandError(f"user {username!r} is inactive")
        try:
            chosen, expires_at = parse_scopes(scopes), parse_expiry(expires)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        _, raw = token_create(user=user, name=name, scopes=chosen, expires_at=expires_at)
        return raw
