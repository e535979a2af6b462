from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand

from kb.library.sources.watch import Watcher


class Command(BaseCommand):
    help = ("Watch the folder sources that have `watch` on and queue a sync a few seconds after a file in one is "
            "saved (kb.library.sources.watch); runs until stopped. `make run` starts one; one per deployment, on "
            "the machine that has the directories.")
    # `make run` ran them in `migrate` before it starts this; a restart after a crash need not run them again.
    requires_system_checks: list[str] = []

    def handle(self, *args: Any, **options: Any) -> None:
        stop = threading.Event()

        def stopping(signum: int, frame: FrameType | None) -> None:
            stop.set()

        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, stopping)
        Watcher().run(stop)
