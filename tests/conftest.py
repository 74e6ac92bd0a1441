"""Fixtures shared by every test directory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from simulacra import Sim


@pytest.fixture
def sim() -> Iterator[Sim]:
    """A fresh ``Sim(seed=0)``; the kernel's invariants are checked after the test."""
    # Imported here, not at the top, so that a broken kernel fails the tests
    # that use it rather than the collection of every test.
    import simulacra

    fresh = simulacra.Sim(seed=0)
    yield fresh
    fresh._check_invariants()
