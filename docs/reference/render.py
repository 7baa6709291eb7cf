"""How the reference pages (generate.py) render: the generated-page header, table cells, code spans, and the type,
constraints and default of a pydantic field."""

from __future__ import annotations

import json
from collections.abc import Iterable
from enum import Enum
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from lakekeeper_dagster.config import config_keys

REGENERATE = "make reference"
CONSTRAINTS = [
    ("gt", ">"),
    ("ge", ">="),
    ("lt", "<"),
    ("le", "<="),
    ("min_length", "length >="),
    ("pattern", "matches"),
]


def header(title: str, source: str) -> list[str]:
    """The page's first lines: that it is generated, from what, and how to regenerate it."""
    return [
        f"<!-- Generated from {source} by docs/reference/generate.py: do not edit; `{REGENERATE}` "
        "(python docs/reference/generate.py) regenerates it. -->",
        "",
        f"# {title}",
        "",
    ]


def text(value: str | None) -> str:
    """Plain text for a Markdown table cell: one line, pipes escaped, `<...>` outside code spans shown as such."""
    parts = " ".join((value or "").split()).replace("|", "\\|").split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;").replace(">", "&gt;") for i, p in enumerate(parts))


def code(value: str) -> str:
    """A code span for a table cell (pipes escaped, as GitHub's tables need)."""
    return f"`{value.replace('|', chr(92) + '|')}`"


def table(columns: list[str], rows: Iterable[list[str]]) -> list[str]:
    lines = [f"| {' | '.join(columns)} |", f"|{'---|' * len(columns)}"]
    return [*lines, *(f"| {' | '.join(row)} |" for row in rows), ""]


def type_text(annotation: Any) -> str:
    """A Python annotation as the reader writes the value: enums by their values, a settings model as `block`."""
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return " | ".join(json.dumps(member.value) for member in annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "block"
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, UnionType):
        return " | ".join(type_text(a) for a in args)
    if origin is Literal:
        return " | ".join(json.dumps(a) for a in args)
    if args:
        return f"{origin.__name__}[{', '.join(type_text(a) for a in args)}]"
    return getattr(annotation, "__name__", str(annotation))


def field_type(field: FieldInfo) -> str:
    """The field's type and its constraints (`int, >= 2`)."""
    limits = [
        f"{symbol} {getattr(item, attr)}"
        for item in field.metadata
        for attr, symbol in CONSTRAINTS
        if getattr(item, attr, None) is not None
    ]
    return code(type_text(field.annotation)) + "".join(f", {code(limit)}" for limit in limits)


def default_text(field: FieldInfo, default: Any) -> str:
    return "required" if field.is_required() else code(json.dumps(default))


def description(field: FieldInfo) -> str:
    """The field's description, and its examples when it has any."""
    examples = ", ".join(code(json.dumps(example)) for example in field.examples or [])
    return text(field.description) + (f" Example: {examples}." if examples else "")


def field_rows(model: type[BaseModel]) -> list[list[str]]:
    """A row per key of a flat model (a dg.Config): name, type, default, description."""
    return [
        [code(".".join(key.path)), field_type(key.field), default_text(key.field, key.default), description(key.field)]
        for key in config_keys(model)
    ]
