"""Issue 12 item 3: nothing the launcher started outlives it, whatever signal ends it.

A closed terminal (SIGHUP to the process group) used to kill the launcher outright and
leave Daphne, the worker and both servers running on the port; so did SIGKILL during the
shutdown that Ctrl-C starts. The launcher here is kb.runtime.launcher.supervise with stand-in
children (tests/robust/stand_in_launcher.py) and the real embedded servers; tests/test_make_run.py
boots the real app and stops it with Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from kb.runtime.embedded import free_port
from kb.runtime.launcher import CRASH_LOOP, Launcher
from kb.runtime.lifeline import Lifeline
from tests.conftest import OUTPUT, ROOT
from tests.robust.stand_in_launcher import READY
from tests.test_make_run import _our_processes

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def var_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One data directory for the module: PostgreSQL's initdb runs once, each launch starts it again there."""
    yield tmp_path_factory.mktemp("launcher") / "var"


def launch(var_dir: Path, name: str) -> subprocess.Popen[bytes]:
    """The stand-in launcher in its own process group, as a terminal runs it; returns once its children run."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "SECRET_KEY"}}
    env.update(KB_VAR_DIR=str(var_dir))
    OUTPUT.mkdir(exist_ok=True)
    log = OUTPUT / f"launcher-{name}.log"
    with open(log, "wb") as out:
        launcher = subprocess.Popen([sys.executable, "-m", "tests.robust.stand_in_launcher"], cwd=ROOT, env=env,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while READY not in log.read_text(errors="replace"):
        if launcher.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the stand-in launcher did not start ({launcher.poll()}):\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    return launcher


def running(launcher: subprocess.Popen[bytes], var_dir: Path) -> set[int]:
    """Every pid the launcher runs, once all are up: its descendants and the embedded servers."""
    servers = {int((var_dir / "pg" / "postmaster.pid").read_text().split()[0]),
               int((var_dir / "redis" / "redis.pid").read_text().strip())}
    deadline = time.monotonic() + 30
    while True:
        pids = {p.pid for p in psutil.Process(launcher.pid).children(recursive=True)} | {launcher.pid} | servers
        if len(pids) >= 7 or time.monotonic() > deadline:  # launcher, lifeline, 2 stand-ins + children, 2 servers
            break
        time.sleep(0.2)
    assert len(pids) >= 7, pids
    return pids


def hang_up(launcher: subprocess.Popen[bytes]) -> None:
    os.killpg(launcher.pid, signal.SIGHUP)  # what closing the terminal sends


def kill_while_stopping(launcher: subprocess.Popen[bytes]) -> None:
    os.killpg(launcher.pid, signal.SIGINT)
    time.sleep(1)  # the stand-ins take longer than this to stop: the launcher is killed mid-shutdown
    launcher.kill()


@pytest.mark.parametrize("end", [hang_up, kill_while_stopping], ids=["sighup", "sigint-then-sigkill"])
def test_nothing_outlives_the_launcher(var_dir: Path, end: Callable[[subprocess.Popen[bytes]], None]) -> None:
    launcher = launch(var_dir, end.__name__)
    pids = {launcher.pid}
    try:
        pids = running(launcher, var_dir)
        end(launcher)
        launcher.wait(30)
        deadline = time.monotonic() + 30
        while _our_processes(var_dir, pids) and time.monotonic() < deadline:
            time.sleep(0.5)
        leftovers = _our_processes(var_dir, pids)
        assert not leftovers, [p.info for p in leftovers]
    finally:
        if launcher.poll() is None:
            launcher.kill()
        for process in _our_processes(var_dir, pids):
            process.kill()


def test_a_child_that_keeps_dying_stops_the_app_after_a_few_restarts(capsys: pytest.CaptureFixture[str]) -> None:
    """A crash is healed by a restart (test_make_run kills Daphne and PostgreSQL); a crash loop is not
    hidden behind endless restarts: after CRASH_LOOP deaths in CRASH_WINDOW the launcher stops, saying why."""
    launcher = Launcher(host="127.0.0.1", port=free_port(), env=dict(os.environ), lifeline=Lifeline.start())
    try:
        launcher.spawn("the flaky worker", [sys.executable, "-c", "raise SystemExit(3)"])
        assert launcher.watch() == 1
    finally:
        launcher.shutdown()
        launcher.lifeline.release()
    said = capsys.readouterr().out
    assert said.count("the flaky worker exited with status 3; starting it again.") == CRASH_LOOP - 1, said
    assert f"the flaky worker exited with status 3 {CRASH_LOOP} times in" in said and "stopping" in said, said
