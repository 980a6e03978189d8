# Quick start: `make demo` (set up + main job on defaults), `make test` (set up + test suite).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python

.PHONY: setup demo test bench-ceiling bench-overhead clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev,bench]"
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(VENV)/bin/tensortune demo

test: setup
	$(PY) -m pytest -q

bench-ceiling: setup
	$(PY) bench/ceiling.py

bench-overhead: setup
	$(PY) bench/overhead.py

clean:
	rm -rf $(VENV) build *.egg-info
