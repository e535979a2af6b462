"""The test session as an entry point, like manage.py (pyproject's addopts load it: `-p tests.entry`).

It starts or reuses the embedded servers under KB_VAR_DIR before pytest-django reads the settings, which
only read where the servers listen; the session is one of their users until it exits.

Under pytest-xdist (`make test` runs `-n 2`) each worker is a session of its own with its own servers in
KB_VAR_DIR/<worker> (its own PostgreSQL, Redis, Daphne and Celery worker), so no test sees another worker's
rows, queues or restarts; the controller only hands out tests and starts nothing.
"""

from __future__ import annotations

import getpass
import os
import tempfile
from pathlib import Path

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    from kb.runtime.embedded import ensure_services, var_dir

    # The operator's policy for local sources, as a deployment sets it: tests keep their shares and repositories
    # in pytest's temporary directories. The servers and workers tests start inherit it; tests of the policy
    # itself set their own.
    os.environ.setdefault("KB_SOURCE_FOLDER_ROOTS", str(Path(tempfile.gettempdir()) / f"pytest-of-{getpass.getuser()}"))
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        os.environ["KB_VAR_DIR"] = str(var_dir() / worker)
    elif getattr(early_config.known_args_namespace, "numprocesses", None):
        return
    ensure_services()


def worker_dir(root: Path) -> Path:
    """`root`, or its subfolder for this xdist worker: files a test writes by a fixed name stay apart."""
    return root / os.environ.get("PYTEST_XDIST_WORKER", "")
