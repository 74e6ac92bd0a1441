"""MCPBackend: agent partitions held by MCP worker servers; the engine is their client.

Each worker is an MCP server (the official ``mcp`` SDK, streamable HTTP; see
``_mcp_worker``) that holds one partition of the agents for a whole run and
serves the worker protocol of ``_protocol`` as tools. The engine drives all
workers concurrently from one asyncio loop on a private thread: per phase one
``tools/call`` per worker, in parallel, and the replies are merged in worker
order (the engine then sorts messages into the total order), so results are
bit-identical to :class:`~simulacra.LocalBackend`.

Failures: an agent's exception comes back as data and is raised as
:class:`~simulacra.AgentActionError` (the lowest agent id wins, as in the
reference). A worker whose process dies, whose connection breaks, or that
does not answer within ``call_timeout`` raises :class:`~simulacra.WorkerLost`:
each call is watched every 0.1 s (spawned processes are polled for
liveness), so a dead worker is reported within a fraction of a second, never
a hang. A worker that refuses the token raises
:class:`~simulacra.BackendError` naming its URL and the HTTP status. Agent
state, a payload or initial state that does not pickle raises
:class:`~simulacra.errors.UncopyableState` naming the agent, the attribute,
argument or message, the phase and the step, as
:class:`~simulacra.backends.ProcessPoolBackend` does; the workers stay usable.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, final
from urllib.parse import urlsplit

from simulacra._util import install_hint, plural
from simulacra.agents import AgentId, AgentSpec, Message, Phase, freeze_world, sorted_ids
from simulacra.backends import PARTITIONS, AgentSnapshot, BackendBase, describe_exit, partition_ids
from simulacra.errors import BackendError, BackendUnavailable, ConfigError, WorkerLost
from simulacra.executors import available_cpus
from simulacra.rng import SeedTree

from ._mcp_worker import DEFAULT_TOKEN_ENV, READY_PREFIX, is_loopback
from ._protocol import (
    PROTOCOL_VERSION,
    as_message,
    decode,
    encode,
    encode_start,
    error_rank,
    plain,
    unpack_error,
)

__all__ = ["MCPBackend", "MCPConfig", "WorkerProcesses", "spawn_workers"]

#: Seconds between checks on a pending call (reply, connection, process, deadline).
_POLL_S: Final = 0.1
#: Seconds a worker gets to leave politely on close before it is terminated.
_CLOSE_S: Final = 3.0


# --------------------------------------------------------------------------- configuration


def _positive(value: object, field_name: str, kind: type) -> Any:
    """*value* if it is a positive int (or, for ``kind=float``, number); else ConfigError."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and (kind is float or isinstance(value, int)) and value > 0:  # type: ignore[operator]
        return float(value) if kind is float else value  # type: ignore[arg-type]
    expected = "an int >= 1" if kind is int else "a number > 0"
    raise ConfigError(f"{field_name} must be {expected}, got {type(value).__name__} {value!r}")


