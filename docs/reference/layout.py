"""The layout page: every module of the two packages with the first sentence of its docstring, so the map of the
code is the code's own word and cannot drift from it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from render import header

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("spark_resources", "lakekeeper_dagster")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(])")


def first_sentence(path: Path) -> str:
    """The docstring's first sentence, on one line."""
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    paragraph = " ".join(docstring.split("\n\n", 1)[0].split())
    return SENTENCE_END.split(paragraph, maxsplit=1)[0]


def layout_page() -> str:
    lines = [
        *header("Layout", "each module's docstring"),
        "Every module with the first sentence of its docstring. The layer rules:",
        "[contributing](../contributing.md#layout).",
    ]
    for package in PACKAGES:
        for directory in sorted({p.parent for p in (REPO / package).rglob("*.py")}):
            relative = directory.relative_to(REPO).as_posix()
            init = directory / "__init__.py"
            lines += ["", f"## `{relative}/`", ""]
            if init.exists() and first_sentence(init):
                lines += [first_sentence(init), ""]
            for module in sorted(directory.glob("*.py")):
                if module.name != "__init__.py":
                    lines.append(f"- `{module.name}` — {first_sentence(module)}")
    return "\n".join(lines) + "\n"
