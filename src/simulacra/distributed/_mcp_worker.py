"""The worker side: an MCP server (official ``mcp`` SDK) serving the worker protocol.

:func:`build_server` wraps a :class:`~._protocol.WorkerState` in a low-level
``mcp.server.Server`` whose tools are the six operations of the worker
protocol. :func:`main` (``python -m simulacra.distributed.worker``) serves it
over streamable HTTP with uvicorn:

- it binds ``127.0.0.1`` by default and refuses any non-loopback address
  unless ``--allow-remote`` is given;
- every request must carry ``Authorization: Bearer <token>``, the token read
  from an environment variable (never the command line, which other users
  can read); a missing or wrong token is answered with HTTP 401 by the SDK's
  bearer-auth middleware before any tool runs;
- when it listens it prints one line, ``SIMULACRA_MCP_WORKER_READY <url>``,
  on stdout (the spawning engine reads it: the port may be chosen by the OS),
  then points stdout at stderr so agents that print cannot fill a pipe;
- it exits on the ``shutdown`` tool, on SIGTERM/SIGINT, or when the process
  that started it (``--parent-pid``) is gone.

``mcp``, ``uvicorn`` and ``mcp_types`` are imported inside the functions, so
importing this module costs nothing and works without them.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import ipaddress
import os
import socket
import sys
from collections.abc import Callable
from typing import Any, Final

from simulacra._util import install_hint
from simulacra._version import __version__
from simulacra.errors import ConfigError

from ._protocol import TOOLS, WorkerState

__all__ = [
    "DEFAULT_TOKEN_ENV",
    "READY_PREFIX",
    "build_server",
    "is_loopback",
    "main",
]

#: The environment variable a worker reads its bearer token from by default.
DEFAULT_TOKEN_ENV: Final = "SIMULACRA_MCP_TOKEN"  # noqa: S105  (a variable name)
#: The first word of the line a worker prints when it listens.
READY_PREFIX: Final = "SIMULACRA_MCP_WORKER_READY"
#: The largest request body a worker accepts by default (message batches can be big).
DEFAULT_MAX_REQUEST_BYTES: Final = 1 << 30
#: Seconds between checks that the parent process still exists.
_PARENT_POLL_S: Final = 1.0

_DESCRIPTIONS: Final = {
    "start": "Build this worker's partition of agents. data: (protocol version, specs, seed, "
             "world, all ids). Returns the worker's pid.",
    "deliver": "Replace every inbox with these messages. data: message tuples in total order.",
    "execute_action": "Run a phase on the held agents. data: (phase, step, phase index). "
                      "Returns their messages.",
    "agents_for": "The sorted ids of held agents a phase would run on now. data: the phase.",
    "snapshot": "The state of every held agent, in id order.",
    "shutdown": "Drop the agents and stop this worker.",
}
_STRING: Final = {"type": "string", "contentEncoding": "base64",
                  "description": "a pickle (protocol 5), base64-encoded"}


def is_loopback(host: str) -> bool:
    """Whether *host* names the loopback interface (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _schema(tool: str) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    if tool in ("start", "deliver", "execute_action", "agents_for"):
        properties["data"] = _STRING
        required.append("data")
    if tool in ("execute_action", "agents_for", "snapshot"):
        properties["deliver"] = _STRING
    return {"type": "object", "properties": properties, "required": required,
            "additionalProperties": False}


def build_server(state: WorkerState, on_shutdown: Callable[[], None] | None = None) -> Any:
    """An ``mcp.server.Server`` whose tools run the worker protocol on *state*.

    Args:
        state: The worker's agents.
        on_shutdown: Called after the ``shutdown`` tool has replied.
    """
    import mcp_types as types  # noqa: PLC0415  (lazy: the mcp extra)
    from mcp.server import Server  # noqa: PLC0415

    tools = [types.Tool(name=name, description=_DESCRIPTIONS[name], input_schema=_schema(name))
             for name in TOOLS]

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: Any) -> Any:
        reply = state.call(params.name, params.arguments)
        if state.stopping and on_shutdown is not None:
            asyncio.get_running_loop().call_later(0.05, on_shutdown)
        return types.CallToolResult(content=[types.TextContent(type="text", text=reply)])

    return Server("simulacra-worker", version=__version__,
                  instructions="A simulacra agent worker: it holds one partition of a model's "
                               "agents and runs phases on them for its engine.",
                  on_list_tools=list_tools, on_call_tool=call_tool)


