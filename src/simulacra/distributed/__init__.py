"""Distributed backends: agent partitions on Dask workers and on remote MCP workers (layer 6).

Importing this package registers its backends (``"dask"``, ``"mcp"``,
``"emulator"``) with :func:`simulacra.engines.register_backend`; the engine
layer imports it by name the first time one of them is asked for (see
``PLUGIN_BACKENDS``). Third-party packages (``dask.distributed``, ``mcp``)
are imported lazily, when a backend starts, so a missing extra only affects
the backend that needs it.
"""

from simulacra._util import claim_public_module

__all__: list[str] = []

claim_public_module(__name__, globals())
del claim_public_module
