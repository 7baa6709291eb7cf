"""The project's Dagster instance settings (`dagster_instance.yaml`, shipped in the package): installed as
`dagster.yaml` into a DAGSTER_HOME, where Dagster reads them (a dagster.yaml anywhere else is ignored, with a
warning). With `DAGSTER_POSTGRES_URL` set, the installed file stores the instance in that PostgreSQL database
(dagster-postgres; the URL stays in the environment, never on disk); else in SQLite files under DAGSTER_HOME.
`python -m lakekeeper_dagster.surface.instance DIR` does it for `make ui`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from lakekeeper_dagster.engine.errors import ConfigError

TEMPLATE = Path(__file__).with_name("dagster_instance.yaml")
POSTGRES_URL_ENV = "DAGSTER_POSTGRES_URL"
POSTGRES_SCHEME = "postgresql+psycopg2"
POSTGRES_STORAGE = f"""\
# Installed with {POSTGRES_URL_ENV} set: every process of the instance (webserver, daemon, code servers, run
# workers) needs that variable, e.g. postgresql+psycopg2://user:password@host:5432/dagster.
storage:
  postgres:
    postgres_url:
      env: {POSTGRES_URL_ENV}
"""


def instance_settings(postgres: bool) -> str:
    """The dagster.yaml to install: the template, plus PostgreSQL storage when `postgres`."""
    template = TEMPLATE.read_text()
    return template + POSTGRES_STORAGE if postgres else template


def check_postgres_url(url: str) -> None:
    """Refuse a URL that names no driver: SQLAlchemy 2.1 reads a bare `postgresql://` as psycopg 3, which
    dagster-postgres does not install ("No module named 'psycopg'" at the first connection)."""
    scheme = url.split("://", 1)[0] if "://" in url else "no scheme"
    if not scheme.startswith("postgresql+"):
        raise ConfigError(
            f"{POSTGRES_URL_ENV} starts with {scheme}, not {POSTGRES_SCHEME}:// (psycopg2, the driver dagster-postgres "
            "installs; a bare postgresql:// means psycopg 3 to SQLAlchemy 2.1): write it as "
            f"{POSTGRES_SCHEME}://user:password@host:5432/database"
        )


def install_instance_settings(dagster_home: Path) -> str:
    """Write `<dagster_home>/dagster.yaml` unless one is there (never overwritten); says what it did.

    The storage follows `DAGSTER_POSTGRES_URL` (set: PostgreSQL, else SQLite). A dagster.yaml this function wrote
    for the other storage is refused (ConfigError): the instance would silently not be the one asked for."""
    target = dagster_home / "dagster.yaml"
    postgres = bool(os.environ.get(POSTGRES_URL_ENV))
    if postgres:
        check_postgres_url(os.environ[POSTGRES_URL_ENV])
    wanted = "PostgreSQL ($DAGSTER_POSTGRES_URL)" if postgres else f"SQLite (under {dagster_home})"
    if target.exists():
        found = target.read_text()
        if found == instance_settings(postgres):
            return f"{target}: the project's instance settings, storage {wanted}"
        if found == instance_settings(not postgres):
            if postgres:
                raise ConfigError(
                    f"{target} stores the Dagster instance in SQLite, but {POSTGRES_URL_ENV} is set: unset it to "
                    f"open that instance, or use another DAGSTER_HOME (or remove {target}) for a PostgreSQL one"
                )
            raise ConfigError(
                f"{target} stores the Dagster instance in PostgreSQL, but {POSTGRES_URL_ENV} is not set: set it "
                "to that database's URL, or use another DAGSTER_HOME for a SQLite instance"
            )
        return f"{target} differs from the project's instance settings ({TEMPLATE}); it is kept as it is"
    dagster_home.mkdir(parents=True, exist_ok=True)
    target.write_text(instance_settings(postgres))
    return f"wrote {target} (the project's instance settings: queued runs, one run per table, storage {wanted})"


if __name__ == "__main__":
    try:
        print(install_instance_settings(Path(sys.argv[1]).absolute()))
    except ConfigError as error:
        sys.exit(f"error: {error}")
