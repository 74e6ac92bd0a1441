"""Conservative PDES: one model, partitioned into shards, equal to its unpartitioned run.

A model is a builder ``build(ctx)`` (see :class:`ShardContext`): it declares
*entities* (named processes with an inbox) and *channels* between them, each
with a lookahead (its minimum delay). :class:`UnshardedSim` runs it in one keyed
``Sim``; :class:`ShardedSim` runs it on shards, each a keyed ``Sim`` holding the
entities a partition gives it, in worker processes, threads or inline.

**Why the two agree.** Under keyed ordering every event is ordered by
``(time, priority, who scheduled it, how many it had scheduled before)``, all
of which are properties of the model, not of the partition. A message is an
event like any other: its key is reserved on the sending shard at send time
(``sim._next_key()``) and used on the receiving shard
(``sim._schedule_keyed``), so a message and a local event at the same time are
ordered exactly as one Sim orders them. Unpartitioned, the same send
schedules the same event with the same key locally.

**The window protocol (YAWNS).** Each round the coordinator knows every
shard's next event time ``next_s`` (its own ``peek()`` or its earliest
undelivered message) and the smallest lookahead ``L_s`` of a channel leaving
it. No event at time ``t >= next_s`` of shard *s* can send anything that
arrives before ``next_s + L_s``, so no message can arrive anywhere before the
horizon ``H = min_s(next_s + L_s)``: every event before H is safe. The
coordinator delivers the messages with time ``< H`` (in ``(time, channel,
sequence)`` order), each shard with work before H runs it
(``sim.run(until=H)``), and sends back what it sent and its new ``peek()``.
Messages sent in a window all arrive at ``>= H``, for the next rounds.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import pickle
import secrets
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simulacra.core import Sim
from simulacra.errors import ConfigError, PartitionError, ShardError, UntilInPast
from simulacra.executors import START_METHODS, WorkerPool, callable_ref, resolve_callable
from simulacra.trace import Trace

from ._pdes_model import Builder, Message, Partition, ShardRuntime, merge_records, merge_ties
from ._pdes_workers import MODES, Transport, make_transport

__all__ = ["PDESStats", "ShardedSim", "UnshardedSim"]


@dataclass(frozen=True, slots=True)
class PDESStats:
    """What a sharded run did: how many barrier rounds, windows and messages."""

    #: The number of shards.
    shards: int
    #: Barrier rounds (one horizon each).
    rounds: int
    #: Shard windows run (a round runs only the shards with work before its horizon).
    windows: int
    #: Messages that crossed from one shard to another.
    messages: int


def _check_seed(seed: Any) -> Any:
    if seed is None:
        return secrets.randbits(64)
    return seed


def _resolve_builder(builder: Builder | str, mode: str) -> Builder | str:
    if mode == "processes":
        if isinstance(builder, str):
            resolve_callable(builder, "builder")  # fail here, not in every worker
            return builder
        return callable_ref(builder, "builder")
    if isinstance(builder, str):
        return resolve_callable(builder, "builder")
    if not callable(builder):
        raise ConfigError(f"builder must be a function build(ctx), got {builder!r}")
    return builder


def _fingerprint(value: object) -> str:
    return hashlib.sha256(repr(value).encode("utf-8")).hexdigest()


class UnshardedSim:
    """A sharded model run unpartitioned: every entity in one keyed ``Sim``.

    This is the sequential reference of :class:`ShardedSim`: messages are local
    events keyed by their sender, exactly as a shard would key them.

    Args:
        builder: ``build(ctx)``, or its name ``"module:function"``.
        seed: The seed of the model's random streams.
        config: Passed to the builder as ``ctx.config``.
        trace: Record the trace (see :meth:`trace`).

    Raises:
        PartitionError: the model breaks a rule of :class:`ShardContext`.
        ConfigError: a bad argument.
    """

    def __init__(self, builder: Builder | str, *, seed: Any = None, config: Any = None,
                 trace: bool = False) -> None:
        fn = _resolve_builder(builder, "inline")
        assert callable(fn)  # noqa: S101
        self.seed = _check_seed(seed)
        self._runtime = ShardRuntime(fn, shard=None, shards=1, partition=None,
                                     seed=self.seed, config=config, trace=trace)
        self._trace = trace

    def __repr__(self) -> str:
        return f"<UnshardedSim now={self.now!r}>"

    @property
    def sim(self) -> Sim:
        """The Sim holding the whole model."""
        return self._runtime.sim

    @property
    def state(self) -> Any:
        """What the builder returned."""
        return self._runtime.state

    @property
    def now(self) -> float:
        """The current simulated time."""
        return self._runtime.sim.now

    def run(self, until: float | None = None) -> None:
        """Run until *until* (events at *until* stay unprocessed), or until no events remain.

        Raises:
            UntilInPast: *until* is not after :attr:`now`.
        """
        if until is None:
            self._runtime.sim.run()
        else:
            self._runtime.run_until(until)

    def peek(self) -> float:
        """The time of the model's next event, or ``inf`` if none is scheduled."""
        return self._runtime.sim.peek()

    def call(self, fn: Callable[..., Any] | str, *args: Any) -> list[Any]:
        """``[fn(state, *args)]``: the same shape as :meth:`ShardedSim.call`, one shard.

        *fn* is a function or its name, ``"module:function"`` or
        ``"path/file.py:function"``, as :meth:`ShardedSim.call` takes it.

        Raises:
            ConfigError: *fn* is neither callable nor the name of a function.
        """
        if isinstance(fn, str):
            fn = resolve_callable(fn, "fn")
        elif not callable(fn):
            raise ConfigError(
                f"call(fn): fn must be a function fn(state, *args) or its name "
                f"'module:function', got {type(fn).__name__} {fn!r}"
            )
        return [fn(self._runtime.state, *args)]

    def trace(self) -> Trace:
        """The trace so far, in execution order.

        Raises:
            ConfigError: tracing is off.
        """
        if not self._trace:
            raise ConfigError("tracing is off: create the UnshardedSim with trace=True")
        return Trace([r[:4] for r in self._runtime.records()],
                     ties=merge_ties([self._runtime.tie_counts()]))


