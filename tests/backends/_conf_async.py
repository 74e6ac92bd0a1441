"""AsyncBackend in the conformance suite (test_conformance.py picks up this BACKENDS list)."""

from __future__ import annotations

from collections.abc import Callable

from simulacra import AsyncBackend, ExecutionBackend

BACKENDS: list[tuple[str, Callable[[], ExecutionBackend]]] = [
    ("async-1", lambda: AsyncBackend(1)),
    ("async-2", lambda: AsyncBackend(2)),
    ("async-4", lambda: AsyncBackend(4)),
    ("async-128", AsyncBackend),
]
