# The two commands: `make lab` (serve the course) and `make test` (the whole suite).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Re-install whenever the pins change; the stamp lives inside .venv.
STAMP := $(VENV)/.jax-tpu-lab-installed
HOST ?= 127.0.0.1
PORT ?= 2718
# The lab shows every lesson 8 virtual CPU devices (read by each app's process).
export JAX_NUM_CPU_DEVICES ?= 8
# glibc malloc keeps XLA's freed step buffers instead of unmapping them (no page fault storm
# per step: core/perf/allocator.py); read by every process these targets start.
# `make ... GLIBC_TUNABLES=` keeps glibc's defaults.
MALLOC_TUNABLES := glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0
MALLOC_TUNABLES := $(MALLOC_TUNABLES):glibc.malloc.trim_threshold=2147483647
export GLIBC_TUNABLES ?= $(MALLOC_TUNABLES)

.PHONY: lab test install lock lint check-apps pytest curriculum capstone pallas-capstone clean \
	torch-xla-env kfp-env wheelhouse

# .venv is exactly requirements.lock (every package pinned, each wheel's sha256 checked; no
# resolution on this machine), then the project itself (editable): core/envlock.py. A new
# release on the registry changes nothing until `make lock` is run and its result committed.
$(STAMP): pyproject.toml requirements.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m core.envlock sync
	@touch $(STAMP)

install: $(STAMP)

# Resolve again (network) and rewrite the three locks: requirements.lock (the course, from
# pyproject.toml), deploy/requirements.lock (the service image, within the course's lock) and
# the Kubeflow env's lock. Run after changing a pin; commit the result; `make install` then
# installs it.
lock: $(STAMP)
	$(BIN)/python -m core.envlock lock

# Kubeflow Pipelines' own environment, .venv-kfp/ (git-ignored; ~116 MB, ~15 s): kfp 2.17 pins
# protobuf<7 and requests==2.33.0 (conflicts with tensorflow-cpu and locust in .venv). The MLOps
# lesson runs its pipeline (core/lessons/operations/mlops_pipeline.py) with this env's python in
# a subprocess; `make test` and `make lab` build it (rebuilt when the pins change).
KFP_VENV := .venv-kfp
KFP_LOCK := core/lessons/operations/kfp_requirements.lock
KFP_STAMP := $(KFP_VENV)/.kfp-installed
$(KFP_STAMP): $(KFP_LOCK)
	@test -x $(KFP_VENV)/bin/python || $(PYTHON) -m venv $(KFP_VENV)
	$(KFP_VENV)/bin/python -m pip install --quiet --require-hashes --no-deps -r $(KFP_LOCK)
	@touch $(KFP_STAMP)

kfp-env: $(KFP_STAMP)

# The course offline on a TPU host without internet: the lock's wheels for CPython 3.11 on
# manylinux x86-64 in .wheelhouse/part-NN/ (git-ignored; each part <= 55 MB with its manifest),
# leaving out the host's own JAX, jaxlib, libtpu, NumPy and SciPy. PROFILE: core (default),
# torch, rl, frameworks, operations, tests or all; HOST_INVENTORY: a host's `wheelhouse
# inventory` JSON, whose own index's files stay out too (tpu_scripts/wheelhouse/hosts/).
PROFILE ?= core
HOST_INVENTORY ?=
wheelhouse: $(STAMP)
	$(BIN)/python -m tpu_scripts wheelhouse --profile $(PROFILE) \
		$(if $(HOST_INVENTORY),--host-inventory $(HOST_INVENTORY))

