"""Where the shards of a ShardedSim live: in this thread, on threads, or in worker processes.

Every transport speaks one request/reply protocol. The coordinator sends a
command tuple to some shards and waits for all their replies (a barrier):

* ``("build", builder, shard, shards, partition, seed, config, trace)`` ->
  ``(peek, lookahead_out, fingerprint)``
* ``("window", horizon, inbound, exact)`` -> ``(outbound, peek, clock)``
* ``("advance", until)`` -> ``peek``; ``("records",)`` -> ``(records, tie counts)``
* ``("call", fn, args)``, ``("ping",)``

A reply is ``("ok", value)`` or ``("err", error)``. Worker processes are
persistent: each builds its shard once and keeps it across rounds, so only
commands, messages and window times cross the process boundary. A worker that
dies is noticed through its process sentinel, at once, never by a hang.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import pickle
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from simulacra.errors import ConfigError, ShardCrashed, ShardError
from simulacra.executors import resolve_callable

from ._pdes_model import ShardRuntime

__all__ = ["MODES", "Transport", "make_transport"]

#: Where shards can run.
MODES = ("processes", "threads", "inline")

Command = tuple[Any, ...]
Reply = tuple[str, Any]


class _ShardHost:
    """One shard's side of the protocol: holds its runtime between commands."""

    def __init__(self) -> None:
        self.runtime: ShardRuntime | None = None
        self.shard = -1

    def handle(self, cmd: Command) -> Any:
        op = cmd[0]
        if op == "ping":
            return None
        if op == "build":
            _, builder, shard, shards, partition, seed, config, trace = cmd
            self.shard = shard
            if isinstance(builder, str):
                builder = resolve_callable(builder, "builder")
            built = self.runtime = ShardRuntime(
                builder, shard=shard, shards=shards, partition=partition, seed=seed,
                config=config, trace=trace,
            )
            return built.sim.peek(), built.lookahead_out, built.fingerprint
        runtime = self.runtime
        if runtime is None:  # pragma: no cover - the coordinator builds first
            raise ShardError(f"command {op!r} before the shard was built")
        if op == "window":
            return runtime.window(cmd[1], cmd[2], cmd[3])
        if op == "advance":
            return runtime.advance(cmd[1])
        if op == "records":
            return runtime.records(), runtime.tie_counts()
        if op == "call":
            fn = cmd[1]
            if isinstance(fn, str):
                fn = resolve_callable(fn, "fn")
            return fn(runtime.state, *cmd[2])
        raise ShardError(f"unknown command {op!r}")  # pragma: no cover

    def safe_handle(self, cmd: Command) -> Reply:
        try:
            return ("ok", self.handle(cmd))
        except BaseException as exc:  # the coordinator re-raises it
            return ("err", exc)


def _portable_error(exc: BaseException, shard: int) -> tuple[bytes | None, str, str, str]:
    """An exception as data that surely unpickles: (pickle or None, type, text, traceback)."""
    text = "".join(traceback.format_exception(exc))
    data: bytes | None
    try:
        encoded = pickle.dumps(exc)
        pickle.loads(encoded)  # noqa: S301 - our own bytes, just made
        data = encoded
    except Exception:
        data = None
    name = f"{type(exc).__module__}.{type(exc).__qualname__}"
    return data, name, str(exc), f"shard {shard} traceback:\n{text}"


def _worker_main(conn: multiprocessing.connection.Connection) -> None:
    """The loop of a shard worker process: answer commands until told to stop."""
    # Ctrl-C goes to the whole process group: the coordinator handles it and
    # stops the workers; a worker must not die of it mid-window.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    host = _ShardHost()
    while True:
        try:
            cmd = conn.recv()
        except (EOFError, OSError):
            return  # the coordinator is gone
        if cmd[0] == "stop":
            with contextlib.suppress(OSError):
                conn.send(("ok", None))
            return
        status, value = host.safe_handle(cmd)
        if status == "err":
            value = _portable_error(value, host.shard)
        try:
            conn.send((status, value))
        except Exception as exc:  # an answer that does not pickle (a message payload?)
            error = ShardError(
                f"shard {host.shard}: its answer to {cmd[0]!r} could not be sent to the "
                f"coordinator ({type(exc).__name__}: {exc}); message payloads and results "
                "must pickle"
            )
            conn.send(("err", _portable_error(error, host.shard)))


