"""The embedded default and an explicit DATABASE_URL go through the same code."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from kb.runtime import embedded
from tests.conftest import manage, service_env


def test_the_last_user_to_leave_stops_the_server(tmp_path: Path) -> None:
    import subprocess
    import sys

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = embedded.use("redis", tmp_path)
        (tmp_path / ".redis.users").write_text(f"{other.pid} {__import__('os').getpid()}")
        assert embedded.leave("redis", tmp_path) is False  # another live process still uses it
        assert embedded._redis_running(tmp_path / "redis") == (started.pid, int(started.url.rsplit(":", 1)[1]))
        again = embedded.use("redis", tmp_path)
        assert (again.pid, again.started_here) == (started.pid, False)
        other.kill()
        other.wait()
        assert embedded.leave("redis", tmp_path) is True  # the other one died: we were the last
        assert embedded._redis_running(tmp_path / "redis") is None
    finally:
        other.kill()
        embedded.stop_redis(tmp_path)


def test_a_running_server_is_reused_not_started_twice(tmp_path: Path) -> None:
    first = embedded.start_redis(tmp_path)
    try:
        again = embedded.start_redis(tmp_path)
        assert first.started_here and not again.started_here
        assert (again.url, again.pid) == (first.url, first.pid)
    finally:
        embedded.stop_redis(tmp_path)
    assert embedded._redis_running(tmp_path / "redis") is None


@pytest.mark.slow
@pytest.mark.django_db
def test_database_url_points_the_app_at_a_second_postgres_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_PG_SHARED_BUFFERS", "160MB")
    second = embedded.start_postgres(tmp_path)
    try:
        assert second.started_here
        env = service_env(DATABASE_URL=second.url)
        migrated = manage("migrate", "--noinput", env=env)
        assert migrated.returncode == 0, migrated.stderr
        created = manage("shell", "-c", "from kb.library.models import Folder; Folder.objects.create(name='only-on-second')", env=env)
        assert created.returncode == 0, created.stderr
        with psycopg.connect(second.url) as conn:
            names = [row[0] for row in conn.execute("SELECT name FROM kb_folder")]
            extensions = {row[0] for row in conn.execute("SELECT extname FROM pg_extension")}
            cache = conn.execute("SHOW shared_buffers").fetchone()
        assert names == ["only-on-second"]
        assert cache == ("160MB",)  # the server was started with the configured page cache
        assert {"vector", "pg_trgm"} <= extensions
        from kb.library.models import Folder

        assert not Folder.objects.filter(name="only-on-second").exists()
    finally:
        embedded.stop_postgres(tmp_path)
    assert embedded._pg_running(tmp_path / "pg") is None


def test_importing_the_settings_starts_nothing(tmp_path: Path) -> None:
    """Django set up on the embedded default (no URLs) reads where the servers would be; only an entry point
    (manage.py here) starts them, and the last user leaving stops them."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "KB_SETTINGS_ONLY"}}
    env.update(KB_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="kb.settings")
    setup = "import django; django.setup(); from django.conf import settings; print(settings.REDIS_URL)"
    result = subprocess.run([sys.executable, "-c", setup], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "redis://127.0.0.1:6379"  # never started here: the usual port
    assert not (tmp_path / "pg").exists() and not (tmp_path / "redis").exists()

    printed = "from django.conf import settings; print(settings.REDIS_URL, settings.DATABASES['default']['PORT'])"
    result = manage("shell", "-c", printed, env=env)
    assert result.returncode == 0, result.stderr
    redis_url, pg_port = result.stdout.split()[-2:]  # after the shell's own line
    assert redis_url == f"redis://127.0.0.1:{(tmp_path / 'redis' / 'port').read_text()}"
    assert int(pg_port) == int((tmp_path / "pg.port").read_text())
    assert embedded._pg_running(tmp_path / "pg") is None and embedded._redis_running(tmp_path / "redis") is None


def test_the_embedded_page_cache_is_a_quarter_of_memory_within_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    import psutil

    monkeypatch.delenv("KB_PG_SHARED_BUFFERS", raising=False)
    for total, expected, build in ((256 * 2**20, "128MB", "64MB"), (2 * 2**30, "512MB", "128MB"),
                                   (24 * 2**30, "4096MB", "1536MB"), (64 * 2**30, "4096MB", "2048MB")):
        monkeypatch.setattr(psutil, "virtual_memory", lambda total=total: SimpleNamespace(total=total))
        assert embedded.shared_buffers() == expected
        assert f"-c shared_buffers={expected} -c maintenance_work_mem={build} " in embedded.server_options()
    monkeypatch.setenv("KB_PG_SHARED_BUFFERS", "3GB")
    assert embedded.shared_buffers() == "3GB" and "shared_buffers=3GB" in embedded.server_options()
