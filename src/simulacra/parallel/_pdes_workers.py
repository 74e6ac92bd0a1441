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
dies is noticed through its process sentinel, at once, never by a hang. The
workers are a :class:`~simulacra.executors.WorkerPool`'s, each holding its
shard as a session (:class:`ShardSession`): a pool the user gives serves one
sharded run after another, and replications between them.
"""

from __future__ import annotations

import pickle
import queue
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from simulacra.errors import ConfigError, ShardCrashed, ShardError
from simulacra.executors import Lost, Raised, WorkerPool, resolve_callable

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


class ShardSession:
    """A pool worker's shard: the session a :class:`~simulacra.executors.WorkerPool` worker keeps.

    Opened on each worker a sharded run borrows, it answers the run's
    commands with ``("ok", value)`` or ``("err", error as data)`` until the
    run closes it; the worker then serves the next run, whatever it is.
    """

    def __init__(self) -> None:
        self._host = _ShardHost()

    def __call__(self, cmd: Command) -> bytes:
        """Answer one command with the pickled reply.

        Pickled here, so that a reply that does not pickle becomes this shard's
        error, naming the command, rather than the worker's.
        """
        status, value = self._host.safe_handle(cmd)
        if status == "err":
            value = _portable_error(value, self._host.shard)
        try:
            return pickle.dumps((status, value), pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # an answer that does not pickle (a message payload?)
            error = ShardError(
                f"shard {self._host.shard}: its answer to {cmd[0]!r} could not be sent to the "
                f"coordinator ({type(exc).__name__}: {exc}); message payloads and results "
                "must pickle"
            )
            return pickle.dumps(("err", _portable_error(error, self._host.shard)))


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
    """One worker process per shard: a :class:`~simulacra.executors.WorkerPool`'s, borrowed.

    Without a pool given, the transport starts a pool of its own (one worker
    per shard) and stops it on :meth:`close`. With one, it borrows the first
    ``shards`` workers and gives them all back on :meth:`close`, each ready
    for the next run (a worker that died, or that a timeout left in the
    middle of a model, is replaced).
    """

    def __init__(self, shards: int, start_method: str | None, timeout: float | None,
                 pool: WorkerPool | None = None) -> None:
        self.shards = shards
        self._timeout = timeout
        self._closed = False
        self._owned = pool is None
        if pool is None:
            pool = WorkerPool(shards, start_method=start_method, oversubscribe=True,
                              preload=(__name__,))
        elif pool.workers < shards:
            raise ConfigError(
                f"pool has {pool.workers} workers and the run has {shards} shards: a sharded run "
                "needs one worker per shard (a WorkerPool(max_workers=...) at least that big)"
            )
        self._pool = pool
        try:
            self._lease = pool.lease(f"ShardedSim({shards} shard{'s' if shards != 1 else ''})")
        except BaseException:
            if self._owned:
                pool.close()
            raise
        try:
            self._call_each("open", dict.fromkeys(range(shards), ShardSession), "build")
        except BaseException:
            self.close()
            raise

    def _crashed(self, shard: int, op: str, how: str) -> ShardCrashed:
        self.close()
        hint = ""
        if op == "build":
            hint = (" (its stderr says why; a script that starts workers must guard its entry "
                    "point with `if __name__ == '__main__':`, since each worker imports it)")
        return ShardCrashed(
            f"shard {shard}'s worker: {how} while running {op!r}; "
            f"the sharded run cannot continue{hint}"
        )

    def _call_each(self, op: str, payloads: dict[int, Any], name: str) -> dict[int, Any]:
        """Send *op* with each shard's payload; gather every answer (the barrier)."""
        if self._closed:
            raise ShardError("the shard workers were stopped (an earlier failure or close())")
        lease = self._lease
        for shard, payload in payloads.items():
            try:
                sent = lease.send(shard, op, payload)
            except Exception as exc:
                raise ConfigError(
                    f"cannot send {name!r} to shard {shard}'s worker process: {exc} "
                    "(with mode='processes', builders, partitions, functions and message "
                    "payloads must pickle: module-level functions and plain data)"
                ) from None
            if not sent:
                raise self._crashed(shard, name, _lost_how(lease.receive(shard)))
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        answers: dict[int, Any] = {}
        waiting = set(payloads)
        while waiting:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = lease.wait(sorted(waiting), timeout=left)
            if not ready:
                late = sorted(waiting)
                self.close()
                raise ShardCrashed(
                    f"shard(s) {late} did not answer {name!r} within the timeout of "
                    f"{self._timeout} s; the workers were stopped"
                )
            for shard in ready:
                outcome = lease.receive(shard)
                if isinstance(outcome, Lost):
                    raise self._crashed(shard, name, outcome.reason)
                if isinstance(outcome, Raised):  # the worker could not run the session itself
                    raise outcome.error
                answers[shard] = outcome.value
                waiting.discard(shard)
        return answers

    def _exchange(self, commands: dict[int, Command]) -> dict[int, Reply]:
        name = next(iter(commands.values()))[0] if commands else "?"
        answers = self._call_each("session", commands, name)
        return {shard: pickle.loads(data) for shard, data in answers.items()}  # noqa: S301

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._owned:
                self._pool.close()  # the run's own workers: stopped, nothing to give back
        finally:
            self._lease.release()  # a lent pool's workers: back idle, their shards dropped


def _lost_how(outcome: Any) -> str:
    return outcome.reason if isinstance(outcome, Lost) else "stopped answering"


def make_transport(mode: str, shards: int, *, start_method: str | None,
                   timeout: float | None, pool: WorkerPool | None = None) -> Transport:
    """The transport for *mode* (one of :data:`MODES`); *pool* only for processes."""
    if mode == "processes":
        return _ProcessTransport(shards, start_method, timeout, pool)
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


def measure_round_trip(shards: int, start_method: str | None, rounds: int) -> float:
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
