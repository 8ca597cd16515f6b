# Two commands set everything up on a fresh machine that has Python 3.11+:
#   make demo   - run the quickstart notebook with the offline model (no API key)
#   make test   - install test dependencies (incl. Debian packages) and run the whole suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# dbt pins many packages: it gets its own environment (tests/dbt_project.py builds the test project with it)
DBT_VENV := $(VENV)/dbt
DBT_STAMP := $(DBT_VENV)/.installed

.PHONY: demo test venv bench clean lab

# The suite's test files run on this many pytest-xdist workers, a file per worker at a time (--dist loadfile keeps a
# file's module fixtures, kernels and servers in one process), longest files first (tests/file_seconds.json): a
# third of a worker's time is spent waiting on kernels, servers and browsers, so three workers keep the 2-core CI
# machine's cores busy where two left them idle. TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 3

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e ".[test]"
	@touch $(STAMP)

$(DBT_STAMP): constraints-dbt.txt
	@test -x $(DBT_VENV)/bin/python || $(PYTHON) -m venv $(DBT_VENV)
	$(DBT_VENV)/bin/pip install -q -r constraints-dbt.txt
	@touch $(DBT_STAMP)

venv: $(STAMP) $(DBT_STAMP)

demo: $(STAMP)
	$(BIN)/python -m harness_magic.demo

test: $(STAMP) $(DBT_STAMP)
	bash scripts/system-deps.sh
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --durations=25 tests notebooks --nbval --nbval-sanitize-with notebooks/sanitize.cfg

bench: $(STAMP)
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

# JupyterLab refuses to run as root without --allow-root: given only when make runs as root (a container).
# LAB_ARGS passes more options, e.g. make lab LAB_ARGS="--no-browser --port 8899".
LAB_ARGS ?=
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks $(ALLOW_ROOT) $(LAB_ARGS)

clean:
	rm -rf $(VENV) runs test-artifacts
