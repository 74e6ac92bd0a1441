"""``python -m simulacra.distributed.worker``: serve one MCP agent worker.

See :mod:`simulacra.distributed` (``MCPBackend``) and ``docs/distributed.md``;
``--help`` lists the options. The bearer token is read from the environment
variable ``SIMULACRA_MCP_TOKEN`` (or the one ``--token-env`` names).
"""

from __future__ import annotations

import sys

from ._mcp_worker import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
