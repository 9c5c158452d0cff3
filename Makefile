# The two commands: `make run` and `make test`. Both work from a fresh clone.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: help install run test lint format services clean

help:
	@echo "make run      install what is needed and start Enclave on http://127.0.0.1:8000"
	@echo "make test     install what is needed, start Postgres and Redis, lint and run the suite"
	@echo "make install  create .venv and install the project with its test extras"
	@echo "make lint     ruff and mypy"
	@echo "make format   let ruff fix imports and formatting"

$(PY):
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; Enclave needs Python 3.11" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Re-runs only when pyproject.toml changes. torch is pinned to the CPU build on disk; the
# check after the install refuses a CUDA build that something else might have pulled.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[test]' || { echo "error: pip install failed (see above)" >&2; exit 1; }
	@$(PY) -c "import torch, sys; sys.exit('error: a CUDA build of torch was installed; expected the CPU build ' + torch.__version__) if torch.version.cuda else None"
	@touch $@

install: $(STAMP)

services:
	@scripts/services.sh

# The test OIDC provider (npm oidc-provider); re-installs only when its lock file changes.
OIDC_STAMP := scripts/oidc/node_modules/.installed
$(OIDC_STAMP): scripts/oidc/package-lock.json
	@command -v npm >/dev/null || { echo "error: npm not found; the login tests need Node.js 20+" >&2; exit 1; }
	cd scripts/oidc && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

test: install services lint $(OIDC_STAMP)
	source .run/services.env && $(PY) -m pytest

run: install
	@scripts/fetch-demo-model.sh >/dev/null
	exec $(VENV)/bin/enclave serve

clean:
	rm -rf $(VENV) .run .mypy_cache .ruff_cache .pytest_cache
