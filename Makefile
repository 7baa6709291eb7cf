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
	$(CLI) history --since 1d
	for table in lakekeeper_flat lakekeeper_events lakekeeper_events_2p; do $(CLI) diff --table $(DEMO_DB).$$table || exit 1; done

# The second pytest runs the tests marked `cluster` again with Spark on a standalone cluster the suite starts (a Master
# and two Workers from pyspark's jars; the driver in the test process, as in YARN client mode); it fails if the
# cluster cannot start.
# `dg check defs` / `dg list defs`: the code location loads as a dg project (a few seconds, no metastore needed: with
# none reachable it loads the last stored state or 0 tables, and says so).
test: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/dg check defs
	$(VENV)/bin/dg list defs > /dev/null
	$(PY) -m pytest
	$(PY) -m pytest --spark-cluster

metastore-start: venv
	$(CLI) metastore start

metastore-stop: venv
	$(CLI) metastore stop

# The Dagster UI on the local metastore, with the project's instance settings (pools: one run per table, run
# monitoring) installed into DAGSTER_HOME ($(UI_HOME)). The instance is SQLite there, or PostgreSQL when
# DAGSTER_POSTGRES_URL is set (e.g. `make ui UI_HOME=.dagster_home_pg DAGSTER_POSTGRES_URL=postgresql+psycopg2://...`).
# `dagster dev` warns that it is superseded by `dg dev`, which is the same server
# (dev_command_impl; `dg dev -w workspace.yaml` works as well): that one warning is filtered here, by its exact
# message.
UI_HOME ?= .dagster_home
ui: venv
	$(CLI) metastore start
	$(PY) -m lakekeeper_dagster.instance_settings $(UI_HOME)
	DAGSTER_HOME=$(abspath $(UI_HOME)) $(PY) -W 'ignore:Function `dev_command` is superseded:FutureWarning' \
		-m dagster dev -w workspace.yaml