@final
@dataclass(frozen=True, slots=True)
class MCPConfig:
    """Where the MCP workers are, and how to talk to them.

    Either *workers* local worker servers are spawned (the default), or the
    backend connects to running ones at *urls*.

    Attributes:
        workers: How many worker servers to spawn (``None``: one per available
            CPU). Ignored when *urls* are given.
        urls: Streamable-HTTP endpoints of running workers
            (``http://host:port/mcp``), one partition each, in this order.
        token: The bearer token for *urls* (spawned workers get a fresh random
            one each). Prefer *token_env* in settings files.
        token_env: The environment variable holding the token for *urls* when
            *token* is not given.
        host: The address spawned workers bind (loopback by default).
        allow_remote: Allow a non-loopback *host*, or *urls* on other hosts.
            Workers run code the engine sends them, guarded only by the token,
            which travels in plain HTTP: use it on a trusted network.
        partition: ``"round_robin"`` over sorted ids or ``"hash"`` (see
            :func:`simulacra.backends.partition_ids`).
        call_timeout: Seconds one call may take before the worker counts as lost.
        start_timeout: Seconds a spawned worker may take to start listening.
    """

    workers: int | None = None
    urls: tuple[str, ...] = ()
    token: str | None = field(default=None, repr=False)
    token_env: str = DEFAULT_TOKEN_ENV
    host: str = "127.0.0.1"
    allow_remote: bool = False
    partition: str = "round_robin"
    call_timeout: float = 600.0
    start_timeout: float = 60.0

    _FIELDS: ClassVar[tuple[str, ...]] = (
        "workers", "urls", "token", "token_env", "host", "allow_remote", "partition",
        "call_timeout", "start_timeout")

    def __post_init__(self) -> None:
        if self.workers is not None:
            _positive(self.workers, "mcp_config.workers", int)
        urls: object = self.urls
        if isinstance(urls, str) or not isinstance(urls, tuple | list):
            raise ConfigError(
                f"mcp_config.urls must be a list of worker URLs, got {type(urls).__name__} "
                f"{urls!r}")
        object.__setattr__(self, "urls", tuple(urls))
        given: tuple[object, ...] = self.urls
        for n, url in enumerate(given):
            parts = urlsplit(url) if isinstance(url, str) else None
            if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
                raise ConfigError(
                    f"mcp_config.urls[{n}] must be an http(s) URL such as "
                    f"'http://127.0.0.1:8765/mcp', got {url!r}")
            if not self.allow_remote and not is_loopback(parts.hostname):
                raise ConfigError(
                    f"mcp_config.urls[{n}] {url!r} is not on this machine; set "
                    "mcp_config.allow_remote=true to send work (pickled code references) there")
        for name in ("token", "token_env", "host"):
            value: object = getattr(self, name)
            optional = value is None and name == "token"
            if not optional and (not isinstance(value, str) or not value):
                raise ConfigError(f"mcp_config.{name} must be a non-empty str, got {value!r}")
        if not isinstance(self.allow_remote, bool):
            raise ConfigError(f"mcp_config.allow_remote must be true or false, got "
                              f"{self.allow_remote!r}")
        if not self.allow_remote and not is_loopback(self.host):
            raise ConfigError(
                f"mcp_config.host {self.host!r} is not a loopback address; workers run code sent "
                "to them, so binding another interface needs mcp_config.allow_remote=true")
        if self.partition not in PARTITIONS:
            raise ConfigError(f"mcp_config.partition must be one of "
                              f"{', '.join(map(repr, PARTITIONS))}, got {self.partition!r}")
        object.__setattr__(self, "call_timeout",
                           _positive(self.call_timeout, "mcp_config.call_timeout", float))
        object.__setattr__(self, "start_timeout",
                           _positive(self.start_timeout, "mcp_config.start_timeout", float))

    @classmethod
    def of(cls, value: MCPConfig | Mapping[str, Any] | None) -> MCPConfig:
        """An MCPConfig from itself, a mapping of its fields (a settings file), or ``None``.

        Raises:
            ConfigError: An unknown key or a bad value; the message names it.
        """
        if value is None:
            return cls()
        if isinstance(value, MCPConfig):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"mcp_config must be a mapping or an MCPConfig, got "
                              f"{type(value).__name__} {value!r}")
        unknown = sorted(str(key) for key in value if key not in cls._FIELDS)
        if unknown:
            raise ConfigError(f"mcp_config.{unknown[0]} is not a known setting (known: "
                              f"{', '.join(cls._FIELDS)})")
        return cls(**value)

    def bearer_token(self) -> str:
        """The token for *urls*: *token*, or the value of *token_env*.

        Raises:
            ConfigError: Neither is set.
        """
        if self.token is not None:
            return self.token
        token = os.environ.get(self.token_env, "")
        if not token:
            raise ConfigError(
                f"mcp_config: the workers' bearer token is missing: set the environment variable "
                f"{self.token_env} (mcp_config.token_env) or pass mcp_config.token")
        return token


