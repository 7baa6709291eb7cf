"""A packed Python environment for `deploy_mode: cluster`, as conda-pack makes Lakekeeper's: a fresh venv holding this
project and only the packages of its command-line path, in a tar.gz that YARN unpacks beside the driver and executors.

Not pyspark: YARN's Client ships pyspark.zip and py4j's zip (python/lib of the Spark that submits) on the driver's
and executors' PYTHONPATH. The venv's `bin/python` is a symlink to this machine's Python (venv-style, not a
relocatable copy as conda-pack's): the NodeManagers run on this machine, so the link resolves in their containers.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from lakekeeper_dagster_tests.tables import REPO

# The third-party imports of `lakekeeper-dagster`'s command line (cli.py and the engine), not Dagster's nor pyspark.
CLI_REQUIREMENTS = ["pydantic>=2.5,<3", "pyyaml>=6", "rich>=13", "fastavro[snappy,zstandard]>=1.9"]
PACKAGES = ("lakekeeper_dagster", "spark_resources")
BASE_PYTHON = Path(sys.executable).resolve()  # the interpreter below the tests' virtualenv


def build_packed_env(directory: Path) -> Path:
    """`directory`/lakekeeper_env.tar.gz: a venv of BASE_PYTHON with CLI_REQUIREMENTS (installed from uv's cache)
    and this tree's packages, archived from its root (`archives: <it>#env`, `python_env: ./env/bin/python`)."""
    env = directory / "env"
    subprocess.run([str(BASE_PYTHON), "-m", "venv", "--without-pip", str(env)], check=True)
    uv = Path(sys.executable).parent / "uv"
    install = [str(uv), "pip", "install", "--offline", "--python", str(env / "bin" / "python"), *CLI_REQUIREMENTS]
    subprocess.run(install, check=True, capture_output=True)
    (site,) = (env / "lib").glob("python3.*/site-packages")
    for package in PACKAGES:
        shutil.copytree(REPO / package, site / package, ignore=shutil.ignore_patterns("__pycache__"))
    archive = directory / "lakekeeper_env.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(env, arcname=".")
    return archive
