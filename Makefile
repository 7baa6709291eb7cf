# The two set-up commands: `make demo` and `make test` (both create the virtualenv on first use).
VENV ?= .venv
PY := $(VENV)/bin/python
CLI := $(VENV)/bin/lakekeeper-dagster
# `make demo HADOOP=1`: the same demo with its tables on a local HDFS (`lakekeeper-dagster hadoop start`: Hadoop's own
# minicluster, its jar fetched with Maven once; `hadoop stop` ends it), in a database of its own, through the config
# `hadoop start` writes (the warehouse on HDFS).
# `make demo HADOOP=1 YARN=1`: and Spark on its YARN (`hadoop start --yarn`; client mode, HADOOP_CONF_DIR its client
# configuration).
ifdef HADOOP
DEMO_DB ?= lakekeeper_demo_hdfs
HDFS_CONFIG := $(VENV)/lakekeeper-hdfs-demo.yaml
DEMO_ENV := LAKEKEEPER_CONFIG=$(HDFS_CONFIG)
ifdef YARN
HADOOP_START_FLAGS := --yarn
DEMO_ENV += HADOOP_CONF_DIR=$(CURDIR)/.lakekeeper/hadoop/conf
endif
endif
DEMO_DB ?= lakekeeper_demo

.PHONY: venv demo test test-fast checks lint reference metastore-start metastore-stop ui

venv: $(VENV)/.installed

# A new virtualenv each time (a package left in a reused one would hide a dependency missing from pyproject.toml),
# installed by uv (from PyPI into the venv, by its pip): it downloads in parallel and links from its cache
# (~/.cache/uv, outside the clone), 85 s -> ~50 s here. Python compiles each module when it is first imported.
$(VENV)/.installed: pyproject.toml
	python3 -m venv --clear $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check uv
	$(VENV)/bin/uv pip install -q --python $(PY) -e '.[test]'
	touch $@

demo: venv
	$(if $(HADOOP),$(CLI) hadoop start $(HADOOP_START_FLAGS) --write-config $(HDFS_CONFIG))
	$(DEMO_ENV) $(CLI) metastore start
	$(DEMO_ENV) $(CLI) demo create --database $(DEMO_DB)
	$(DEMO_ENV) $(CLI) analyze --database $(DEMO_DB)
	$(DEMO_ENV) $(CLI) demo run --database $(DEMO_DB)
	$(DEMO_ENV) $(CLI) analyze --database $(DEMO_DB)
	$(DEMO_ENV) $(CLI) history --since 1d
	for table in lakekeeper_flat lakekeeper_events lakekeeper_events_2p; do \
		$(DEMO_ENV) $(CLI) diff --table $(DEMO_DB).$$table || exit 1; done

# The suite runs in two pytest-xdist workers (one per core; three were slower, and timed out the browser and `make ui`
# tests; `--dist loadgroup` keeps the Kerberos, PostgreSQL and repository-folder tests together), and beside it the
# tests marked `cluster` run again with Spark on YARN (the local Hadoop's ResourceManager and two NodeManagers, from
# Hadoop's minicluster; the driver in the test process, client mode, and cluster mode where a test submits); a cluster
# that cannot start fails the run. `pytest --spark-cluster` runs the same tier on a Spark standalone cluster instead.
# Its output follows the suite's; an interrupt ends it too (the trap: a script's background job starts with Ctrl-C ignored). Each stage prints its wall time.
# `dg check defs` / `dg list defs`: the code location loads as a dg project (a few seconds, no metastore needed: with
# none reachable it loads the last stored state or 0 tables, and says so).
STAGE := .ci/stage
XDIST ?= -n 2 --dist loadgroup
CLUSTER_LOG := $(VENV)/cluster-tier.log
# The tests' Spark drivers map a class archive made once per virtualenv (lakekeeper_dagster_tests/jvm.py).
TEST_CLASSES := $(VENV)/lakekeeper-test-classes.jsa
$(TEST_CLASSES): $(VENV)/.installed lakekeeper_dagster_tests/jvm.py
	$(STAGE) test-class-archive $(PY) -m lakekeeper_dagster_tests.jvm

# The checks run beside the class archive (which mostly waits on one JVM at a time).
test: venv
	@$(MAKE) --no-print-directory -j2 checks $(TEST_CLASSES)
	$(STAGE) pytest sh -c '$(PY) -m pytest --spark-cluster=yarn > $(CLUSTER_LOG) 2>&1 & pid=$$!; \
		trap "kill $$pid; exit 130" INT TERM; \
		$(PY) -m pytest $(XDIST); suite=$$?; wait $$pid; tier=$$?; \
		echo "== the YARN tier (pytest --spark-cluster=yarn), run beside the suite:"; cat $(CLUSTER_LOG); \
		exit $$((suite ? suite : tier))'

checks: venv
	$(STAGE) ruff $(VENV)/bin/ruff check .
	$(STAGE) dg-check-defs $(VENV)/bin/dg check defs
	$(STAGE) dg-list-defs sh -c '$(VENV)/bin/dg list defs > /dev/null'

# docs/reference/{cli,config,dagster}.md, generated from the parser, the config's models and the code location's
# definitions (lakekeeper_dagster_tests/test_reference.py fails when they differ; `--check` only compares).
reference: venv
	$(PY) docs/reference/generate.py

# The inner loop (target: under 5 minutes; see benchmarks/README.md): the engine's pure tests and its in-process Spark
# tests, without the crash matrix, the tests that start more JVMs or processes and the HDFS tier (`pytest -m hdfs`).
# `make test` runs every tier.
test-fast: venv $(TEST_CLASSES)
	$(PY) -m pytest $(XDIST) -m 'not slow and not crash and not hdfs' lakekeeper_dagster_tests/engine

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
	$(PY) -m lakekeeper_dagster.surface.instance $(UI_HOME)
	DAGSTER_HOME=$(abspath $(UI_HOME)) $(PY) -W 'ignore:Function `dev_command` is superseded:FutureWarning' \
		-m dagster dev -w workspace.yaml
