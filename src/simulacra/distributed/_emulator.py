"""EmulatorBackend: the MCP worker protocol, run in this process, with no network.

Each emulated worker is the very MCP server a worker process runs
(:func:`~._mcp_worker.build_server` around its own
:class:`~._protocol.WorkerState`), reached through the ``mcp`` SDK's
in-memory transport: every call is a real JSON-RPC ``tools/call`` with the
same pickled, base64-encoded arguments and replies, the same partitioning
and the same merging as :class:`MCPBackend` -- only the sockets, the
processes and the bearer token are missing. So a bug in the distributed
logic shows up here, fast and debuggable (one process, breakpoints work),
before any server is started.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import Any, ClassVar, final

from simulacra._util import install_hint
from simulacra.errors import BackendUnavailable, ConfigError

from ._mcp import MCPConfig, RemoteBackend, _Link
from ._mcp_worker import build_server
from ._protocol import WorkerState

__all__ = ["EmulatorBackend"]

#: Emulated workers when the configuration does not say.
DEFAULT_WORKERS = 2


@final
class EmulatorBackend(RemoteBackend):
    """Runs the MCP worker protocol in-process: distributed logic without a network.

    ``EmulatorBackend()`` emulates two workers; ``EmulatorBackend({"workers":
    4})`` four. Results are identical to :class:`~simulacra.LocalBackend`
    (and to :class:`MCPBackend`) for every worker count.

    Args:
        mcp_config: ``None``, or an :class:`MCPConfig` / mapping whose
            ``workers`` (how many to emulate), ``partition`` and
            ``call_timeout`` are used; ``urls`` make no sense here.

    Raises:
        ConfigError: A configuration value is bad, or *urls* are given.
    """

    name = "emulator"
    _kind: ClassVar[str] = "emulated MCP worker"

    def __init__(self, mcp_config: MCPConfig | Mapping[str, Any] | None = None) -> None:
        super().__init__(mcp_config)
        if self._config.urls:
            raise ConfigError(
                "mcp_config.urls cannot be used with the emulator, which runs its workers in this "
                "process; use the 'mcp' backend to reach workers by URL")

    @property
    def workers(self) -> int:
        """How many workers are emulated."""
        return self._config.workers or DEFAULT_WORKERS

    def _open(self) -> list[tuple[str, subprocess.Popen[bytes] | None]]:
        return [(f"emulated worker {k}", None) for k in range(self.workers)]

    async def _connect(self, link: _Link, stack: AsyncExitStack) -> Any:
        try:
            from mcp import Client  # noqa: PLC0415  (lazy: the mcp extra)
        except ImportError as exc:
            raise BackendUnavailable(
                f"EmulatorBackend needs the package {exc.name!r}: {install_hint('mcp')}"
            ) from exc
        server = build_server(WorkerState())
        # "legacy": the in-memory JSON-RPC stream transport (framing and all), not
        # the direct in-process dispatch the SDK would otherwise pick.
        return await stack.enter_async_context(Client(server, mode="legacy", cache=None))

    def __repr__(self) -> str:
        return f"EmulatorBackend(mcp_config={self._config!r})"
