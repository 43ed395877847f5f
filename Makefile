# Floe developer entry points. `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
TEST_WORKERS ?= 2

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml constraints.txt src/floe/protocol/_recwalk.c
	@scripts/ensure-system-deps.sh runtime
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip==25.3
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

.PHONY: setup
setup: $(STAMP) ## Create .venv and install Floe with pinned dependencies
	@scripts/fetch-s3a-jars.sh $(VENV)/share/floe/jars $(BIN)/pip

.PHONY: run
run: setup ## Start Floe on embedded defaults (Ctrl-C stops it)
	$(BIN)/floe up

.PHONY: test
test: setup ## Run the whole test suite on TEST_WORKERS (2) workers, a test file per worker (installs test tools such as kcat)
	@scripts/ensure-system-deps.sh test
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

.PHONY: lint
lint: setup ## ruff (lint + format check) and mypy --strict
	$(BIN)/ruff check src tests benchmarks fuzz
	$(BIN)/ruff format --check src tests benchmarks fuzz
	$(BIN)/mypy
	$(BIN)/mypy fuzz

.PHONY: format
format: setup ## Apply ruff formatting and safe fixes
	$(BIN)/ruff format src tests benchmarks fuzz
	$(BIN)/ruff check --fix src tests benchmarks fuzz

.PHONY: bench
bench: setup ## Benchmarks: vs Tansu, TLS on vs off, table ingest, object storage, cluster failover (~25-30 min; not bench-maintenance): docs/benchmarks.md
	$(BIN)/floe bench all --profile bench-results/profiles

.PHONY: bench-maintenance
bench-maintenance: setup ## Benchmark: a table committed every second for 1 h, before/after maintenance (~70 min): docs/benchmarks.md
	$(BIN)/floe bench maintenance

.PHONY: fuzz
fuzz: setup ## Fuzz a real floe up, 1M mutated frames (long): bench-results/fuzz.json
	$(BIN)/python -m fuzz --long

.PHONY: fuzz-short
fuzz-short: setup ## The ~90 s fuzz run that make test also runs
	$(BIN)/python -m fuzz --short

.PHONY: crash
crash: setup ## The crash tests at full length (~65 min): 12 kill -9s per table-topic test (append on both engines, upsert, a writer), 8 of the broker running a table topic in a cluster sharing partitions, a cluster broker killed every 20 s for 5 minutes
	@scripts/ensure-system-deps.sh test
	FLOE_TABLE_KILLS=12 FLOE_TABLE_ENGINES=local,s3 FLOE_TABLE_FAILOVER_KILLS=12 FLOE_TABLE_COORDINATOR_KILLS=8 FLOE_FAILOVER_KILLS=15 FLOE_FAILOVER_INTERVAL_S=20 \
		$(BIN)/pytest -s tests/crash

.PHONY: chaos
chaos: setup ## Fault injection at full length (~40 min): 100 faults (kill -9, SIGSTOP, cut links, store restarts, clock skew) on etcd, then on PostgreSQL; FLOE_CHAOS_SEED replays a run: tests/chaos
	@scripts/ensure-system-deps.sh test
	FLOE_CHAOS_FAULTS=$${FLOE_CHAOS_FAULTS:-100} FLOE_CHAOS_STORES=$${FLOE_CHAOS_STORES:-etcd,postgres} \
		$(BIN)/pytest -s tests/chaos

.PHONY: screenshots
screenshots: setup ## Refresh docs/img/console-*.png from the browser test
	@scripts/ensure-system-deps.sh test
	FLOE_SCREENSHOTS=1 $(BIN)/pytest tests/browser/test_console.py

.PHONY: clean
clean: ## Remove the virtualenv and caches (keeps ./floe-data)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis src/*.egg-info build
	rm -f src/floe/protocol/*.so
