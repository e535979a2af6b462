from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from chat.review.evalset import ExportRefused, judgements_export


def _since(value: str) -> datetime:
    found = parse_datetime(value)
    if found is None:
        day = parse_date(value)
        if day is None:
            raise CommandError(f"--since {value!r} is not a date (YYYY-MM-DD) or an ISO date and time")
        found = datetime(day.year, day.month, day.day)
    return found if timezone.is_aware(found) else timezone.make_aware(found)


class Command(BaseCommand):
    help = ("Write the judged answers as OUT_DIR/questions.jsonl and OUT_DIR/ood.jsonl, in the evaluation set's "
            "format (docs/CHAT.md, Judgements), with only what --user may read.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("out_dir", type=Path)
        parser.add_argument("--user", required=True, help="Who exports: a superuser, or staff with chat.export_judgement")
        parser.add_argument("--since", type=_since, help="Only verdicts given since this date (YYYY-MM-DD) or time")

    def handle(self, *args: Any, **options: Any) -> str:
        exporter = get_user_model().objects.filter(username=options["user"]).first()
        try:
            found = judgements_export(exporter=exporter, since=options["since"])
        except ExportRefused as refused:
            raise CommandError(f"{options['user']}: {refused}") from None
        found.write(options["out_dir"])
        left = "; ".join(f"{reason}: {n}" for reason, n in sorted(found.left_out.items())) or "none"
        return f"{len(found.questions)} questions, {len(found.ood)} out-of-domain; left out: {left}\n"