def _raise_error(shard: int, error: Any) -> None:
    """Re-raise a shard's error in the coordinator, as its own type where possible."""
    if isinstance(error, BaseException):
        error.add_note(f"(raised in shard {shard})")
        raise error
    data, name, text, tb = error
    exc: BaseException | None = None
    if data is not None:
        try:
            exc = pickle.loads(data)  # noqa: S301 - from our own worker
        except Exception:
            exc = None
    if exc is None:
        raise ShardError(f"shard {shard} raised {name}: {text}\n{tb}")
    exc.add_note(f"(raised in shard {shard} worker process)\n{tb}")
    raise exc


class Transport:
    """Runs commands on shards and gathers the replies: the barrier of every round."""

    shards: int

    def request(self, commands: dict[int, Command]) -> dict[int, Any]:
        """Send each shard its command; wait for every reply; raise the first error."""
        replies = self._exchange(commands)
        errors = sorted((s, r[1]) for s, r in replies.items() if r[0] == "err")
        if errors:
            shard, error = errors[0]
            _raise_error(shard, error)
        return {s: r[1] for s, r in replies.items()}

    def _exchange(self, commands: dict[int, Command]) -> dict[int, Reply]:
        raise NotImplementedError

    def close(self) -> None:
        """Stop the shards; harmless twice."""


class _InlineTransport(Transport):
    """Every shard in the calling thread, one after the other (for tests and debugging)."""

    def __init__(self, shards: int) -> None:
        self.shards = shards
        self._hosts = [_ShardHost() for _ in range(shards)]

    def _exchange(self, commands: dict[int, Command]) -> dict[int, Reply]:
        return {s: self._hosts[s].safe_handle(cmd) for s, cmd in sorted(commands.items())}

    def close(self) -> None:
        self._hosts = []


class _ThreadTransport(Transport):
    """One thread per shard; each Sim belongs to its thread (GIL builds gain no speed)."""

    def __init__(self, shards: int, timeout: float | None) -> None:
        self.shards = shards
        self._timeout = timeout
        self._inboxes: list[queue.SimpleQueue[Command | None]] = []
        self._replies: queue.SimpleQueue[tuple[int, Reply]] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        for shard in range(shards):
            inbox: queue.SimpleQueue[Command | None] = queue.SimpleQueue()
            thread = threading.Thread(target=self._loop, args=(shard, inbox),
                                      name=f"simulacra-shard-{shard}", daemon=True)
            thread.start()
            self._inboxes.append(inbox)
            self._threads.append(thread)

    def _loop(self, shard: int, inbox: queue.SimpleQueue[Command | None]) -> None:
        host = _ShardHost()
        while True:
            cmd = inbox.get()
            if cmd is None:
                return
            self._replies.put((shard, host.safe_handle(cmd)))

    def _exchange(self, commands: dict[int, Command]) -> dict[int, Reply]:
        for shard, cmd in commands.items():
            self._inboxes[shard].put(cmd)
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        replies: dict[int, Reply] = {}
        while len(replies) < len(commands):
            try:
                shard, reply = self._replies.get(timeout=0.5)
            except queue.Empty:
                for shard in commands:
                    if shard not in replies and not self._threads[shard].is_alive():
                        raise ShardCrashed(
                            f"shard {shard}'s thread ended without answering"
                        ) from None
                if deadline is not None and time.monotonic() > deadline:
                    late = sorted(set(commands) - set(replies))
                    raise ShardCrashed(
                        f"shard(s) {late} did not answer {commands[late[0]][0]!r} within "
                        f"the timeout of {self._timeout} s"
                    ) from None
                continue
            replies[shard] = reply
        return replies

    def close(self) -> None:
        for inbox in self._inboxes:
            inbox.put(None)
        # A shard stuck in a model (the timeout case) cannot be stopped; its
        # thread is a daemon, so wait a little, then let it be.
        deadline = time.monotonic() + 1.0
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self._inboxes = []
        self._threads = []


