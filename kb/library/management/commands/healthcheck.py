from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from kb.health import health_report


class Command(BaseCommand):
    help = "Run the /healthz checks from the command line; exits non-zero naming what failed."

    def handle(self, *args: Any, **options: Any) -> None:
        report = health_report()
        self.stdout.write(json.dumps(report, indent=2))
        if not report["ok"]:
            reasons = "; ".join(f"{name}: {report['checks'][name]['error']}" for name in report["failed"])
            raise CommandError(reasons)
