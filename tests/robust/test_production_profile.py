"""Issue 12 item 8: a production configuration passes Django's deployment check, and a
half-external one (only DATABASE_URL) is refused instead of running on local Redis and secret."""

from __future__ import annotations

import secrets
import subprocess
import sys

import pytest

from tests.conftest import ROOT, manage, service_env

pytestmark = pytest.mark.django_db


def production(**overrides: str) -> dict[str, str]:
    env = service_env(DEBUG="0", SECRET_KEY=secrets.token_urlsafe(50), ALLOWED_HOSTS="kb.example.com",
                      KB_HTTPS="1", KB_HSTS_PRELOAD="1")
    env.update(overrides)
    return env


def test_check_deploy_is_clean_in_the_production_profile() -> None:
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=production())
    assert result.returncode == 0, result.stderr + result.stdout


def test_check_deploy_complains_without_it() -> None:
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=production(KB_HTTPS="0"))
    assert result.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in result.stderr + result.stdout


def test_only_database_url_is_refused() -> None:
    env = production()
    del env["REDIS_URL"]
    result = manage("check", env=env)
    assert result.returncode != 0
    assert "DATABASE_URL is set but REDIS_URL is not" in result.stderr


def test_the_launcher_refuses_it_too(tmp_path: object) -> None:
    env = production(KB_VAR_DIR=str(tmp_path))
    del env["REDIS_URL"]
    result = subprocess.run([sys.executable, "-m", "kb.runtime.launcher"], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    assert "DATABASE_URL is set but REDIS_URL is not" in result.stderr