class _ProcessTransport(Transport):
    """One persistent worker process per shard, started with an explicit context."""

    def __init__(self, shards: int, start_method: str, timeout: float | None) -> None:
        self.shards = shards
        self._timeout = timeout
        self._closed = False
        context: Any = multiprocessing.get_context(start_method)
        self._conns: list[multiprocessing.connection.Connection] = []
        self._procs: list[Any] = []
        try:
            for shard in range(shards):
                parent, child = context.Pipe(duplex=True)
                proc = context.Process(target=_worker_main, args=(child,),
                                       name=f"simulacra-shard-{shard}", daemon=True)
                proc.start()
                child.close()
                self._conns.append(parent)
                self._procs.append(proc)
        except BaseException:
            self.close()
            raise

    def _crashed(self, shard: int, op: str) -> ShardCrashed:
        proc = self._procs[shard]
        proc.join(timeout=1)
        code = proc.exitcode
        how = "is still running" if code is None else (
            f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        )
        self.close()
        hint = ""
        if op == "build":
            hint = (" (its stderr says why; a script that starts workers must guard its entry "
                    "point with `if __name__ == '__main__':`, since each worker imports it)")
        return ShardCrashed(
            f"shard {shard}'s worker process (pid {proc.pid}) {how} while running {op!r}; "
            f"the sharded run cannot continue{hint}"
        )

    def _exchange(self, commands: dict[int, Command]) -> dict[int, Reply]:
        if self._closed:
            raise ShardError("the shard workers were stopped (an earlier failure or close())")
        for shard, cmd in commands.items():
            try:
                data = pickle.dumps(cmd)
            except Exception as exc:
                raise ConfigError(
                    f"cannot send {cmd[0]!r} to shard {shard}'s worker process: {exc} "
                    "(with mode='processes', builders, partitions, functions and message "
                    "payloads must pickle: module-level functions and plain data)"
                ) from None
            try:
                self._conns[shard].send_bytes(data)
            except OSError:
                raise self._crashed(shard, cmd[0]) from None
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        replies: dict[int, Reply] = {}
        waiting = set(commands)
        by_object: dict[Any, int] = {}
        for shard in waiting:
            by_object[self._conns[shard]] = shard
            by_object[self._procs[shard].sentinel] = shard
        while waiting:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = multiprocessing.connection.wait(
                [obj for obj, shard in by_object.items() if shard in waiting], timeout=left,
            )
            if not ready:
                late = sorted(waiting)
                self.close()
                raise ShardCrashed(
                    f"shard(s) {late} did not answer {commands[late[0]][0]!r} within the "
                    f"timeout of {self._timeout} s; the workers were stopped"
                )
            for obj in ready:
                shard = by_object[obj]
                if shard not in waiting:
                    continue
                conn = self._conns[shard]
                if obj is not conn and not conn.poll(0):
                    raise self._crashed(shard, commands[shard][0])
                try:
                    replies[shard] = conn.recv()
                except (EOFError, OSError):
                    raise self._crashed(shard, commands[shard][0]) from None
                waiting.discard(shard)
        return replies

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for conn, proc in zip(self._conns, self._procs, strict=False):
            if proc.is_alive():
                with contextlib.suppress(OSError):
                    conn.send(("stop",))
        # Idle workers stop at once; one stuck in a model (the timeout case) is terminated.
        deadline = time.monotonic() + 1.0
        for proc in self._procs:
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
        for proc in self._procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=2)
        for conn in self._conns:
            conn.close()


def make_transport(mode: str, shards: int, *, start_method: str,
                   timeout: float | None) -> Transport:
    """The transport for *mode* (one of :data:`MODES`)."""
    if mode == "processes":
        return _ProcessTransport(shards, start_method, timeout)
    if mode == "threads":
        return _ThreadTransport(shards, timeout)
    return _InlineTransport(shards)


def _tick(sim: Any, me: Any) -> Any:
    while True:
        yield sim.delay(1.0)


def ticker_model(ctx: Any) -> None:
    """The model :func:`measure_round_trip` runs: one entity per shard, ticking every 1.0."""
    for shard in range(ctx.shards):
        ctx.spawn_entity(f"tick-{shard}", _tick)


def measure_round_trip(shards: int, start_method: str, rounds: int) -> float:
    """Seconds per barrier round of ``shards`` worker processes: the median of *rounds*.

    Starts the same workers a ShardedSim uses, builds a model of one ticking
    entity per shard, and times rounds of windows one tick wide: each is the
    fixed cost of a round (a command to every worker, ``run(until=...)`` over
    one trivial event, and every reply back).
    """
    transport = _ProcessTransport(shards, start_method, timeout=60.0)
    try:
        transport.request({
            s: ("build", f"{__name__}:ticker_model", s, shards, None, 0, None, False)
            for s in range(shards)
        })
        times: list[float] = []
        clock: Callable[[], float] = time.perf_counter
        for index in range(rounds + 1):
            window: Command = ("window", index + 1.5, [], False)
            start = clock()
            transport.request(dict.fromkeys(range(shards), window))
            if index:  # the first round warms up
                times.append(clock() - start)
    finally:
        transport.close()
    times.sort()
    return times[len(times) // 2]
