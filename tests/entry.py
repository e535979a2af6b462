"""The test session as an entry point, like manage.py (pyproject's addopts load it: `-p tests.entry`).

It starts or reuses the embedded servers under KB_VAR_DIR before pytest-django reads the settings, which
only read where the servers listen; the session is one of their users until it exits.
"""

from __future__ import annotations

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    from kb.runtime.embedded import ensure_services

    ensure_services()
