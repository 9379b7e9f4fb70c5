# The two commands of the README: `make demo` (the main job) and `make test` (the suite).
# Both create .venv and install the project from its own files on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# torch is pinned: 2.13.0 is the CPU wheel these machines carry; an unpinned torch pulls a
# multi-GB CUDA build.
TORCH_PIN ?= torch==2.13.0

.PHONY: install demo test lint browser clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH_PIN)" -e '.[collect,test]'
	touch $@

install: $(VENV)/.installed

demo: install
	$(VENV)/bin/tracekit demo

browser:
	scripts/install-chromium.sh

test: install browser
	$(PY) -m pytest -n 2 -q

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
