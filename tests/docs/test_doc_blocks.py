"""The doc-block tests themselves: every Python block is collected, no skip is silent.

The blocks run through ``conftest.py`` (Sybil); these tests check that the
collection misses nothing a reader would run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from docs_sybil import SYBIL, doc_pages
from sybil.evaluators.doctest import DocTestEvaluator
from sybil.evaluators.python import PythonEvaluator

FENCE = re.compile(r"^[ \t]*```python\b.*$", re.MULTILINE)
END_FENCE = re.compile(r"^[ \t]*```[ \t]*$", re.MULTILINE)
END_COMMENT = re.compile(r"^[ \t]*-->", re.MULTILINE)
INVISIBLE = re.compile(r"^<!--\s*invisible-code-block:\s*python\b", re.MULTILINE)
SKIP = re.compile(r"^<!--\s*skip:\s*(?P<args>.*?)\s*-->", re.MULTILINE)


def test_there_are_pages() -> None:
    names = {page.name for page in doc_pages()}
    assert {"index.md", "tutorial.md", "design.md"} <= names


def python_blocks(text: str) -> list[tuple[int, int]]:
    """``(first line, last line)`` of each Python block, fenced or invisible, from 1."""
    blocks = []
    for match in (*FENCE.finditer(text), *INVISIBLE.finditer(text)):
        start = text.count("\n", 0, match.start()) + 1
        closing = END_COMMENT if match[0].startswith("<!--") else END_FENCE
        end = closing.search(text, match.end())
        assert end is not None, f"a block at line {start} is never closed"
        blocks.append((start, text.count("\n", 0, end.start()) + 1))
    return sorted(blocks)


@pytest.mark.parametrize("page", doc_pages(), ids=lambda page: page.name)
def test_every_python_block_is_collected(page: Path) -> None:
    """Each Python block (fenced, invisible, or a ``>>>`` session) is run by Sybil."""
    blocks = python_blocks(page.read_text(encoding="utf-8"))
    runs = [
        example.line for example in SYBIL.parse(page).examples()
        if isinstance(example.region.evaluator, PythonEvaluator | DocTestEvaluator)
    ]
    missed = [(a, b) for a, b in blocks if not any(a <= line <= b for line in runs)]
    assert not missed, f"{page.name}: blocks at lines {missed} are not run"


@pytest.mark.parametrize("page", doc_pages(), ids=lambda page: page.name)
def test_every_skip_says_why(page: Path) -> None:
    """A skipped block names its reason (a server, a long run), shown in pytest's summary."""
    for match in SKIP.finditer(page.read_text(encoding="utf-8")):
        action, _, reason = match["args"].partition(" ")
        assert action == "next", f"{page.name}: use 'skip: next \"why\"', got {match[0]!r}"
        assert re.fullmatch(r'"[^"]{10,}"', reason.strip()), (
            f"{page.name}: a skip needs a reason in quotes, got {match[0]!r}"
        )
