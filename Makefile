# Two entry points (see README): `make demo` and `make test`. Both set everything up first and are
# idempotent: a second run only re-installs when pyproject.toml changed.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.agentlab-installed

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: setup demo check test test-fast browser js bench clean

setup: $(STAMP)

$(BIN)/python:
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "Python 3.11 is needed (set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)

# torch first: with no torch present, sentence-transformers would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

# Debian's Chromium for the browser tests (tests/e2e); never a browser download.
browser:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

# Node (Debian's) and the pinned official `agents` + `ws` npm packages for the conformance test
# (tests/test_serve_js.py). Scripts stay off: nothing the client needs runs one.
js:
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null)
	cd tests/js && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error

demo: setup
	$(BIN)/agentlab demo

# Lint and types (the package, its tests and benchmarks) and the import contract (layers, internal modules, no
# cycles); `make test` runs it first.
check: setup
	$(BIN)/ruff check agentlab tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

test: setup browser js check
	$(BIN)/python -m pytest

test-fast: setup
	$(BIN)/python -m pytest -m "not e2e and not slow"

bench: setup
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) agentlab-data .pytest_cache tests/js/node_modules
