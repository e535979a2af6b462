"""`make run`'s launcher (kb.runtime.launcher.supervise: its signals, shutdown and lifeline) with stand-in children.

Run as `python -m tests.robust.stand_in_launcher` with KB_VAR_DIR set: it owns the real embedded PostgreSQL
and Redis there as `make run` does, then starts two stand-ins for Daphne and a Celery worker, each slow to
stop (SIGTERM takes STOP_SECONDS) and with a child of its own in its process group, as a worker's pool
process is. Booting the real app takes a minute of CPU; the signal handling is the same either way, and
tests/test_make_run.py boots the real one.
"""

from __future__ import annotations

import os
import sys

from kb.runtime.launcher import Launcher, say, supervise
from kb.runtime.lifeline import Lifeline

READY = "stand-ins ready"
STOP_SECONDS = 3

STAND_IN = f"""
import signal, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # its pool: same process group
signal.signal(signal.SIGTERM, lambda *_: (time.sleep({STOP_SECONDS}), sys.exit(0)))
time.sleep(600)
"""


def boot(launcher: Launcher) -> None:
    launcher.own("postgres")
    launcher.own("redis")
    for name in ("the web server (stand-in)", "the worker (stand-in)"):
        launcher.spawn(name, [sys.executable, "-c", STAND_IN])
    say(READY)


def main() -> None:
    launcher = Launcher(host="127.0.0.1", port=0, env=dict(os.environ), lifeline=Lifeline.start())
    sys.exit(supervise(launcher, boot))


if __name__ == "__main__":
    main()
