"""The Dagster surface: the managed tables as assets, their checks, jobs, schedules and sensors (`build`), read by the
code location (`lakekeeper_dagster.definitions`). It imports the engine and the config, never the CLI or the demo."""
