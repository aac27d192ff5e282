# agentihooks swarm recovery: fenced restore decisions.
# `make demo` runs the main job on the embedded default; `make test` installs everything and tests.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# uv installs exactly the locked set (uv.lock: every distribution, runtime and dev, with hashes).
# uv itself is pinned by hash in scripts/uv-requirements.txt and lives in its own virtualenv, so
# the project's environment holds only what the lock names. uv never downloads a Python: it uses
# $(PY).
UV_HOME := .tools/uv
UV := $(UV_HOME)/bin/uv
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := $(VENV)
PROTOS := $(wildcard protos/agentihooks/swarm/v2/*.proto)

# The real agent CLIs the harness tests run, pinned; tests/support/agent_clis.py holds the same
# numbers (keep them in step). `make qualify` runs the real-CLI suite against other versions too.
# CODEX_NEWEST_VERSION is outside the spec's qualified 0.162: the tests of `agentihooks-restorer
# qualify` qualify it and resume with it once AGENTIHOOKS_QUALIFIED_VERSIONS names it.
CLAUDE_CODE_VERSION ?= 2.1.112
CODEX_VERSION ?= 0.162.0
CODEX_NEWEST_VERSION ?= 0.171.0
HARNESSES := .harnesses

.PHONY: setup system harnesses lock qualify evidence protos protos-check lint test test-fast bench demo clean

## setup: system packages (redis-server, chromium, git, node, tmux), the pinned agent CLIs and the
## virtualenv with exactly the locked dependency set (uv.lock)
setup: system harnesses $(STAMP)

system:
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v git >/dev/null || missing="$$missing git"; \
	command -v node >/dev/null || missing="$$missing nodejs"; \
	command -v npm >/dev/null || missing="$$missing npm"; \
	command -v tmux >/dev/null || missing="$$missing tmux"; \
	command -v kubectl >/dev/null || missing="$$missing kubernetes-client"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

# $(call npm_harness,DIR,PACKAGE@VERSION,EXECUTABLE): install PACKAGE@VERSION into DIR unless
# DIR/node_modules/.bin/EXECUTABLE is already there. npm writes into the sibling DIR.partial, which
# is renamed into place only once the install succeeded, so an interrupted install is never taken
# for an installed one (the next run starts it over). npm's own cache (~/.npm) makes a repeat
# install of the same version quick.
define npm_harness
	@if [ -e $(1)/node_modules/.bin/$(3) ]; then \
	  echo "$(2): installed in $(1)"; \
	else \
	  echo "installing $(2) into $(1)"; \
	  rm -rf $(1).partial && mkdir -p $(1).partial && \
	  npm install --prefix $(1).partial --no-audit --no-fund --no-save --loglevel=error $(2) && \
	  { test -e $(1).partial/node_modules/.bin/$(3) || \
	    { echo "$(2) installed no node_modules/.bin/$(3)" >&2; exit 1; }; } && \
	  rm -rf $(1) && mv -T $(1).partial $(1); \
	fi
endef

## harnesses: the pinned real agent CLIs (Claude Code, Codex) under .harnesses/, for the tests
harnesses: system
	$(call npm_harness,$(HARNESSES)/claude-code-$(CLAUDE_CODE_VERSION),@anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION),claude)
	$(call npm_harness,$(HARNESSES)/codex-$(CODEX_VERSION),@openai/codex@$(CODEX_VERSION),codex)
	$(call npm_harness,$(HARNESSES)/codex-$(CODEX_NEWEST_VERSION),@openai/codex@$(CODEX_NEWEST_VERSION),codex)

$(UV): scripts/uv-requirements.txt
	test -x $(UV_HOME)/bin/python || $(PY) -m venv $(UV_HOME)
	$(UV_HOME)/bin/python -m pip install -q --require-hashes --no-deps -r scripts/uv-requirements.txt
	touch $(UV)

# --locked: the lock must match pyproject.toml (a dependency added without relocking fails here,
# not on someone else's machine); sync is exact, so nothing outside the lock stays installed.
$(STAMP): pyproject.toml uv.lock $(UV)
	$(UV) sync --locked --all-extras --python $(PY)
	touch $(STAMP)

## lock: refresh uv.lock to the newest releases pyproject.toml allows, on purpose, and regenerate
## services/proto/ with the newly locked grpcio-tools; commit both together
lock: $(UV)
	$(UV) lock --upgrade --python $(PY)
	$(MAKE) protos

## protos: regenerate services/proto/ from protos/ (committed; CI checks for drift)
protos: $(STAMP)
	$(BIN)/python -m scripts.gen_protos

protos-check: $(STAMP)
	$(BIN)/python -m scripts.gen_protos --check

lint: setup
	$(BIN)/ruff check services tests bench scripts
	$(BIN)/ruff format --check services tests bench scripts
	$(BIN)/mypy services tests/support/kube/node/mounting.py tests/support/kube/node/launching.py
	$(BIN)/lint-imports

test: setup protos-check
	$(BIN)/python -m pytest -q

## qualify: run the real-CLI suite and `agentihooks-restorer qualify` against several versions of
## each harness (Codex: the pinned, 0.162.1 and the newest, $(CODEX_NEWEST_VERSION)) and write
## docs/harness-qualification.md (see `python -m scripts.qualify --help` for the flags)
qualify: setup
	$(BIN)/python -m scripts.qualify

## evidence: run SV2-CKP-05's five evidence inputs live on the end-to-end cluster and write
## evidence/SV2-CKP-05/result.json ("mocked": false)
evidence: setup
	AGENTIHOOKS_EVIDENCE_OUT=evidence/SV2-CKP-05/result.json $(BIN)/python -m pytest -q -p no:cacheprovider tests/e2e/test_evidence.py

bench: setup
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

demo: setup
	$(BIN)/python -m services.demo

clean:
	rm -rf $(VENV) .tools .pytest_cache .mypy_cache .ruff_cache
