"""The documentation's links, checked from the source (no Spark): every Markdown link and image in README.md,
docs/ and benchmarks/README.md is relative, points at a file inside the repository that exists, and an anchor
names a heading of that file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure

REPO = Path(__file__).resolve().parents[1]
# `[text](target)` and `![alt](target "title")`; code spans and fenced blocks are removed first.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _documents() -> list[Path]:
    """Every Markdown file the documentation is made of."""
    return [REPO / "README.md", REPO / "benchmarks" / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def _targets(document: Path) -> list[str]:
    """The link targets of one document, outside code."""
    text = CODE_SPAN.sub("", FENCE.sub("", document.read_text(encoding="utf-8")))
    return LINK.findall(text)


def _anchors(document: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file."""
    text = FENCE.sub("", document.read_text(encoding="utf-8"))
    anchors = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def _problem(document: Path, target: str) -> str | None:
    """Why a link target is broken, or None when it resolves inside the repository."""
    if SCHEME.match(target) or target.startswith(("/", "\\")):
        return "not relative"
    path_part, _, anchor = target.partition("#")
    resolved = (document.parent / path_part).resolve() if path_part else document
    if not resolved.is_relative_to(REPO):
        return "outside the repository"
    if not resolved.exists():
        return "no such file"
    if anchor and resolved.suffix == ".md" and anchor.lower() not in _anchors(resolved):
        return f"no heading for #{anchor}"
    return None


def test_the_documents_exist() -> None:
    """The README, the benchmarks' README and a docs/ tree are there to check."""
    documents = _documents()
    assert all(document.is_file() for document in documents)
    assert len(documents) > 2


@pytest.mark.parametrize("document", _documents(), ids=lambda path: str(path.relative_to(REPO)))
def test_every_link_is_relative_and_resolves(document: Path) -> None:
    """No link leaves the repository or points at a missing file or heading."""
    broken = []
    for target in _targets(document):
        problem = _problem(document, target)
        if problem:
            broken.append(f"{target}: {problem}")
    assert not broken, f"{document.relative_to(REPO)}: " + "; ".join(broken)
