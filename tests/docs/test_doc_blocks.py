"""The doc-block tests themselves: every Python block is collected, no skip is silent.

The blocks run through ``conftest.py`` (Sybil); these tests check that the
collection misses nothing a reader would run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from docs_sybil import SYBIL, doc_pages
from sybil.evaluators.python import PythonEvaluator

FENCE = re.compile(r"^```python[ \t]*$", re.MULTILINE)
INVISIBLE = re.compile(r"^<!--\s*invisible-code-block:\s*python\b", re.MULTILINE)
SKIP = re.compile(r"^<!--\s*skip:\s*(?P<args>.*?)\s*-->", re.MULTILINE)


def test_there_are_pages() -> None:
    names = {page.name for page in doc_pages()}
    assert {"design.md", "parallel.md"} <= names


@pytest.mark.parametrize("page", doc_pages(), ids=lambda page: page.name)
def test_every_python_block_is_collected(page: Path) -> None:
    """Each fenced Python block (and each invisible one) is one example Sybil runs."""
    text = page.read_text(encoding="utf-8")
    expected = len(FENCE.findall(text)) + len(INVISIBLE.findall(text))
    document = SYBIL.parse(page)
    python = [
        example for example in document.examples()
        if isinstance(example.region.evaluator, PythonEvaluator)
    ]
    assert expected == len(python), f"{page.name}: {expected} blocks, {len(python)} collected"


@pytest.mark.parametrize("page", doc_pages(), ids=lambda page: page.name)
def test_every_skip_says_why(page: Path) -> None:
    """A skipped block names its reason (a server, a long run), shown in pytest's summary."""
    for match in SKIP.finditer(page.read_text(encoding="utf-8")):
        action, _, reason = match["args"].partition(" ")
        assert action == "next", f"{page.name}: use 'skip: next \"why\"', got {match[0]!r}"
        assert re.fullmatch(r'"[^"]{10,}"', reason.strip()), (
            f"{page.name}: a skip needs a reason in quotes, got {match[0]!r}"
        )
