# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-unit test-lit fuzz bench bench-full clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,distributed]'
	touch $(STAMP)

install: $(STAMP)

# One TreeLSTM epoch over SST train, downloading SST first when it is missing
# (without network: one line says how to get it, and synthetic trees are used).
# The thesis programs run with `$(BIN)/python -m recir.examples.demo`.
demo: install
	$(BIN)/python -m recir.examples.sentiment --epochs 1 --no-progress --fetch

# The evaluation suite (bench/suite.py), short version: a few minutes on 2 cores.
# Writes bench/results/suite.json, suite.md and PNG plots; torch and matplotlib
# come from the `bench` extra. `make bench-full` is the run docs/benchmarks.md shows.
BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[test,distributed,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BIN)/python bench/run.py all --quick

bench-full: $(BENCH_STAMP)
	$(BIN)/python bench/run.py all

# Two pytest workers (pytest-xdist) share one temporary object cache (test/conftest.py).
test: install test-unit test-lit

test-unit: install
	$(BIN)/python -m pytest -q -n 2 --durations=10

test-lit: install
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/lit -sv test

# The property-style fuzz tests (test/unit/test_fuzz_*.py: corrupted cache
# entries, argument conversion, mutated IR and SST files, a frontier team's
# gradients against the recursive ones) with FUZZ_EXAMPLES
# examples each, new ones every run; `make test` runs 25 each, the same every time.
FUZZ_EXAMPLES ?= 1000

fuzz: install
	RECIR_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q test/unit/test_fuzz_*.py

clean:
	rm -rf $(VENV) build *.egg-info
