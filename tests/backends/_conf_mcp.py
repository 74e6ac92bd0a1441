"""Conformance entries for the MCP workers and their in-process emulator.

``mcp-1`` spawns its own worker server; ``mcp-2`` and ``mcp-4`` connect by
URL and token to one shared set of four worker servers, started on first use
and stopped when the test process exits, so the module starts five servers in
all. The emulator needs no servers.
"""

from __future__ import annotations

import atexit
from collections.abc import Callable

from simulacra import ExecutionBackend
from simulacra.distributed import EmulatorBackend, MCPBackend, WorkerProcesses, spawn_workers

_shared: list[WorkerProcesses] = []


def _shared_workers() -> WorkerProcesses:
    if not _shared:
        _shared.append(spawn_workers(4))
        atexit.register(_shared[0].close)
    return _shared[0]


def _by_url(count: int) -> ExecutionBackend:
    return MCPBackend(_shared_workers().config(count))


BACKENDS: list[tuple[str, Callable[[], ExecutionBackend]]] = [
    ("emulator-1", lambda: EmulatorBackend({"workers": 1})),
    ("emulator-2", lambda: EmulatorBackend({"workers": 2})),
    ("emulator-4", lambda: EmulatorBackend({"workers": 4})),
    ("emulator-3-hash", lambda: EmulatorBackend({"workers": 3, "partition": "hash"})),
    ("mcp-1", lambda: MCPBackend({"workers": 1})),
    ("mcp-2", lambda: _by_url(2)),
    ("mcp-4", lambda: _by_url(4)),
]
