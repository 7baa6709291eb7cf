"""The project's Dagster instance settings (`dagster_instance.yaml`, shipped in the package): installed as
`dagster.yaml` into a DAGSTER_HOME, where Dagster reads them (a dagster.yaml anywhere else is ignored, with a
warning). `python -m lakekeeper_dagster.instance_settings DIR` does it for `make ui`."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

TEMPLATE = Path(__file__).with_name("dagster_instance.yaml")


def install_instance_settings(dagster_home: Path) -> str:
    """Copy the template to `<dagster_home>/dagster.yaml` unless one is there (never overwritten); says what it did."""
    target = dagster_home / "dagster.yaml"
    if target.exists():
        if target.read_bytes() == TEMPLATE.read_bytes():
            return f"{target}: the project's instance settings"
        return f"{target} differs from the project's instance settings ({TEMPLATE}); it is kept as it is"
    dagster_home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(TEMPLATE, target)
    return f"wrote {target} (the project's instance settings: queued runs, one run per table)"


if __name__ == "__main__":
    print(install_instance_settings(Path(sys.argv[1]).absolute()))