# --------------------------------------------------------------------------- spawned workers


@final
class WorkerProcesses:
    """Local worker servers started by :func:`spawn_workers`; stop them with :meth:`close`.

    Attributes:
        urls: Their endpoints, in worker order.
        token: The bearer token they accept (fresh and random).
        processes: Their ``subprocess.Popen`` handles.
    """

    def __init__(self, urls: list[str], token: str,
                 processes: list[subprocess.Popen[bytes]]) -> None:
        self.urls = tuple(urls)
        self.token = token
        self.processes = tuple(processes)

    @property
    def pids(self) -> tuple[int, ...]:
        """The workers' process ids."""
        return tuple(p.pid for p in self.processes)

    def config(self, count: int | None = None, **options: Any) -> MCPConfig:
        """An :class:`MCPConfig` that connects to the first *count* of these workers."""
        options.setdefault("token", self.token)
        return MCPConfig(urls=self.urls[:count], **options)

    def close(self) -> None:
        """Stop every worker (SIGTERM, then SIGKILL). Idempotent."""
        for process in self.processes:
            if process.poll() is None:
                with contextlib.suppress(OSError):
                    process.terminate()
        deadline = time.monotonic() + _CLOSE_S
        for process in self.processes:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()

    def __enter__(self) -> WorkerProcesses:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<WorkerProcesses: {len(self.urls)} at {', '.join(self.urls)}>"


def spawn_workers(count: int, *, host: str = "127.0.0.1", allow_remote: bool = False,
                  start_timeout: float = 60.0) -> WorkerProcesses:
    """Start *count* worker servers on this machine (in parallel) and wait until they listen.

    Each is ``python -m simulacra.distributed.worker`` on a port the OS picks,
    with a fresh random bearer token passed in its environment and this
    process's ``sys.path`` as its ``PYTHONPATH`` (so it imports the same
    agent classes). Workers exit by themselves when this process goes away.

    Raises:
        ConfigError: *count* is not an int >= 1, or *host* is not loopback and
            *allow_remote* is false.
        BackendUnavailable: A worker could not start (its error is on stderr).
    """
    _positive(count, "count", int)
    MCPConfig(host=host, allow_remote=allow_remote)  # validates the host
    token = secrets.token_urlsafe(32)
    env = dict(os.environ)
    env[DEFAULT_TOKEN_ENV] = token
    path = [entry for entry in sys.path if entry]
    if env.get("PYTHONPATH"):
        path.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(path)
    command = [sys.executable, "-m", "simulacra.distributed.worker", "--host", host,
               "--port", "0", "--parent-pid", str(os.getpid())]
    if allow_remote:
        command.append("--allow-remote")
    # The command is fixed (this interpreter, our module); only the host varies, validated above.
    processes = [subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,  # noqa: S603
                                  env=env) for _ in range(count)]
    pool = WorkerProcesses([], token, processes)
    try:
        urls = _await_ready(processes, start_timeout)
    except BaseException:
        pool.close()
        raise
    return WorkerProcesses(urls, token, processes)


def _await_ready(processes: list[subprocess.Popen[bytes]], timeout: float) -> list[str]:
    urls: dict[int, str] = {}
    buffers: dict[int, bytes] = {}
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        for index, process in enumerate(processes):
            selector.register(process.stdout, selectors.EVENT_READ, index)  # type: ignore[arg-type]
        while len(urls) < len(processes):
            left = deadline - time.monotonic()
            if left <= 0:
                raise BackendUnavailable(
                    f"{len(processes) - len(urls)} MCP worker(s) did not start listening "
                    f"within {timeout} s")
            for key, _ in selector.select(min(left, 0.5)):
                index = key.data
                chunk = os.read(key.fd, 4096)
                buffers[index] = buffers.get(index, b"") + chunk
                line, newline, _ = buffers[index].partition(b"\n")
                if newline and line.startswith(READY_PREFIX.encode()):
                    urls[index] = line.split()[1].decode("ascii")
                    selector.unregister(key.fileobj)
                elif not chunk or newline:
                    processes[index].wait(_CLOSE_S)
                    raise BackendUnavailable(
                        f"MCP worker {index} could not start (exit code "
                        f"{processes[index].returncode}; its error is on stderr above)")
    return [urls[index] for index in range(len(processes))]


