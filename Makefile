# The two set-up commands: `make demo` and `make test` (both create the virtualenv on first use).
VENV ?= .venv
PY := $(VENV)/bin/python
CLI := $(VENV)/bin/lakekeeper-dagster
DEMO_DB ?= lakekeeper_demo

.PHONY: venv demo test lint metastore-start metastore-stop ui

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

demo: venv
	$(CLI) metastore start
	$(CLI) demo create --database $(DEMO_DB)
	$(CLI) analyze --database $(DEMO_DB)
	$(CLI) demo run --database $(DEMO_DB)
	$(CLI) analyze --database $(DEMO_DB)

test: venv
	$(VENV)/bin/ruff check .
	$(PY) -m pytest

metastore-start: venv
	$(CLI) metastore start

metastore-stop: venv
	$(CLI) metastore stop

# The Dagster UI on the local metastore, with the project's instance settings (pools: one run per table).
ui: venv
	$(CLI) metastore start
	mkdir -p .dagster_home && cp dagster.yaml .dagster_home/dagster.yaml
	DAGSTER_HOME=$(CURDIR)/.dagster_home $(VENV)/bin/dagster dev -w workspace.yaml
