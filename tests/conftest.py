"""Fixtures shared by every test directory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from simulacra import Sim


def _has_subinterpreters() -> bool:
    """Whether this Python can run the 'interpreters' backend (the executor's own check)."""
    from simulacra import BackendUnavailable
    from simulacra.executors import InterpreterExecutor

    try:
        InterpreterExecutor(1).close()  # creates no pool: it only picks one
    except BackendUnavailable:
        return False
    return True


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip ``@pytest.mark.without_subinterpreters`` tests where the backend works."""
    if item.get_closest_marker("without_subinterpreters") and _has_subinterpreters():
        pytest.skip("this Python has sub-interpreters: the 'interpreters' backend works here")


@pytest.fixture
def sim() -> Iterator[Sim]:
    """A fresh ``Sim(seed=0)``; the kernel's invariants are checked after the test."""
    # Imported here, not at the top, so that a broken kernel fails the tests
    # that use it rather than the collection of every test.
    import simulacra

    fresh = simulacra.Sim(seed=0)
    yield fresh
    fresh._check_invariants()
