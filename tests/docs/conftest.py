"""Collect docs/: every Python block of every page runs as a test (see ``docs_sybil.py``).

``pyproject.toml`` sends pytest into ``tests/`` only, so it never walks
``docs/``; this conftest hangs the pages under ``tests/docs`` instead: the
collector of this file yields one Sybil file per page, whose items are named
``docs/PAGE.md::line:N,column:1``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from docs_sybil import DOCS, SYBIL, doc_pages
from sybil.integration.pytest import SybilFile, SybilItem


class DocBlock(SybilItem):
    """One block of a page, as Sybil runs it."""

    def _traceback_filter(self, excinfo: pytest.ExceptionInfo[BaseException]) -> Any:
        # Sybil's filter assumes at least two frames below its evaluator: an
        # assert that fails on a block's first line crashed pytest's report
        # (IndexError, an INTERNALERROR) instead of showing the failure.
        try:
            return super()._traceback_filter(excinfo)
        except IndexError:
            return excinfo.traceback


class DocPage(SybilFile):
    """One page of docs/: its blocks, in order, sharing one namespace."""

    def collect(self) -> Any:
        for sybil in self.sybils:
            document = sybil.parse(self.path)
            self.documents.append(document)
            for example in document.examples():
                yield DocBlock.from_parent(self, sybil=sybil, example=example)


class DocPages(pytest.File):
    """The pages of docs/, each a Sybil file of examples."""

    def collect(self) -> Any:
        for page in doc_pages():
            yield DocPage.from_parent(self, path=page, sybils=[SYBIL])


#: Seconds one block may take: a block that hangs (an agent that failed while the
#: page waits on its channel) fails in a minute, not at the suite's 300 s.
BLOCK_TIMEOUT = 60


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give every doc block the shorter timeout."""
    for item in items:
        if isinstance(item, DocBlock):
            item.add_marker(pytest.mark.timeout(BLOCK_TIMEOUT))


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """Collect docs/ through this conftest, the one file here pytest always visits."""
    if file_path == Path(__file__).resolve():
        return DocPages.from_parent(parent, path=DOCS)
    return None
