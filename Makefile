# Kernel Explorer. `make serve` and `make test` work on a fresh Debian machine and are idempotent:
# they apt-install what is missing, create .venv and pip-install (the hashed versions of requirements.lock) only when
# pyproject.toml or the lock changed.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kernel-explorer-installed
LOCK := requirements-test.lock  # the runtime's pins (requirements.lock, what the Docker image installs) plus the test tools'
HOST ?= 127.0.0.1
PORT ?= 8000
PYTEST_ARGS ?=
PYTEST_WORKERS ?= auto  # pytest-xdist processes (auto: one per core); 0 runs the suite in one process
BENCH ?= $(wildcard benchmarks/*.py)
BENCH_ARGS ?=
APT_PACKAGES ?= clang graphviz chromium fonts-dejavu-core

.PHONY: setup sysdeps serve test check lint lock golden bench docs clean distclean tinygrad-versions

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

# the exact, hash-checked versions of requirements.lock, then the package itself (no dependency resolution at install time);
# reinstall only when the lock or pyproject.toml is newer than the stamp; never download playwright's browsers (tests use /usr/bin/chromium)
$(STAMP): pyproject.toml $(LOCK) | $(PY)
	PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 $(PY) -m pip install -q --disable-pip-version-check --require-hashes -r $(LOCK)
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e .
	@touch $@

# the older tinygrads a trace may run on (explorer/tracing/versions.py), each a venv made from its hash-checked lock
# (explorer/tracing/locks/) and kept between runs like .venv: made again only when a lock changed. Where one cannot be made (no
# PyPI), the suite runs without it: the tests that need it skip, saying why, and the next run tries again
TINYGRADS := $(CURDIR)/.tinygrads
$(TINYGRADS)/.made: $(wildcard explorer/tracing/locks/*.txt) | $(STAMP)
	@if KERNEL_EXPLORER_TINYGRADS=$(TINYGRADS) $(PY) -m explorer versions --make all; then touch $@; \
	else echo "warning: an older tinygrad's environment could not be made; its tests will skip" >&2; fi
tinygrad-versions: $(TINYGRADS)/.made

# refresh requirements.lock and requirements-test.lock from pyproject.toml's bounds (newest versions within them), with hashes; then `make test`
LOCK_FLAGS := --generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28 --upgrade
lock: | $(PY)
	$(PY) -m pip install -q --disable-pip-version-check uv
	$(VENV)/bin/uv pip compile pyproject.toml --extra queue $(LOCK_FLAGS) -o requirements.lock
	$(VENV)/bin/uv pip compile pyproject.toml --extra queue --extra test $(LOCK_FLAGS) -o requirements-test.lock

serve: setup
	$(VENV)/bin/kernel-explorer serve --host $(HOST) --port $(PORT)

# style, types and the architecture's import contracts (pyproject.toml's [tool.importlinter]; ARCHITECTURE.md)
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

# the job queue's tests start a real redis-server (serving needs none: the queue is optional, `serve --queue URL`); the same for
# its benchmark
test bench: APT_PACKAGES += redis-server
# pytest's exit code 5 (no tests collected) fails like any other. The suite runs on every core (pytest-xdist, work stealing: most
# tests wait on worker processes of their own); docs/testing.md says how to run a part of it
test: setup lint tinygrad-versions
	@rc=0; KERNEL_EXPLORER_TINYGRADS=$(TINYGRADS) $(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist worksteal $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc = 5 ]; then echo "error: pytest collected no tests" >&2; fi; exit $$rc

# the fast loop for every change (target: 10 minutes on a 2-core machine, printed at its end): lint, then tests/conftest.py's CHECK
# (the modules that need no trace of their own, less their long tests) and one trace submitted and read in a real browser
check: setup tinygrad-versions
	@st=$$(date +%s); rc=0; $(MAKE) --no-print-directory lint || rc=$$?; \
	if [ $$rc = 0 ]; then KERNEL_EXPLORER_TINYGRADS=$(TINYGRADS) $(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist worksteal --check $(PYTEST_ARGS) || rc=$$?; fi; \
	echo "make check: $$(( $$(date +%s) - st )) s (target 600 s), exit $$rc"; exit $$rc

# plain tinygrad's codegen for every fidelity case of tests/test_targets.py, and its outputs for every program of tests/programs/, made
# again (after a tinygrad upgrade, a change to the explorer's Winograd builder or to a program: the suite says when); checked in under
# tests/golden/
golden: setup
	$(PY) tests/golden/plain_codegen.py
	$(PY) tests/golden/corpus.py

# docs/ as a site in site/ (mkdocs.yml; strict: a broken link or anchor fails it). README.md is the first page on GitHub, docs/index.md the
# site's; tests/test_docs.py runs their examples
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --clean --site-dir site

bench: setup
	@[ -n "$(strip $(BENCH))" ] || { echo "error: no benchmarks/*.py to run" >&2; exit 1; }
	@for f in $(BENCH); do echo "== $$f"; $(PY) $$f $(BENCH_ARGS); done

clean:
	rm -rf build dist site *.egg-info .pytest_cache .ruff_cache .mypy_cache .import_linter_cache test-artifacts
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) $(TINYGRADS)
