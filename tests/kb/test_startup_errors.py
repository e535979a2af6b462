"""Misconfiguration is a one-line error that names the setting and the server."""

from __future__ import annotations

import time

import pytest

from kb.runtime.embedded import free_port
from tests.conftest import manage, service_env


@pytest.mark.django_db
def test_missing_secret_key_outside_debug_is_a_startup_error() -> None:
    env = service_env(DEBUG="0")
    del env["SECRET_KEY"]
    result = manage("check", env=env)
    assert result.returncode == 2
    assert "SECRET_KEY is not set" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.django_db
def test_unreachable_database_names_the_setting_and_the_server() -> None:
    port = free_port()
    env = service_env(DATABASE_URL=f"postgresql://postgres@127.0.0.1:{port}/kb", KB_DB_POOL_TIMEOUT="60")
    began = time.monotonic()
    result = manage("migrate", "--noinput", env=env)
    assert time.monotonic() - began < 45  # at once: a command has no pool to wait on the server for a minute
    assert result.returncode == 2
    assert f"DATABASE_URL: cannot connect to PostgreSQL at 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.django_db
def test_database_url_of_another_kind_is_rejected() -> None:
    result = manage("check", env=service_env(DATABASE_URL="mysql://root@127.0.0.1/kb"))
    assert result.returncode == 2
    assert "DATABASE_URL must be a postgresql:// URL" in result.stderr


@pytest.mark.django_db
def test_unreachable_redis_names_the_setting_and_the_server() -> None:
    port = free_port()
    result = manage("healthcheck", env=service_env(REDIS_URL=f"redis://127.0.0.1:{port}/0"))
    assert result.returncode != 0
    assert f"REDIS_URL: cannot connect to Redis at 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr
