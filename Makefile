# agentihooks swarm recovery: fenced restore decisions.
# `make demo` runs the main job on the embedded default; `make test` installs everything and tests.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PROTOS := $(wildcard protos/agentihooks/swarm/v2/*.proto)

.PHONY: setup system protos protos-check lint test test-fast bench demo clean

## setup: system packages (redis-server, chromium, git) and the virtualenv with every dependency
setup: system $(STAMP)

system:
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v git >/dev/null || missing="$$missing git"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

## protos: regenerate services/proto/ from protos/ (committed; CI checks for drift)
protos: $(STAMP)
	$(BIN)/python -m scripts.gen_protos

protos-check: $(STAMP)
	$(BIN)/python -m scripts.gen_protos --check

lint: setup
	$(BIN)/ruff check services tests bench scripts
	$(BIN)/ruff format --check services tests bench scripts
	$(BIN)/mypy services
	$(BIN)/lint-imports

test: setup protos-check
	$(BIN)/python -m pytest -q

bench: setup
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

demo: setup
	$(BIN)/python -m services.demo

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
