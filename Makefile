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

.PHONY: lab test install lint check-apps pytest curriculum clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e '.[dev,frameworks,tpu]'
	@touch $(STAMP)

install: $(STAMP)

lab: $(STAMP)
	@echo "Serving the course gallery on http://$(HOST):$(PORT) (course home: http://$(HOST):$(PORT)/?file=index.py)"
	$(BIN)/marimo run apps/ --host $(HOST) --port $(PORT) $(LAB_FLAGS)

lint: $(STAMP)
	$(BIN)/ruff check .

check-apps: $(STAMP)
	$(BIN)/marimo check --strict apps/*.py

pytest: $(STAMP)
	JAX_PLATFORMS=cpu $(BIN)/python -m pytest $(PYTEST_FLAGS)

test: $(STAMP)
	@start=$$(date +%s); \
	$(MAKE) --no-print-directory lint check-apps pytest && \
	echo "make test: passed in $$(( $$(date +%s) - start )) s"

curriculum: $(STAMP)
	$(BIN)/python -m core.curriculum --summary

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache
	find . -name __marimo__ -type d -prune -exec rm -rf {} +
