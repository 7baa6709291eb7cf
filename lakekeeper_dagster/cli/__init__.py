"""The `lakekeeper-dagster` command line: the engine without Dagster (only `demo run` loads it).

`app` parses and dispatches; `common` holds what every command shares (the Spark session, table arguments, exit
codes, the run recorder); one module per command family; `submit` runs a command's driver in YARN."""

from lakekeeper_dagster.cli.app import main

__all__ = ["main"]
