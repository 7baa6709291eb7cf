"""Benchmarks of lakekeeper-dagster against the floor (bare Spark) and against Lakekeeper (see README.md here)."""
