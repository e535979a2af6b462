"""`make run` end to end: real Daphne, real worker, embedded servers, clean shutdown."""

from __future__ import annotations

import asyncio
import http.cookiejar
import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import psutil
import pytest
import websockets

from kb.runtime.embedded import free_port
from tests.conftest import OUTPUT, ROOT

READY = re.compile(r"Knowledge base ready at (http://\S+)")


def _wait_for_line(log: Path, process: subprocess.Popen[bytes], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = READY.search(log.read_text(errors="replace"))
        if match:
            return match.group(1)
        if process.poll() is not None:
            pytest.fail(f"make run exited with {process.returncode}:\n{log.read_text()[-4000:]}")
        time.sleep(0.5)
    pytest.fail(f"make run was not ready within {timeout}s:\n{log.read_text()[-4000:]}")


def _login(base: str, username: str) -> tuple[urllib.request.OpenerDirector, http.cookiejar.CookieJar]:
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    page = opener.open(base + "accounts/login/").read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    form = urllib.parse.urlencode({"username": username, "password": username, "csrfmiddlewaretoken": token})
    opener.open(urllib.request.Request(base + "accounts/login/", data=form.encode(), headers={"Referer": base}))
    return opener, jar


async def _library_row(ws_url: str, origin: str, cookie: str | None) -> dict[str, object] | int:
    """The first row the library socket reports ready for the demo's documents, or the close code.

    The demo is indexed by the ingest worker after start-up, so rows may arrive queued or embedding first;
    the socket pushes each change, and a demo document must reach ready within two minutes."""
    headers = {"Cookie": cookie} if cookie else {}
    try:
        async with websockets.connect(ws_url, origin=origin, additional_headers=headers) as ws:
            await ws.send(json.dumps({"type": "watch", "ids": list(range(1, 100))}))
            deadline = time.monotonic() + 120
            while True:
                row: dict[str, object] = json.loads(await asyncio.wait_for(ws.recv(), deadline - time.monotonic()))
                if row.get("status") == "ready":
                    return row
    except websockets.ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd else -1
    except websockets.InvalidStatus as refused:
        return refused.response.status_code


def _wait_healthy(base: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(base + "healthz", timeout=30) as health:
                assert health.status == 200 and json.load(health)["ok"] is True
                return
        except (urllib.error.URLError, OSError) as exc:  # a 503 (HTTPError), refused, reset, timed out
            if time.monotonic() > deadline:
                detail = exc.read()[:500] if isinstance(exc, urllib.error.HTTPError) else exc
                pytest.fail(f"/healthz not ok within {timeout:.0f}s: {detail!r}")
            time.sleep(1)


def _wait_for_text(log: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        if time.monotonic() > deadline:
            pytest.fail(f"make run never said {text!r}:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)


def _child(launcher: int, name: str) -> psutil.Process:
    """The launcher's live child process whose command line names `name`."""
    for process in psutil.Process(launcher).children(recursive=True):
        if name in " ".join(process.cmdline()) and process.status() != psutil.STATUS_ZOMBIE:
            return process
    pytest.fail(f"no {name} process under the launcher")


def _our_processes(var_dir: Path, pids: set[int]) -> list[psutil.Process]:
    alive = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if process.info["pid"] in pids or str(var_dir) in cmdline:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
    return alive


@pytest.mark.slow
def test_make_run_serves_the_app_and_leaves_nothing_behind(tmp_path: Path) -> None:
    port = free_port()
    var_dir = tmp_path / "var"
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "SECRET_KEY"}}
    env.update(PORT=str(port), KB_VAR_DIR=str(var_dir))
    OUTPUT.mkdir(exist_ok=True)
    log = OUTPUT / "make-run.log"
    with open(log, "wb") as out:
        launcher = subprocess.Popen(
            ["make", "--no-print-directory", "run"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so the test can send Ctrl-C to all of it
        )
    seen: set[int] = set()
    try:
        base = _wait_for_line(log, launcher, timeout=240)
        assert base == f"http://127.0.0.1:{port}/"
        text = log.read_text()
        for username in ("alice", "bob", "carol", "dave", "admin"):
            assert username in text

        with urllib.request.urlopen(base + "accounts/login/") as page:
            assert page.status == 200 and b'name="password"' in page.read()
        _wait_healthy(base, 120)  # the worker may still be loading the model when the web side is up

        _, jar = _login(base, "alice")
        cookie = "; ".join(f"{c.name}={c.value}" for c in jar)
        ws_url = f"ws://127.0.0.1:{port}/ws/library/"
        origin = f"http://127.0.0.1:{port}"
        row = asyncio.run(_library_row(ws_url, origin, cookie))
        assert isinstance(row, dict) and row["type"] == "document" and row["status"] == "ready"
        assert asyncio.run(_library_row(ws_url, origin, None)) == 4401

        # Crashes heal: a killed web server and a killed PostgreSQL are started again, and the app answers.
        daphne = _child(launcher.pid, "daphne")
        daphne.kill()
        _wait_for_text(log, "the web server (Daphne) exited with status -9; starting it again", 30)
        _wait_healthy(base, 90)
        assert _child(launcher.pid, "daphne").pid != daphne.pid
        postmaster = psutil.Process(int((var_dir / "pg" / "postmaster.pid").read_text().split()[0]))
        postmaster.kill()
        _wait_for_text(log, "The embedded postgres server had stopped; started it again.", 60)
        _wait_healthy(base, 60)
        said = log.read_text(errors="replace")
        assert said.count("had stopped; started it again") == 1 and "redis server" not in said  # only the dead one
        row = asyncio.run(_library_row(ws_url, origin, cookie))  # the session outlived both crashes
        assert isinstance(row, dict) and row["status"] == "ready"

        root = psutil.Process(launcher.pid)
        seen = {p.pid for p in root.children(recursive=True)} | {launcher.pid}
        seen |= {int((var_dir / "pg" / "postmaster.pid").read_text().split()[0])}
        seen |= {int((var_dir / "redis" / "redis.pid").read_text().strip())}
        assert len(seen) >= 7  # make, launcher, daphne, celery + its child, celery beat, postgres, redis
        children = [child.cmdline() for child in root.children(recursive=True)]
        assert any("beat" in cmdline for cmdline in children)  # due source syncs
        assert any("watch_sources" in cmdline for cmdline in children)  # watched folders (issue 51)

        os.killpg(launcher.pid, signal.SIGINT)  # what Ctrl-C in the terminal sends
        launcher.wait(90)  # make itself dies of the SIGINT; the launcher under it cleans up
        deadline = time.monotonic() + 30
        while _our_processes(var_dir, seen) and time.monotonic() < deadline:
            time.sleep(0.5)
        leftovers = _our_processes(var_dir, seen)
        assert not leftovers, [p.info for p in leftovers]
        assert "Stopping" in log.read_text()
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
        for process in _our_processes(var_dir, seen):
            process.kill()


def test_a_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = dict(os.environ, PORT=str(port), KB_VAR_DIR=str(tmp_path))
        result = subprocess.run(
            [str(ROOT / ".venv/bin/python"), "-m", "kb.runtime.launcher"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )
    assert result.returncode == 2
    assert f"port {port} on 127.0.0.1 is already in use" in result.stderr
    assert "PORT=" in result.stderr
    assert not (tmp_path / "pg").exists()  # it refused before starting anything


@pytest.mark.django_db
def test_an_unreachable_redis_stops_make_run_before_it_starts(tmp_path: Path) -> None:
    from tests.conftest import service_env

    redis_port = free_port()
    env = service_env(PORT=str(free_port()), KB_VAR_DIR=str(tmp_path), REDIS_URL=f"redis://127.0.0.1:{redis_port}/0")
    result = subprocess.run(
        [str(ROOT / ".venv/bin/python"), "-m", "kb.runtime.launcher"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert f"REDIS_URL: cannot connect to Redis at 127.0.0.1:{redis_port}" in result.stderr
    assert "Traceback" not in result.stderr
