from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kb.library.models import Source

FIELDS = ("listed", "unchanged", "changed", "new", "deleted", "renamed", "failed", "chunks_embedded")


class Command(BaseCommand):
    help = ("Run one sync of a source through the worker (the ingest queue). With --wait, wait for it to end, "
            "print its counts and exit non-zero when it failed, was held or a file in it failed.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--wait", action="store_true", help="Wait until the run ends and print its counts")
        parser.add_argument("--confirm", action="store_true",
                            help="Go ahead with deletions a previous run held (the listing shrank past the guard)")

    def handle(self, *args: Any, name: str, wait: bool, confirm: bool, **options: Any) -> str:
        from kombu.exceptions import OperationalError

        from kb.library.tasks import sync_source

        source = Source.objects.filter(name=name).first()
        if source is None:
            raise CommandError(f"no source named {name!r}")
        try:
            job = sync_source.delay(source.pk, confirm)
        except OperationalError as exc:
            raise CommandError(f"could not queue the run: the broker is unreachable ({exc})") from None
        if not wait:
            return f"queued a sync of {name!r} (job {job.id})"
        outcome = job.get(propagate=False)
        if not isinstance(outcome, dict):
            raise CommandError(f"the run of {name!r} ended in an error: {outcome!r}")
        counts = " ".join(f"{field}={outcome[field]}" for field in FIELDS)
        for path, reason in outcome["failures"]:
            self.stderr.write(f"failed: {path}: {reason}")
        status, reason = outcome["status"], outcome["reason"]
        if status != Source.RunStatus.OK:
            raise CommandError(f"{name}: {status}: {reason}\n{counts}")
        if outcome["failed"]:
            raise CommandError(f"{name}: {outcome['failed']} file(s) failed\n{counts}")
        return f"{name}: ok\n{counts}"
