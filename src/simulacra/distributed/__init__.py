"""Distributed backends: agent partitions on Dask workers and on remote MCP workers (layer 6).

Importing this package registers its backends (``"dask"``, ``"mcp"``,
``"emulator"``) with :func:`simulacra.backends.register_backend`; the engine
layer imports it by name the first time one of them is asked for (see
``PLUGIN_BACKENDS``). Third-party packages (``dask.distributed``, ``mcp``)
are imported lazily, when a backend starts, so a missing extra only affects
the backend that needs it.
"""

from simulacra._util import claim_public_module
from simulacra.backends import register_backend as _register_backend

from ._dask import DaskBackend as DaskBackend
from ._emulator import EmulatorBackend as EmulatorBackend
from ._mcp import MCPBackend as MCPBackend
from ._mcp import MCPConfig as MCPConfig
from ._mcp import WorkerProcesses as WorkerProcesses
from ._mcp import spawn_workers as spawn_workers

__all__: list[str] = ["DaskBackend", "MCPBackend", "MCPConfig", "EmulatorBackend",
                      "WorkerProcesses", "spawn_workers"]

_register_backend("dask", DaskBackend, options=("scheduler_address", "n_workers", "partition"),
                  plugin=True)
_register_backend("mcp", MCPBackend, options=("mcp_config",), plugin=True)
_register_backend("emulator", EmulatorBackend, options=("mcp_config",), plugin=True)

claim_public_module(__name__, globals())
del claim_public_module
