"""The command line's own options, with no Spark: `--version`, also where the package has no install metadata (the
packed environment a cluster-mode driver runs in)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import pytest

from lakekeeper_dagster.cli.app import build_parser
from lakekeeper_dagster.engine.protocol import history

pytestmark = pytest.mark.pure


def _version_line(capsys) -> str:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["--version"])
    assert exited.value.code == 0
    return capsys.readouterr().out.strip()


def test_version_names_the_installed_package(capsys):
    assert _version_line(capsys) == f"lakekeeper-dagster {version('lakekeeper-dagster')}"


def test_a_package_without_install_metadata_still_parses_every_command(capsys, monkeypatch):
    def missing(name: str) -> str:
        raise PackageNotFoundError(name)

    monkeypatch.setattr(history, "version", missing)
    assert build_parser().parse_args(["analyze", "--table", "d.t"]).command == "analyze"
    assert _version_line(capsys) == "lakekeeper-dagster unknown"
