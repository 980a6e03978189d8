# Quick start: `make demo` (set up + main job on defaults), `make test` (set up + test suite).
# Needs Python 3.10-3.13 with its venv module (Debian/Ubuntu: python3.11-venv); exact versions
# of every dependency come from constraints.txt (the package's metadata takes ranges). On a plain
# Linux machine, `make TORCH_INDEX=https://download.pytorch.org/whl/cpu ...` takes PyTorch's CPU
# build (constraints.txt asks for torch 2.13.0+cpu; this machine has its wheel on disk).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
TORCH_INDEX ?=
CONSTRAINTS := constraints.txt

.PHONY: setup docs demo test test-slow bench bench-quick bench-ppo datasets ablation-datasets check-python constraints clean

check-python:
	@if [ -z "$(PYTHON)" ] || ! "$(PYTHON)" -c 'import sys; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 13))' 2>/dev/null; then \
	  echo "tensortune needs Python 3.10-3.13 (found: $(if $(PYTHON),$$($(PYTHON) --version 2>&1 | head -n1),no python3)); install one, or run make PYTHON=/path/to/python3.11" >&2; exit 1; fi
	@if ! "$(PYTHON)" -c 'import venv, ensurepip' 2>/dev/null; then \
	  echo "$(PYTHON) has no venv/ensurepip module; install it (Debian/Ubuntu: apt install python3-venv)" >&2; exit 1; fi

$(VENV)/.installed: pyproject.toml $(CONSTRAINTS) | check-python
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(if $(TORCH_INDEX),$(PY) -m pip install -q -c $(CONSTRAINTS) --extra-index-url $(TORCH_INDEX) torch)
	$(PY) -m pip install -q -c $(CONSTRAINTS) -e ".[all,dev,bench]"
	touch $@

# constraints.txt anew from what the venv holds (after changing a range in pyproject.toml)
constraints: setup
	{ sed -n '1,2p' $(CONSTRAINTS); $(PY) -m pip freeze --exclude-editable | grep -v -i -E '^(tensortune|stable-baselines3)=='; \
	  grep -i '^stable-baselines3==' $(CONSTRAINTS); } > $(CONSTRAINTS).new && mv $(CONSTRAINTS).new $(CONSTRAINTS)

setup: $(VENV)/.installed

# docs/cli-options.md anew from the parser (a test checks it is current)
docs: setup
	$(PY) docs/make_cli_options.py

demo: setup
	$(VENV)/bin/tensortune demo

# Two workers (pytest-xdist), each test whole on one: 10m50 -> 8m44 on 2 Zen 3 cores.
TEST_WORKERS ?= 2
test: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=15

# The end-to-end runs of minutes each (Ray races, the suite's tiny-budget runs); CI runs them too.
# Two workers as above, then serially the few marked `alone` (timings against a planted competitor,
# the host's quiet spells, a speed-up of two devices): they need the host to themselves.
test-slow: setup
	$(PY) -m pytest -q -m "slow and not alone" -n $(TEST_WORKERS) --dist worksteal --durations=15
	$(PY) -m pytest -q -m "slow and alone" --durations=10

bench: setup
	$(PY) -m bench run

bench-quick: setup
	$(PY) -m bench run --quick

# Chameleon's PPO explorer against stable-baselines3 (installs the rl extra into the venv).
bench-ppo: setup
	$(PY) -m pip install -q -c $(CONSTRAINTS) -e ".[dev,bench,rl]"
	$(PY) -m bench run --study ppo-overhead

# One-Shot Tuner's datasets (hours each; every command resumes where it stopped; nothing else
# should run meanwhile). Each finished task is also written to src/tensortune/dataset/shipped/OP/ (one gzip JSON-lines
# shard per task, kept in git as package data), and a new checkout restores the shards into $(DATA) first, so
# a dataset measured over many sessions and machines survives each of them. Depthwise first.
DATA ?= data
datasets: setup
	mkdir -p $(DATA)
	$(VENV)/bin/tensortune dataset generate --db $(DATA)/depthwise-model.db --shards src/tensortune/dataset/shipped/depthwise_conv2d --op depthwise_conv2d --tasks 150 --samples 200 --repeat 3 --min-repeat-ms 20 --no-progress
	$(VENV)/bin/tensortune dataset generate --db $(DATA)/dense-model.db --shards src/tensortune/dataset/shipped/dense --op dense --tasks 150 --samples 200 --repeat 3 --min-repeat-ms 20 --no-progress
	$(VENV)/bin/tensortune dataset generate --db $(DATA)/conv2d-model.db --shards src/tensortune/dataset/shipped/conv2d --op conv2d --tasks 150 --samples 200 --repeat 3 --min-repeat-ms 20 --no-progress

# The ablation's smaller conv2d datasets (One-Shot Tuner's Table 4): task sampler x code sampler,
# ABLATION_TASKS tasks x ABLATION_SAMPLES samples each, all six measured on this machine's CPU (so
# any kind of machine can run the whole ablation, about 2.5 h) into datasets/ablation-CPU/VARIANT
# (shards, kept in git across sessions) and exported to $(DATA)/ablation-CPU/VARIANT.npz. PGS and
# random tasks come from the same sampler seed for the EBS and random code samplers.
ABLATION_TASKS ?= 40
ABLATION_SAMPLES ?= 100
ABLATION_VARIANTS ?= pgs-ebs pgs-random random-ebs random-random modelzoo-ebs modelzoo-random
ablation-datasets: setup
	cpu=$$($(PY) -c "import tvm; print(tvm.get_global_func('target.llvm_get_system_cpu')())") || exit 1; \
	mkdir -p $(DATA)/ablation-$$cpu || exit 1; \
	for v in $(ABLATION_VARIANTS); do \
	  $(VENV)/bin/tensortune dataset generate --db $(DATA)/ablation-$$cpu/$$v.db --shards datasets/ablation-$$cpu/$$v --op conv2d \
	    --sampler $${v%-*} --code $${v#*-} --tasks $(ABLATION_TASKS) --samples $(ABLATION_SAMPLES) \
	    --repeat 3 --min-repeat-ms 20 --no-progress || exit 1; \
	  $(VENV)/bin/tensortune dataset export --db $(DATA)/ablation-$$cpu/$$v.db --op conv2d_nchwc \
	    -o $(DATA)/ablation-$$cpu/$$v.npz --force || exit 1; \
	done

clean:
	rm -rf $(VENV) build *.egg-info
