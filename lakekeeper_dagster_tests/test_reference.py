"""The reference pages (docs/reference/*.md) are what the code generates (docs/reference/generate.py): a flag, a
config key or a Dagster definition changed without regenerating them fails here."""

from __future__ import annotations

import difflib
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from pydantic import Field

from lakekeeper_dagster.cli.app import build_parser
from lakekeeper_dagster.config import LakekeeperConfig

pytestmark = pytest.mark.pure

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "reference"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reference_generate", REFERENCE / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generate = _generator()


@pytest.mark.parametrize("page", sorted(generate.pages()))
def test_the_committed_page_is_what_the_code_generates(page: str) -> None:
    body = generate.pages()[page]()
    committed = (REFERENCE / page).read_text(encoding="utf-8")
    diff = difflib.unified_diff(committed.splitlines(), body.splitlines(), "committed", "generated", lineterm="")
    assert not generate.stale({page: body}), (
        f"docs/reference/{page} is not what the code generates; `make reference` regenerates it:\n"
        + "\n".join(list(diff)[:40])
    )


def test_a_new_flag_or_config_key_makes_its_page_stale() -> None:
    """The comparison sees a change of the code: an extra flag of one command, an extra config key."""
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command")
    commands.choices["compact"].add_argument("--extra-flag", help="a flag the committed page does not list")

    class Extended(LakekeeperConfig):
        extra_key: int = Field(default=1, description="a key the committed page does not list")

    assert generate.stale({"cli.md": generate.cli_page(parser)}) == ["cli.md"]
    assert generate.stale({"config.md": generate.config_page(Extended)}) == ["config.md"]
    assert generate.stale({"cli.md": generate.cli_page(build_parser())}) == []
