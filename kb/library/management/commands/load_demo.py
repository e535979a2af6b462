from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from kb.library.demo import load_demo


class Command(BaseCommand):
    help = "Create the demo company's people, folders and documents (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--sync", action="store_true", help="Index in this process instead of on a worker")

    def handle(self, *args: Any, sync: bool, **options: Any) -> str:
        summary = load_demo(sync=sync)
        return "demo documents: " + "\n".join(summary.lines(list_pending=False))