# --------------------------------------------------------------------------- the engine side


class _Lost(Exception):
    """A worker stopped answering (internal; becomes WorkerLost)."""


@final
class _Link:
    """The engine's handle on one worker: a task holding its MCP client, fed by a queue."""

    def __init__(self, index: int, label: str, process: subprocess.Popen[bytes] | None) -> None:
        self.index = index
        self.label = label
        self.process = process
        self.pid: int | None = process.pid if process is not None else None
        #: An encoded message batch to deliver with the next call.
        self.pending: str | None = None
        #: How many agents it holds.
        self.size = 0
        #: The last HTTP error status the worker answered with.
        self.http_status: int | None = None
        self.requests: asyncio.Queue[tuple[str, dict[str, Any], asyncio.Future[Any]] | None] = (
            asyncio.Queue())
        self.owner: asyncio.Task[None] | None = None

    async def hold(self, connect: Callable[[_Link, AsyncExitStack], Awaitable[Any]],
                   ready: asyncio.Future[None]) -> None:
        """Open the client, then run queued calls one at a time until told to stop."""
        waiting: asyncio.Future[Any] | None = None
        try:
            async with AsyncExitStack() as stack:
                client = await connect(self, stack)
                ready.set_result(None)
                while (item := await self.requests.get()) is not None:
                    tool, arguments, waiting = item
                    try:
                        result = await client.call_tool(tool, arguments)
                    except Exception as exc:
                        if not waiting.done():
                            waiting.set_exception(exc)
                    else:
                        if not waiting.done():
                            waiting.set_result(result)
                    waiting = None
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else _Lost("cancelled"))
            if waiting is not None and not waiting.done():
                waiting.set_exception(_Lost(f"lost its connection ({_describe(exc)})"))
            if not isinstance(exc, Exception):
                raise

    async def call(self, tool: str, arguments: dict[str, Any], timeout: float) -> Any:
        """Send one call and wait for it, watching the connection, the process and the clock."""
        owner = self.owner
        if owner is None or owner.done():
            raise _Lost("had its connection closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self.requests.put_nowait((tool, arguments, future))
        deadline = loop.time() + timeout
        while True:
            await asyncio.wait({future, owner}, timeout=_POLL_S,
                               return_when=asyncio.FIRST_COMPLETED)
            if future.done():
                return future.result()
            if self.process is not None and self.process.poll() is not None:
                raise _Lost(describe_exit(self.process.returncode))
            if owner.done():
                raise _Lost("closed its connection")
            if loop.time() > deadline:
                raise _Lost(f"did not answer within {timeout} s")


def _describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Loop:
    """An asyncio event loop on a private daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                        name="simulacra-mcp-client")
        self._thread.start()

    def run(self, coroutine: Awaitable[Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()  # type: ignore[arg-type]

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class RemoteBackend(BackendBase):
    """What MCPBackend and EmulatorBackend share: partitions, the protocol, the merging.

    Subclasses say how to reach the workers (:meth:`_open`) and what to call
    them in messages.
    """

    _kind: ClassVar[str] = "MCP worker"

    def __init__(self, mcp_config: MCPConfig | Mapping[str, Any] | None = None) -> None:
        self._config = MCPConfig.of(mcp_config)
        self._loop: _Loop | None = None
        self._links: list[_Link] = []
        self._owner: dict[AgentId, int] = {}
        self._started = False

    @property
    def config(self) -> MCPConfig:
        """The configuration."""
        return self._config

    @property
    def worker_pids(self) -> tuple[int, ...]:
        """The process ids of the workers, in worker order (as they reported them)."""
        return tuple(link.pid for link in self._links if link.pid is not None)

    # -- to override ------------------------------------------------------------

    def _open(self) -> list[tuple[str, subprocess.Popen[bytes] | None]]:
        """Make the workers reachable: their labels, and their processes when owned."""
        raise NotImplementedError

    async def _connect(self, link: _Link, stack: AsyncExitStack) -> Any:
        """Open an MCP client to *link*'s worker on *stack*; return it."""
        raise NotImplementedError

    def _release(self) -> None:
        """Stop what :meth:`_open` started."""

    # -- lifecycle --------------------------------------------------------------

    def start(self, specs: Iterable[AgentSpec], seed: SeedTree,
              world: Mapping[str, Any] | None) -> None:
        """Partition the agents, connect to (or start) the workers and build the agents there."""
        specs = list(specs)
        ids = sorted_ids([spec.id for spec in specs], "agent ids")
        plain_world = plain(freeze_world(world))
        self._started = False
        if not self._links or any(link.owner is None or link.owner.done()
                                  or (link.process is not None and link.process.poll() is not None)
                                  for link in self._links):
            self._disconnect()
            self._links = [_Link(k, label, process)
                           for k, (label, process) in enumerate(self._open())]
            self._loop = _Loop()
            outcomes = self._loop.run(self._connect_all())
            for link, outcome in zip(self._links, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    raise self._refused(link, outcome, "connecting") from None
        parts = partition_ids(ids, len(self._links), self._config.partition)
        by_id = {spec.id: spec for spec in specs}
        self._owner = {agent_id: k for k, part in enumerate(parts) for agent_id in part}
        # Every worker's data is encoded before any is sent: initial state that does not
        # pickle reaches no worker, and the lowest such agent is named.
        calls = []
        errors: list[BaseException] = []
        for link, part in zip(self._links, parts, strict=True):
            link.pending = None
            link.size = len(part)
            data = (PROTOCOL_VERSION, [by_id[i] for i in part], seed, plain_world, ids)
            try:
                calls.append((link, "start", {"data": encode_start(data)}))
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise min(errors, key=error_rank)
        pids = self._exchange(calls, "starting")
        for link, pid in zip(self._links, pids, strict=True):
            link.pid = pid
        self._started = True

    async def _connect_all(self) -> list[object]:
        loop = asyncio.get_running_loop()
        readies: list[asyncio.Future[None]] = []
        for link in self._links:
            ready: asyncio.Future[None] = loop.create_future()
            link.owner = loop.create_task(link.hold(self._connect, ready))
            readies.append(ready)
        return await asyncio.gather(*readies, return_exceptions=True)

    def close(self) -> None:
        """Disconnect, and stop the workers this backend started. Idempotent."""
        self._started = False
        self._disconnect()

    def _disconnect(self) -> None:
        links, self._links = self._links, []
        loop, self._loop = self._loop, None
        if loop is not None:
            with contextlib.suppress(Exception):
                loop.run(self._hang_up(links))
            loop.close()
        self._release()

    async def _hang_up(self, links: list[_Link]) -> None:
        # Workers this backend started are asked to leave (then terminated if they do not).
        owned = [link for link in links if link.process is not None and link.owner is not None
                 and not link.owner.done() and link.process.poll() is None]
        if owned:
            await asyncio.gather(*(link.call("shutdown", {}, _CLOSE_S) for link in owned),
                                 return_exceptions=True)
        owners = []
        for link in links:
            if link.owner is not None and not link.owner.done():
                link.requests.put_nowait(None)
                owners.append(link.owner)
        if owners:
            _, late = await asyncio.wait(owners, timeout=_CLOSE_S)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=_CLOSE_S)

    # -- the three methods ------------------------------------------------------

    def execute_action(self, phase: Phase, step: int, phase_index: int) -> list[Message]:
        """Run the phase on every worker at once; return all their messages (worker by worker)."""
        self._check_started()
        data = encode((phase, step, phase_index))
        replies = self._exchange([(link, "execute_action", self._with_pending(link, data))
                                  for link in self._links],
                                 f"running phase {phase.name!r} at step {step}")
        out: list[Message] = []
        for part in replies:
            out += map(as_message, part)
        return out

    def deliver_messages(self, messages: list[Message]) -> None:
        """Route each message to its recipient's worker (sent with the next call)."""
        self._check_started()
        batches: list[list[tuple[Any, ...]]] = [[] for _ in self._links]
        owner = self._owner
        try:
            for message in messages:
                batches[owner[message.recipient]].append(tuple(message))
        except KeyError as exc:
            raise ConfigError(
                f"a message for unknown agent {exc.args[0]!r} reached delivery") from None
        for link, batch in zip(self._links, batches, strict=True):
            # A delivery replaces every inbox, so a later one supersedes a pending one.
            link.pending = encode(batch)

    def get_agents_for(self, phase: Phase) -> list[AgentId]:
        """Ask every worker which of its agents *phase* would run on now; merge, sorted."""
        self._check_started()
        data = encode(phase)
        merged: list[AgentId] = []
        for part in self._exchange([(link, "agents_for", self._with_pending(link, data))
                                    for link in self._links], "listing eligible agents"):
            merged += part
        merged.sort()
        return merged

    def snapshot(self) -> AgentSnapshot:
        """Every worker's agent states, merged in id order."""
        self._check_started()
        merged: AgentSnapshot = {}
        for part in self._exchange([(link, "snapshot", self._with_pending(link, None))
                                    for link in self._links], "taking a snapshot"):
            merged.update(part)
        return {agent_id: merged[agent_id] for agent_id in sorted(merged)}

    # -- plumbing ---------------------------------------------------------------

    def _check_started(self) -> None:
        if not self._started:
            raise ConfigError(f"{type(self).__name__} is not started: call start() first")

    @staticmethod
    def _with_pending(link: _Link, data: str | None) -> dict[str, Any]:
        arguments: dict[str, Any] = {} if data is None else {"data": data}
        if link.pending is not None:
            arguments["deliver"], link.pending = link.pending, None
        return arguments

    def _exchange(self, calls: Sequence[tuple[_Link, str, dict[str, Any]]],
                  doing: str) -> list[Any]:
        """Make the calls concurrently; their results in worker order, or the first failure.

        Waits for every call, then raises a lost worker first, then the
        failure of the lowest agent id, as the reference would.
        """
        loop = self._loop
        if loop is None:
            raise ConfigError(f"{type(self).__name__} is not started: call start() first")
        timeout = self._config.call_timeout

        async def all_calls() -> list[Any]:
            return await asyncio.gather(*(link.call(tool, arguments, timeout)
                                          for link, tool, arguments in calls),
                                        return_exceptions=True)

        outcomes = loop.run(all_calls())
        results: list[Any] = []
        errors: list[BaseException] = []
        for (link, _, _), outcome in zip(calls, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                raise self._refused(link, outcome, doing)
            if outcome.is_error or not outcome.content or not hasattr(outcome.content[0], "text"):
                self._fail(BackendError(
                    f"{self._kind} {link.label} answered {doing} with an MCP error: "
                    f"{outcome.content!r:.300}"))
            status, value = decode(outcome.content[0].text)
            if status == "ok":
                results.append(value)
            else:
                errors.append(unpack_error(value))
        if errors:
            raise min(errors, key=error_rank)
        return results

    def _refused(self, link: _Link, exc: BaseException, doing: str) -> BaseException:
        """The error to raise for a call to *link* that failed with *exc* (closes the backend)."""
        if link.http_status in (401, 403):
            error: BaseException = BackendError(
                f"{self._kind} at {link.label} refused the bearer token (HTTP "
                f"{link.http_status}) while {doing}: check mcp_config.token / token_env "
                f"({self._config.token_env})")
        elif doing == "connecting":
            error = BackendError(f"cannot reach {self._kind} at {link.label}: {_describe(exc)}")
        else:
            how = str(exc) if isinstance(exc, _Lost) else f"failed ({_describe(exc)})"
            if link.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    link.process.wait(0.5)  # a dropped connection often means a dead process
                if link.process.returncode is not None:
                    how = describe_exit(link.process.returncode)
            lost = WorkerLost(
                f"{self._kind} {link.index} at {link.label}"
                f"{f' (pid {link.pid})' if link.pid is not None else ''} "
                f"{how} while {doing}; the "
                f"{plural(link.size, 'agent')} it held {'is' if link.size == 1 else 'are'} "
                "lost, so the run cannot continue")
            lost.unit = link.index
            lost.crashes = 1
            error = lost
        self.close()
        error.__cause__ = exc if not isinstance(exc, _Lost) else None
        return error

    def _fail(self, error: BaseException) -> None:
        self.close()
        raise error


@final
class MCPBackend(RemoteBackend):
    """Runs agents on MCP worker servers (streamable HTTP), each owning a partition.

    With the default configuration it spawns one local worker server per
    CPU (``python -m simulacra.distributed.worker``), bound to 127.0.0.1 on
    a free port, each with a fresh random bearer token; with
    ``mcp_config={"urls": [...], "token_env": "MY_TOKEN"}`` it connects to
    running workers instead (see :class:`MCPConfig`). Workers are kept across
    runs and stopped by :meth:`close` (only those it spawned).

    Per phase each worker gets one ``tools/call`` -- the phase, the step and
    the messages for its agents, pickled -- and the engine calls all workers
    concurrently from one asyncio loop on a private thread. Results are
    identical to :class:`~simulacra.LocalBackend` for every worker count.

    Agent classes and actions must be importable by module name in the
    workers (spawned workers get this process's ``sys.path``).

    Args:
        mcp_config: An :class:`MCPConfig`, a mapping of its fields (as in a
            settings file), or ``None`` for the defaults.

    Raises:
        ConfigError: A configuration value is bad (the message names it).
    """

    name = "mcp"

    def __init__(self, mcp_config: MCPConfig | Mapping[str, Any] | None = None) -> None:
        super().__init__(mcp_config)
        self._spawned: WorkerProcesses | None = None

    def _open(self) -> list[tuple[str, subprocess.Popen[bytes] | None]]:
        config = self._config
        if config.urls:
            self._token = config.bearer_token()
            return [(url, None) for url in config.urls]
        self._spawned = spawn_workers(config.workers or available_cpus(), host=config.host,
                                      allow_remote=config.allow_remote,
                                      start_timeout=config.start_timeout)
        self._token = self._spawned.token
        return list(zip(self._spawned.urls, self._spawned.processes, strict=True))

    async def _connect(self, link: _Link, stack: AsyncExitStack) -> Any:
        try:
            import httpx2  # noqa: PLC0415  (lazy: the mcp extra)
            from mcp import Client  # noqa: PLC0415
            from mcp.client.streamable_http import streamable_http_client  # noqa: PLC0415
        except ImportError as exc:
            raise BackendUnavailable(
                f"MCPBackend needs the package {exc.name!r}: {install_hint('mcp')}"
            ) from exc

        async def note_status(response: Any) -> None:
            if response.status_code >= 400:
                link.http_status = response.status_code

        http = await stack.enter_async_context(httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {self._token}"},
            timeout=httpx2.Timeout(self._config.call_timeout, connect=10.0),
            event_hooks={"response": [note_status]}))
        transport: AbstractAsyncContextManager[Any] = streamable_http_client(
            link.label, http_client=http)
        return await stack.enter_async_context(Client(transport, mode="legacy", cache=None))

    def _release(self) -> None:
        spawned, self._spawned = self._spawned, None
        if spawned is not None:
            spawned.close()

    def __repr__(self) -> str:
        return f"MCPBackend(mcp_config={self._config!r})"