class _StaticToken:
    """The SDK's TokenVerifier for one shared secret (compared in constant time)."""

    def __init__(self, token: str) -> None:
        self._token = token.encode("utf-8")

    async def verify_token(self, token: str) -> Any:
        from mcp.server.auth.provider import AccessToken  # noqa: PLC0415

        if hmac.compare_digest(token.encode("utf-8"), self._token):
            return AccessToken(token=token, client_id="simulacra-engine", scopes=[])
        return None


def _app(server: Any, url: str, token: str, host: str, max_request_bytes: int) -> Any:
    from mcp.server.auth.settings import AuthSettings  # noqa: PLC0415
    from pydantic import AnyHttpUrl  # noqa: PLC0415

    return server.streamable_http_app(
        json_response=True,
        session_idle_timeout=None,  # one engine per worker; phases may be far apart
        max_request_body_size=max_request_bytes,
        host=host,
        auth=AuthSettings(issuer_url=AnyHttpUrl(url), resource_server_url=None),
        token_verifier=_StaticToken(token),
    )


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets that say
    # so, and without it every reply waits ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(False)
    return sock


async def _serve(sock: socket.socket, host: str, token: str, max_request_bytes: int,
                 parent_pid: int | None) -> None:
    import uvicorn  # noqa: PLC0415

    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/mcp"
    state = WorkerState()
    holder: list[Any] = []

    def stop() -> None:
        if holder:
            holder[0].should_exit = True

    app = _app(build_server(state, stop), url, token, host, max_request_bytes)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_keep_alive=120,
                            access_log=False)
    server = uvicorn.Server(config)
    holder.append(server)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if serving.done():
            await serving  # raises what stopped it
            return
        await asyncio.sleep(0.01)
    print(f"{READY_PREFIX} {url}", flush=True)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # agents' prints must not fill a pipe
    while not serving.done():
        if parent_pid is not None and os.getppid() != parent_pid:
            server.should_exit = True  # orphaned: the engine is gone
        await asyncio.wait({serving}, timeout=_PARENT_POLL_S)
    await serving


def main(argv: list[str] | None = None) -> int:
    """Run one worker server until it is shut down; the process exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m simulacra.distributed.worker",
        description="Serve a simulacra agent worker (MCP, streamable HTTP, bearer token).")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default 127.0.0.1; others need --allow-remote)")
    parser.add_argument("--port", type=int, default=0, help="port (default 0: any free port)")
    parser.add_argument("--token-env", default=DEFAULT_TOKEN_ENV,
                        help=f"environment variable holding the bearer token "
                             f"(default {DEFAULT_TOKEN_ENV})")
    parser.add_argument("--allow-remote", action="store_true",
                        help="allow binding a non-loopback address (the token is then the only "
                             "guard, and it travels in plain HTTP: use a trusted network)")
    parser.add_argument("--max-request-bytes", type=int, default=DEFAULT_MAX_REQUEST_BYTES)
    parser.add_argument("--parent-pid", type=int, default=None,
                        help="exit when this process is no longer the parent")
    args = parser.parse_args(argv)
    try:  # what _serve imports, before anything is bound
        import mcp.server  # noqa: PLC0415, F401
        import uvicorn  # noqa: PLC0415, F401
    except ImportError as exc:
        name = (exc.name or "mcp").partition(".")[0]
        print(f"simulacra worker: needs the package {name!r}, which is not installed: "
              f"{install_hint('mcp')}", file=sys.stderr)
        return 2
    try:
        if not is_loopback(args.host) and not args.allow_remote:
            raise ConfigError(
                f"--host {args.host!r} is not a loopback address; a worker runs code sent to "
                "it, so binding another interface needs --allow-remote"
            )
        token = os.environ.get(args.token_env, "")
        if not token:
            raise ConfigError(
                f"the bearer token is missing: set the environment variable {args.token_env} "
                "(a worker never serves without one)"
            )
        sock = _listen(args.host, args.port)
    except (ConfigError, OSError) as exc:
        print(f"simulacra worker: {exc}", file=sys.stderr)
        return 2
    asyncio.run(_serve(sock, args.host, token, args.max_request_bytes, args.parent_pid))
    return 0
