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
	$(CLI) compact --database $(DEMO_DB)
	$(CLI) analyze --database $(DEMO_DB)

test: venv
	$(VENV)/bin/ruff check .
	$(PY) -m pytest

metastore-start: venv
	$(CLI) metastore start

metastore-stop: venv
	$(CLI) metastore stop