class ShardedSim:
    """One model partitioned into shards, run with conservative barrier synchronisation.

    Each shard is a keyed ``Sim`` built by the model's builder with the
    entities the partition gives it; shards exchange messages at barriers
    whose safe windows follow from the channels' lookahead (see the module
    docstring). With the same seed and config, its merged :meth:`trace` equals
    :meth:`UnshardedSim.trace` for every shard count and partition.

    Args:
        builder: ``build(ctx)``; with ``mode="processes"`` a module-level
            function (or its name ``"module:function"``), which each worker
            imports.
        shards: The number of shards (>= 1).
        partition: Which shard runs each entity: a mapping or function from
            entity name to shard index, ``"blocks"`` (contiguous runs of the
            declaration order, the default) or ``"round_robin"``. With
            processes it must pickle (a dict or a module-level function).
        mode: ``"processes"`` (one persistent worker process per shard),
            ``"threads"`` or ``"inline"`` (all shards in this thread).
        seed: The seed of the model's random streams (every shard uses it).
        config: Passed to the builder as ``ctx.config``; must pickle for processes.
        trace: Record the shards' traces (see :meth:`trace`).
        start_method: ``"forkserver"`` or ``"spawn"``: the multiprocessing
            context of this run's workers (never the global default); ``None``
            picks forkserver where the platform has it.
        timeout: Seconds to wait for the shards of one round before giving up
            with :class:`~simulacra.ShardCrashed`; ``None`` waits as long as
            the workers live (a dead worker is noticed at once either way).
        pool: A :class:`~simulacra.WorkerPool` with at least *shards*
            workers to run the shards on (``mode="processes"``), instead of
            starting workers: it is held until :meth:`close` and left running
            for the next run.

    Raises:
        ConfigError: a bad argument, or a builder that cannot be imported in a worker.
        PartitionError: the partition or the model is invalid (the message says why).
        PoolClosed: *pool* was closed.
        PoolBusy: another run holds *pool*.
    """

    def __init__(self, builder: Builder | str, *, shards: int, partition: Partition = None,
                 mode: str = "processes", seed: Any = None, config: Any = None,
                 trace: bool = False, start_method: str | None = None,
                 timeout: float | None = None, pool: WorkerPool | None = None) -> None:
        count: object = shards  # checked at run time, like every argument below
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ConfigError(f"shards must be an int >= 1, got {shards!r}")
        if mode not in MODES:
            raise ConfigError(f"mode must be one of {', '.join(map(repr, MODES))}, got {mode!r}")
        if start_method is not None and start_method not in START_METHODS:
            raise ConfigError(
                f"start_method must be one of {', '.join(map(repr, START_METHODS))} or None, "
                f"got {start_method!r}"
            )
        if pool is not None:
            if not isinstance(pool, WorkerPool):
                raise ConfigError(f"pool must be a WorkerPool, got {type(pool).__name__} {pool!r}")
            if mode != "processes" or start_method is not None:
                raise ConfigError(
                    "pool= runs the shards on that WorkerPool's processes: it goes with "
                    f"mode='processes' and no start_method (got mode={mode!r}, "
                    f"start_method={start_method!r})"
                )
        wait: object = timeout
        if wait is not None and not (isinstance(wait, int | float) and wait > 0):
            raise ConfigError(f"timeout must be None or a number > 0, got {timeout!r}")
        ref = _resolve_builder(builder, mode)
        if mode == "processes":
            for what, value in (("partition", partition), ("config", config)):
                try:
                    pickle.dumps(value)
                except Exception as exc:
                    err = PartitionError if what == "partition" else ConfigError
                    raise err(
                        f"{what} must pickle with mode='processes' (a dict, plain data or a "
                        f"module-level function), got {type(value).__name__}: {exc}"
                    ) from None
        self.shards = shards
        self.mode = mode
        self.seed = _check_seed(seed)
        self._trace = trace
        self._failed: BaseException | None = None
        self._transport: Transport = make_transport(
            mode, shards, start_method=start_method, timeout=timeout, pool=pool,
        )
        self._finalizer = weakref.finalize(self, self._transport.close)
        try:
            infos = self._transport.request({
                s: ("build", ref, s, shards, partition, self.seed, config, trace)
                for s in range(shards)
            })
        except BaseException:
            self.close()
            raise
        fingerprints = {s: _fingerprint(infos[s][2]) for s in range(shards)}
        if len(set(fingerprints.values())) > 1:
            self.close()
            odd = next(s for s in range(shards) if fingerprints[s] != fingerprints[0])
            raise PartitionError(
                f"build() declared different entities, owners or channels on shard 0 and on "
                f"shard {odd}: a builder must be deterministic (same config and seed, same "
                "declarations in the same order)"
            )
        #: Each shard's next event time (its peek()).
        self._peek = [float(infos[s][0]) for s in range(shards)]
        #: Each shard's smallest outgoing cross-shard lookahead (inf if none).
        self._lookahead = [float(infos[s][1]) for s in range(shards)]
        #: Undelivered messages per destination: heaps of ((time, channel, seq), message).
        self._pending: list[list[tuple[tuple[float, int, int], Message]]] = [
            [] for _ in range(shards)
        ]
        self._now = 0.0
        #: Each shard's clock (sim.now).
        self._clock = [0.0] * shards
        self._rounds = 0
        self._windows = 0
        self._messages = 0

    def __repr__(self) -> str:
        return f"<ShardedSim {self.shards} shards ({self.mode}) now={self._now!r}>"

    def __enter__(self) -> ShardedSim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the shards (their workers); harmless twice."""
        self._finalizer()

    @property
    def now(self) -> float:
        """The time the run has reached: the last *until*, or the last event's time."""
        return self._now

    @property
    def lookahead(self) -> tuple[float, ...]:
        """Each shard's smallest lookahead of a channel to another shard (inf if none)."""
        return tuple(self._lookahead)

    @property
    def stats(self) -> PDESStats:
        """Rounds, windows and cross-shard messages so far."""
        return PDESStats(self.shards, self._rounds, self._windows, self._messages)

    def _request(self, commands: dict[int, tuple[Any, ...]]) -> dict[int, Any]:
        if self._failed is not None:
            raise ShardError(
                f"this ShardedSim failed earlier ({type(self._failed).__name__}: "
                f"{self._failed}); build a new one"
            )
        if not self._finalizer.alive:
            raise ShardError("this ShardedSim is closed; build a new one")
        try:
            return self._transport.request(commands)
        except BaseException as exc:
            self._failed = exc
            self.close()
            raise

    def run(self, until: float | None = None) -> None:
        """Run every event before *until* (or every event, if None), shard by shard in windows.

        Raises:
            UntilInPast: *until* is not after :attr:`now`.
            ShardCrashed: a shard's worker died or did not answer in time.
            Exception: whatever the model raised, as itself, noting the shard.
        """
        raw: object = until
        if raw is not None and (isinstance(raw, bool) or not isinstance(raw, int | float)):
            raise ConfigError(f"run(until=...): expected None or a number, got {until!r}")
        target = math.inf if until is None else float(until)
        if until is not None and not target > self._now:
            raise UntilInPast(f"run(until={until!r}): must be greater than the current time "
                              f"{self._now!r}")
        shards = range(self.shards)
        pending = self._pending
        # Without `until`, the run ends at the last event, as Sim.run() does: run
        # event by event, so each shard knows the time of its last event.
        exact = until is None
        while True:
            nexts = [
                min(self._peek[s], pending[s][0][0][0] if pending[s] else math.inf)
                for s in shards
            ]
            earliest = min(nexts)
            if earliest >= target:
                break
            horizon = min(*(nexts[s] + self._lookahead[s] for s in shards), target)
            commands: dict[int, tuple[Any, ...]] = {}
            for s in shards:
                if nexts[s] >= horizon:
                    continue
                inbound: list[Message] = []
                queue = pending[s]
                while queue and queue[0][0][0] < horizon:
                    inbound.append(heapq.heappop(queue)[1])
                commands[s] = ("window", horizon, inbound, exact)
            replies = self._request(commands)
            self._rounds += 1
            self._windows += len(commands)
            for s in sorted(replies):
                outbound, peek, clock = replies[s]
                self._peek[s] = float(peek)
                self._clock[s] = float(clock)
                for message in outbound:
                    dst, when, _, channel, seq, _ = message
                    heapq.heappush(pending[dst], ((when, channel, seq), message))
                self._messages += len(outbound)
        if until is None:
            target = max(self._now, *self._clock)
        behind = {s: ("advance", target) for s in shards if self._clock[s] < target}
        if behind:
            peeks = self._request(behind)
            for s in behind:
                self._clock[s] = target
                self._peek[s] = float(peeks[s])
        self._now = target

    def peek(self) -> float:
        """The time of the model's next event (a shard's, or an undelivered message's), or inf."""
        return min(
            min(self._peek[s], self._pending[s][0][0][0] if self._pending[s] else math.inf)
            for s in range(self.shards)
        )

    def call(self, fn: Callable[..., Any] | str, *args: Any) -> list[Any]:
        """``fn(state, *args)`` on every shard, where *state* is what its builder returned.

        *fn* is a function or its name, ``"module:function"`` or
        ``"path/file.py:function"`` (each shard imports it).

        Returns:
            The results in shard order. With processes, *fn* must be a
            module-level function and the results must pickle.
        """
        if self.mode == "processes" and not isinstance(fn, str):
            fn = callable_ref(fn, "fn")
        elif isinstance(fn, str):
            resolve_callable(fn, "fn")  # fail here, naming it, not in every shard
        elif not callable(fn):
            raise ConfigError(
                f"call(fn): fn must be a function fn(state, *args) or its name "
                f"'module:function', got {type(fn).__name__} {fn!r}"
            )
        replies = self._request(dict.fromkeys(range(self.shards), ("call", fn, args)))
        return [replies[s] for s in range(self.shards)]

    def trace(self) -> Trace:
        """The merged trace of all shards: equal to the unpartitioned run's trace.

        Raises:
            ConfigError: tracing is off.
        """
        if not self._trace:
            raise ConfigError("tracing is off: create the ShardedSim with trace=True")
        replies = self._request(dict.fromkeys(range(self.shards), ("records",)))
        ordered = [replies[s] for s in range(self.shards)]
        return Trace(merge_records([records for records, _ in ordered]),
                     ties=merge_ties([ties for _, ties in ordered]))
