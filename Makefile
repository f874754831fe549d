# Kernel Explorer. `make serve` and `make test` work on a fresh Debian machine and are idempotent:
# they apt-install what is missing, create .venv and pip-install only when pyproject.toml changed.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kernel-explorer-installed
HOST ?= 127.0.0.1
PORT ?= 8000
PYTEST_ARGS ?=
BENCH ?= $(wildcard benchmarks/*.py)
BENCH_ARGS ?=
APT_PACKAGES ?= clang graphviz chromium fonts-dejavu-core

.PHONY: setup sysdeps serve test lint bench clean distclean

setup: sysdeps $(STAMP)

# apt-get runs only when a package is missing; sudo only when not root (and it exists)
sysdeps:
	@if ! command -v dpkg >/dev/null 2>&1; then echo "warning: no dpkg here; make sure these are installed: $(APT_PACKAGES)" >&2; exit 0; fi; \
	pkgs="$(APT_PACKAGES)"; \
	if [ ! -x $(PY) ]; then \
	  if ! command -v $(PYTHON) >/dev/null 2>&1; then pkgs="$$pkgs python3 python3-venv"; \
	  elif ! $(PYTHON) -c 'import ensurepip, venv' >/dev/null 2>&1; then pkgs="$$pkgs python3-venv"; fi; \
	fi; \
	missing=""; \
	for p in $$pkgs; do dpkg -s $$p 2>/dev/null | grep -q '^Status: install ok installed' || missing="$$missing $$p"; done; \
	[ -z "$$missing" ] && exit 0; \
	if [ "$$(id -u)" = 0 ]; then sudo=""; elif command -v sudo >/dev/null 2>&1; then sudo="sudo"; \
	else echo "error: missing Debian packages:$$missing; install them as root (apt-get install$$missing)" >&2; exit 1; fi; \
	echo "installing Debian packages:$$missing"; \
	$$sudo apt-get update -q; \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing

$(PY): | sysdeps
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found on PATH; Kernel Explorer needs Python 3.11+ (Debian: apt-get install python3 python3-venv, or make PYTHON=/path/to/python3.11)" >&2; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "error: $(PYTHON) is $$($(PYTHON) --version 2>&1); Kernel Explorer needs Python 3.11+ (make PYTHON=/path/to/python3.11)" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)

# reinstall only when pyproject.toml is newer than the stamp; never download playwright's browsers (tests use /usr/bin/chromium)
$(STAMP): pyproject.toml | $(PY)
	PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 $(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	@touch $@

serve: setup
	$(VENV)/bin/kernel-explorer serve --host $(HOST) --port $(PORT)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# pytest's exit code 5 (no tests collected) fails like any other
test: setup
	$(VENV)/bin/ruff check .
	@rc=0; $(PY) -m pytest -q $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc = 5 ]; then echo "error: pytest collected no tests" >&2; fi; exit $$rc

bench: setup
	@[ -n "$(strip $(BENCH))" ] || { echo "error: no benchmarks/*.py to run" >&2; exit 1; }
	@for f in $(BENCH); do echo "== $$f"; $(PY) $$f $(BENCH_ARGS); done

clean:
	rm -rf build dist *.egg-info .pytest_cache .ruff_cache test-artifacts
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
