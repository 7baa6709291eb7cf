"""lakekeeper-dagster: Hive small-file compaction as a Dagster code location.

The code location's definitions are in `lakekeeper_dagster.definitions` (importing this package loads no Dagster);
the engine, free of Dagster, is `lakekeeper_dagster.engine`.
"""
