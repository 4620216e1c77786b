# Two commands on a fresh machine:  `make demo`  and  `make test`.
VENV ?= .venv
BIN := $(VENV)/bin
# One world per data dir; its Dagster instance is <data dir>.dagster beside it (or $DAGSTER_HOME).
export HLTM_DATA_DIR ?= $(CURDIR)/data
PORT ?= 3000

.PHONY: setup demo test lint ui ui-check bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	@$(BIN)/hltm dagster-home >/dev/null
	@touch $@

demo: setup  ## sample world → sources → memory tree → cited answer → ranked vacancy
	$(BIN)/hltm demo

test: setup  ## lint, check the import contracts, build the docs, validate the code location, run the tests
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mkdocs build --strict --quiet
	$(BIN)/dagster definitions validate -m hltm_dagster.definitions
	$(BIN)/python -m pytest

# `dg dev` runs the project of pyproject's [tool.dg] from .venv (VIRTUAL_ENV says it is the one
# in use); --no-check-yaml: the project has no component YAML to check.
ui: setup  ## the Dagster UI on http://127.0.0.1:$(PORT) for the data dir's instance
	DAGSTER_HOME=$$($(BIN)/hltm dagster-home) VIRTUAL_ENV=$(abspath $(VENV)) \
		$(BIN)/dg dev --no-check-yaml -p $(PORT)

# The UI after `make demo`, in Debian's chromium (apt-get install -y chromium): the asset graph, a
# memory partition, a run under its job, the checks; the screenshots go to docs/ui-*.png. It
# starts its own UI on a free port, so `make ui` may run beside it.
ui-check: $(VENV)/.ui-check
	$(BIN)/python -m hltm_devkit.ui_check

$(VENV)/.ui-check: $(VENV)/.installed
	$(BIN)/pip install -q -e ".[dev,ui-check]"
	@touch $@

clean:
	rm -rf data data.dagster site
