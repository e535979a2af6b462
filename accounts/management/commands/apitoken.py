from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.tokens import token_create


class Command(BaseCommand):
    help = "Create an API token for USERNAME and print it (it is stored hashed and shown only once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="A label to recognise the token in the admin")

    def handle(self, *args: Any, username: str, name: str, **options: Any) -> str:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}")
        if not user.is_active:
            raise CommandError(f"user {username!r} is inactive")
        _, raw = token_create(user=user, name=name)
        return raw