# `marimo run apps/` with each lesson's kernel forked from a process that already imported the
# stack (core/lab/serve.py, core/lab/warm_kernels.py); JAX_TPU_LAB_WARM_KERNELS=0: plain marimo.
lab: $(STAMP) $(KFP_STAMP)
	@echo "Serving the course gallery on http://$(HOST):$(PORT) (course home: http://$(HOST):$(PORT)/?file=index.py)"
	$(BIN)/python -m core.lab.serve apps/ --host $(HOST) --port $(PORT) $(LAB_FLAGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/hadolint deploy/Dockerfile

# `make test` runs the same check inside pytest (tests/test_app_contract.py, per app).
check-apps: $(STAMP)
	$(BIN)/marimo check --strict apps/*.py

# pytest-xdist: PYTEST_WORKERS processes (0 runs in this process). --dist loadscope keeps
# each module's tests on one worker, so a module's expensive fixtures (a reference training
# run, a served gallery) are built once; the browser tour and the headless app runs are split
# into parts both workers share (tests/tools/scheduling.py). --no-loadscope-reorder keeps
# conftest.py's order: those parts first, then the longest modules (tests/module_seconds.json).
# Three workers on a 2-core machine: much of a worker's time is waiting (a browser page, an app
# process, a served kernel), and with two the cores sat 21% idle. A fresh clone's CI run on
# this 2-core machine: 2 workers 2,432 s (pytest 2,365 s, CPU busy 79%), 3 workers 2,152 s
# (pytest 2,073 s, busy 99%).
PYTEST_WORKERS ?= 3
pytest: $(STAMP) $(KFP_STAMP)
	JAX_PLATFORMS=cpu $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadscope \
		--no-loadscope-reorder \
		--durations=60 $(PYTEST_FLAGS)

test: $(STAMP) $(KFP_STAMP)
	@start=$$(date +%s); \
	$(MAKE) --no-print-directory lint pytest && \
	echo "make test: passed in $$(( $$(date +%s) - start )) s"

curriculum: $(STAMP)
	$(BIN)/python -m core.curriculum --summary

# The whole byte-Transformer capstone at its default config, one command after another
# (each resumable / rerunnable on its own); the report lands in $(CAPSTONE_DIR)/report/.
CAPSTONE_DIR ?= runs/capstone
CAPSTONE := JAX_PLATFORMS=cpu $(BIN)/python -m capstones.byte_transformer
capstone: $(STAMP)
	$(CAPSTONE) train run_dir=$(CAPSTONE_DIR) $(CAPSTONE_FLAGS)
	$(CAPSTONE) eval run_dir=$(CAPSTONE_DIR)
	$(CAPSTONE) cache-report run_dir=$(CAPSTONE_DIR)
	$(CAPSTONE) export run_dir=$(CAPSTONE_DIR) out=$(CAPSTONE_DIR)/artifacts
	$(CAPSTONE) profile run_dir=$(CAPSTONE_DIR) out=$(CAPSTONE_DIR)/profile
	$(CAPSTONE) bench out=$(CAPSTONE_DIR)/bench.json
	$(CAPSTONE) plan out=$(CAPSTONE_DIR)/plan.json
	$(CAPSTONE) run-manifest run_dir=$(CAPSTONE_DIR)
	$(CAPSTONE) report run_dir=$(CAPSTONE_DIR)

# The Pallas capstone's whole report (agreement, profile, partition, objective) into runs/
pallas-capstone: $(STAMP)
	JAX_PLATFORMS=cpu $(BIN)/python -m capstones.pallas_kernel report out=runs/pallas_kernel

# PyTorch/XLA's own environment, .venv-torch-xla/ (git-ignored; never .venv, not built by CI):
# torch-xla 2.9.0 needs torch 2.9.0, whose Linux wheel is the CUDA build (~7 GB, ~6 min).
# The pins are tpu_scripts/envs/torch_xla.txt; tpu_scripts/frameworks/torch_xla_train_test.py
# runs the script under PJRT_DEVICE=CPU with this env's python when it exists.
TORCH_XLA_VENV := .venv-torch-xla
torch-xla-env:
	@test -x $(TORCH_XLA_VENV)/bin/python || $(PYTHON) -m venv $(TORCH_XLA_VENV)
	$(TORCH_XLA_VENV)/bin/python -m pip install --upgrade pip
	$(TORCH_XLA_VENV)/bin/python -m pip install -r tpu_scripts/envs/torch_xla.txt
	PJRT_DEVICE=CPU $(TORCH_XLA_VENV)/bin/python -c \
		"import torch, torch_xla; print('torch', torch.__version__, 'torch_xla', torch_xla.__version__)"

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache .jax_compilation_cache
	find . -name __marimo__ -type d -prune -exec rm -rf {} +
