"""Whatever the launcher started dies with it, however the launcher ends.

Two mechanisms, because neither covers everything alone:
- Daphne and the Celery worker are the launcher's children: the kernel sends them SIGTERM
  the moment it dies (PR_SET_PDEATHSIG), even when it is SIGKILLed.
- The embedded PostgreSQL and Redis daemonize (their parent is gone at once), and another
  process may share them. A watcher process in its own session holds the read end of a
  pipe whose write end only the launcher holds; end of file means the launcher is gone,
  then the watcher stops the children's process groups and leaves the embedded servers
  on the launcher's behalf (the last user stops them, as kb.runtime.embedded arranges).

Run as `python -m kb.runtime.lifeline`; it reads `group PGID` and `service NAME` lines on stdin,
and `release` when the launcher has stopped everything itself.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import IO

import psutil

PR_SET_PDEATHSIG = 1
GROUP_GRACE_SECONDS = 8.0


def die_with_parent() -> None:
    """A `preexec_fn`: SIGTERM this child when the process that spawned it dies (Linux)."""
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        return  # not Linux: the watcher still stops the child
    if os.getppid() != parent:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


@dataclass
class Lifeline:
    """The launcher's side: one pipe to the watcher; closing it (by exiting, however) sets the watcher off."""

    pipe: IO[str]
    watcher: subprocess.Popen[str]

    @classmethod
    def start(cls) -> Lifeline:
        watcher = subprocess.Popen(
            [sys.executable, "-m", "kb.runtime.lifeline"], stdin=subprocess.PIPE, text=True, start_new_session=True
        )
        if watcher.stdin is None:  # cannot happen with stdin=PIPE; keeps the type narrow
            raise RuntimeError("the lifeline watcher has no stdin")
        return cls(pipe=watcher.stdin, watcher=watcher)

    def _send(self, line: str) -> None:
        self.pipe.write(line + "\n")
        self.pipe.flush()

    def guard_group(self, pgid: int) -> None:
        self._send(f"group {pgid}")

    def guard_service(self, name: str) -> None:
        self._send(f"service {name}")

    def release(self) -> None:
        """Everything was stopped in order; the watcher may exit without doing anything."""
        try:
            self._send("release")
            self.pipe.close()
        except (BrokenPipeError, ValueError):
            pass
        self.watcher.wait(30)


def _group_alive(pgid: int) -> bool:
    for process in psutil.process_iter(["status"]):
        try:
            if process.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(process.pid) == pgid:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def stop_groups(pgids: list[int], grace: float = GROUP_GRACE_SECONDS) -> None:
    """SIGTERM each group, SIGKILL what is left after `grace` seconds."""
    for pgid in pgids:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while any(_group_alive(pgid) for pgid in pgids) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pgid in pgids:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def watch(stream: IO[str]) -> None:
    """Read the launcher's lines until end of file; then stop what it left, unless it released it."""
    from kb.runtime import embedded

    groups: list[int] = []
    services: list[str] = []
    for line in stream:
        word, _, value = line.strip().partition(" ")
        if word == "group":
            groups.append(int(value))
        elif word == "service":
            services.append(value)
        elif word == "release":
            return
    stop_groups(list(reversed(groups)))
    for name in reversed(services):
        embedded.leave(name)


def main() -> None:
    # Own session already; ignore the terminal's signals in case someone sends them by hand.
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    watch(sys.stdin)


if __name__ == "__main__":
    main()
