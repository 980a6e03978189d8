# Quick start: `make demo` (set up + main job on defaults), `make test` (set up + test suite).
# Needs Python 3.11 with its venv module (Debian/Ubuntu: python3.11-venv). On a plain Linux
# machine, `make TORCH_INDEX=https://download.pytorch.org/whl/cpu ...` takes PyTorch's CPU build
# (otherwise pip resolves torch==2.13.0 to the CUDA build, several GB).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
TORCH_VERSION := 2.13.0
TORCH_INDEX ?=

.PHONY: setup demo test test-slow bench bench-quick bench-ppo datasets ablation-datasets check-python clean

check-python:
	@if [ -z "$(PYTHON)" ] || ! "$(PYTHON)" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then \
	  echo "tensortune needs Python 3.11 (found: $(if $(PYTHON),$$($(PYTHON) --version 2>&1 | head -n1),no python3)); install it, or run make PYTHON=/path/to/python3.11" >&2; exit 1; fi
	@if ! "$(PYTHON)" -c 'import venv, ensurepip' 2>/dev/null; then \
	  echo "$(PYTHON) has no venv/ensurepip module; install it (Debian/Ubuntu: apt install python3.11-venv)" >&2; exit 1; fi

$(VENV)/.installed: pyproject.toml | check-python
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(if $(TORCH_INDEX),$(PY) -m pip install -q --index-url $(TORCH_INDEX) torch==$(TORCH_VERSION))
	$(PY) -m pip install -q -e ".[dev,bench,openvino,hf]"
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(VENV)/bin/tensortune demo

test: setup
	$(PY) -m pytest -q

# The end-to-end runs of minutes each (Ray races, the suite's tiny-budget runs); CI runs them too.
test-slow: setup
	$(PY) -m pytest -q -m slow

bench: setup
	$(PY) -m bench run

bench-quick: setup
	$(PY) -m bench run --quick

# Chameleon's PPO explorer against stable-baselines3 (installs the rl extra into the venv).
bench-ppo: setup
	$(PY) -m pip install -q -e ".[dev,bench,rl]"
	$(PY) -m bench run --study ppo-overhead

# One-Shot Tuner's datasets (hours each; every command resumes where it stopped; nothing else
# should run meanwhile). Each finished task is also written to datasets/OP/ (one gzip JSON-lines
# shard per task, kept in git), and a new checkout restores the shards into $(DATA) first, so
# a dataset measured over many sessions and machines survives each of them. Depthwise first.
DATA ?= data
datasets: setup
	mkdir -p $(DATA)
	$(VENV)/bin/tensortune dataset generate --db $(DATA)/depthwise-model.db --shards datasets/depthwise_conv2d --op depthwise_conv2d --tasks 150 --samples 200 --repeat 3 --min-repeat-ms 20 --no-progress
	$(VENV)/bin/tensortune dataset generate --db $(DATA)/dense-model.db --shards datasets/dense --op dense --tasks 150 --samples 200 --repeat 3 --min-repeat-ms 20 --no-progress
	$(VENV)/bin/tensortune dataset generate --db $(DATA)/conv2d-model.db --shards datasets/conv2d --op conv2d --tasks 150 --samples 200 --repeat 3 --min-repeat-ms 20 --no-progress

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
