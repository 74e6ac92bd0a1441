"""The model side of PDES: the build context, entities, channels and one shard's runtime.

A sharded model is a *builder*, ``build(ctx)``, written against
:class:`ShardContext`. The same builder runs unpartitioned (one keyed ``Sim``
holding every entity) or once per shard (each shard's ``Sim`` holds the entities
the partition gives it). Entities talk only through channels; a message is an
event keyed by its *sender* (``sim._next_key()`` reserved at send time), so the
receiving shard orders it among its own events exactly as the single ``Sim``
would have. This module holds everything that runs inside one shard; the
coordinators and workers live in ``_pdes.py`` and ``_pdes_workers.py``.
"""

from __future__ import annotations

import heapq
import math
import operator
import pickle
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, SupportsIndex, TypeAlias, cast

if TYPE_CHECKING:
    from numpy.random import Generator

from simulacra.core import Event, Process, Sim, TieStats
from simulacra.errors import (
    ConfigError,
    InvalidDelay,
    KernelBug,
    LookaheadViolation,
    PartitionError,
    PayloadNotData,
    ShardTypeError,
    UnknownEntity,
)
from simulacra.resources import Store
from simulacra.rng import Streams
from simulacra.trace import canonical

__all__ = [
    "Builder",
    "Entity",
    "MessageHandler",
    "Partition",
    "ShardContext",
]

Builder: TypeAlias = Callable[["ShardContext"], Any]
"""A sharded model: ``build(ctx)`` declares entities and channels; its return value is the state."""

MessageHandler: TypeAlias = Callable[["Entity", Any], None]
"""``on_message(entity, payload)``: called when a message reaches a passive entity."""

Partition: TypeAlias = Mapping[str, int] | Callable[[str], int] | str | None
"""Which shard owns each entity: a mapping or function from entity name to shard index,
``"blocks"`` (contiguous runs of the declaration order, the default) or ``"round_robin"``."""

#: Characters an entity name may not contain: they separate the parts of
#: process identities (``n:cell-3/2``, ``e:n:cell-3@5``) that map back to entities.
_RESERVED = "/#@:"

#: The end of a wildcard channel: ``ctx.channel(ANY, ANY, lookahead)`` lets any entity
#: send to any other.
ANY = "*"

#: A cross-shard message: (destination shard, time, key, route, sequence, payload). The
#: route is the channel's id, or for a pair that a wildcard channel (``"*"``) serves,
#: an id of the pair past the channels' (see :meth:`ShardRuntime.send_wild`).
Message: TypeAlias = tuple[int, float, tuple[Any, ...], int, int, Any]

#: A tagged trace record: (time, kind, who, canonical payload, tag). The tag orders
#: records across shards: (0, declaration index) while entities are spawned at build,
#: then (1, time, key of the event being processed).
TaggedRecord: TypeAlias = tuple[float, str, str, object, tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class _Channel:
    """A declared channel: messages from *src* to *dst* take at least *lookahead*."""

    id: int
    src: str
    dst: str
    lookahead: float


def check_entity_name(name: object) -> str:
    """Return *name* if it is a valid entity name, else raise ConfigError."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"entity name: expected a non-empty str, got {name!r}")
    if name == ANY:
        raise ConfigError(
            f"entity name {name!r}: it means 'any entity' in ctx.channel(); choose another name"
        )
    bad = [c for c in _RESERVED if c in name]
    if bad:
        raise ConfigError(
            f"entity name {name!r} contains {bad[0]!r}; the characters {_RESERVED!r} are "
            "reserved (they separate the parts of process identities)"
        )
    return name


def entity_of(who: str) -> str:
    """The entity a trace record's actor belongs to.

    ``cell-3`` (an entity's process), ``cell-3/mail`` (a process it spawned with
    :meth:`Entity.spawn`) and ``item#n:cell-3/2`` (an unnamed child, which keyed
    ordering names by its identity) all belong to ``cell-3``.

    Args:
        who: The ``who`` of a record.

    Returns:
        The entity name (``who`` itself when it has no recognisable structure).
    """
    if "#" in who:
        ident = who.split("#", 1)[1]
        while ident.startswith("e:"):
            ident = ident[2:]
        if ident.startswith("n:"):
            ident = ident[2:]
        who = ident
    for sep in "/@":
        who = who.split(sep, 1)[0]
    return who


class _TagTracer:
    """Records ``(time, kind, who, canonical payload, tag)``; the tag orders shards' records.

    Payloads are encoded when recorded (a snapshot). The tag of a record made
    while the model runs is ``(1, time, key)``, where *key* is the largest key
    of the events this shard has processed at that instant so far, the silent
    ones included (see :meth:`pop` and :func:`merge_records`). It also counts
    the shard's events and the instants it had events at (its ties are the
    difference: an instant with *n* events holds *n - 1*).
    """

    __slots__ = ("build_tag", "events", "instants", "last", "max_key", "records")

    def __init__(self) -> None:
        self.records: list[TaggedRecord] = []
        #: Set while entities are spawned at the end of build; None once running.
        #: (0, -1) while build() itself runs: a record then is an error.
        self.build_tag: tuple[Any, ...] | None = (0, -1)
        #: The time of the last event processed, and the largest key at that time.
        self.last: float | None = None
        self.max_key: Any = None
        self.events = 0
        #: The distinct times at which this shard processed events, in order.
        self.instants: list[float] = []

    def pop(self, now: float, key: Any, event: object) -> None:
        """The Sim's pop observer: called for every model event this shard processes."""
        self.events += 1
        if now == self.last:
            self.max_key = max(self.max_key, key)
        else:
            self.last = now
            self.max_key = key
            self.instants.append(now)

    def record(self, time: float, kind: str, who: str, payload: object) -> None:
        tag = self.build_tag
        if tag is None:
            tag = (1, time, self.max_key)
        elif tag[1] == -1:
            if kind == "spawn":
                raise PartitionError(
                    f"build() spawned process {who!r} itself (ctx.sim.spawn); in a sharded "
                    "model every shard runs build(), so every top-level process must be an "
                    "entity's: use ctx.spawn_entity(name, fn)"
                )
            raise PartitionError(
                f"build() recorded ({kind!r}, {who!r}) from host code; in a sharded model "
                "every shard runs build(), so records belong in the entities' processes"
            )
        self.records.append((time, kind, who, canonical(payload), tag))


class _SimStream(random.Random):
    """A stream of a sharded model's Sim (``sim.rng(name)``): drawn from in build() only.

    Every shard runs build() with the same seed, so draws there are the same
    on every shard. Once the model runs, the entities of a shard would share
    the stream, and its draws would depend on which entities the partition
    put together: every draw then raises. Overriding ``random`` and
    ``getrandbits`` (every other method draws through them) keeps the
    draws of ``random.Random``.
    """

    _name: str
    _ctx: ShardContext

    def random(self) -> float:
        if not self._ctx._building:
            self._ctx._refuse_sim_stream(f"sim.rng({self._name!r})", f"entity.rng({self._name!r})")
        return super().random()

    def getrandbits(self, k: int, /) -> int:
        if not self._ctx._building:
            self._ctx._refuse_sim_stream(f"sim.rng({self._name!r})", f"entity.rng({self._name!r})")
        return super().getrandbits(k)


class _SimSmallStream:
    """``sim.small_rng(name)`` of a sharded model: drawn from in build() only, as _SimStream.

    The compiled ``SmallRandom`` is no base class, so this wraps one: each
    method checks, then draws from the Sim's stream (which checkpoints hold).
    """

    __slots__ = ("_ctx", "_inner", "_name")

    def __init__(self, inner: Any, name: str, ctx: ShardContext) -> None:
        self._inner = inner
        self._name = name
        self._ctx = ctx

    def _check(self) -> Any:
        if not self._ctx._building:
            self._ctx._refuse_sim_stream(f"sim.small_rng({self._name!r})",
                                         f"entity.small_rng({self._name!r})")
        return self._inner

    def random(self) -> float:
        return float(self._check().random())

    def uniform(self, a: float, b: float) -> float:
        return float(self._check().uniform(a, b))

    def expovariate(self, lambd: float = 1.0) -> float:
        return float(self._check().expovariate(lambd))

    def getrandbits(self, k: int) -> int:
        return int(self._check().getrandbits(k))

    def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int:
        return int(self._check().randrange(start, stop, step))

    def randint(self, a: int, b: int) -> int:
        return int(self._check().randint(a, b))

    def choice(self, seq: Any) -> Any:
        return self._check().choice(seq)

    def shuffle(self, x: Any) -> None:
        self._check().shuffle(x)

    def getstate(self) -> tuple[int, int, int, int]:
        return tuple(self._inner.getstate())

    def setstate(self, state: tuple[int, int, int, int]) -> None:
        self._inner.setstate(state)


class _SimNumpyStream:
    """``sim.np_rng(name)`` of a sharded model: a numpy Generator whose methods check each call.

    A method fetched in build() (``draw = gen.normal``) is checked too, when it
    is called: drawing from the Sim's stream is refused once the model runs.
    """

    __slots__ = ("_ctx", "_inner", "_name")

    def __init__(self, inner: Any, name: str, ctx: ShardContext) -> None:
        self._inner = inner
        self._name = name
        self._ctx = ctx

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._inner, attr)
        if not callable(value):
            return value
        ctx, name = self._ctx, self._name

        def checked(*args: Any, **kwargs: Any) -> Any:
            if not ctx._building:
                ctx._refuse_sim_stream(f"sim.np_rng({name!r})", f"entity.np_rng({name!r})")
            return value(*args, **kwargs)

        return checked


class _ModelStreams(Streams):
    """A sharded model's streams: the Sim's (guarded, see :class:`_SimStream`) and the entities'."""

    __slots__ = ("_ctx", "_shared", "_shared_np", "_shared_small")

    def __init__(self, root: Any, ctx: ShardContext) -> None:
        super().__init__(root)
        self._ctx = ctx
        self._shared: dict[str, _SimStream] = {}
        self._shared_small: dict[str, _SimSmallStream] = {}
        self._shared_np: dict[str, _SimNumpyStream] = {}

    def rng(self, name: str) -> random.Random:
        """``sim.rng(name)``: a plain Sim stream's draws, refused once the model runs."""
        try:
            return self._shared[name]
        except (KeyError, TypeError):
            pass
        plain = self._root.stream(name)  # checks the name
        stream = _SimStream(0)
        stream.setstate(plain.getstate())
        stream._name = name
        stream._ctx = self._ctx
        self._shared[name] = stream
        return stream

    def np_rng(self, name: str) -> Generator:
        """``sim.np_rng(name)``: refused once the model runs, and so is every draw from it.

        The generator handed out is a :class:`_SimNumpyStream`: its methods
        check at each call, so one fetched in build() and drawn from later is
        refused too.
        """
        if not self._ctx._building:
            self._ctx._refuse_sim_stream(f"sim.np_rng({name!r})", f"entity.np_rng({name!r})")
        stream = self._shared_np.get(name)
        if stream is None:
            stream = self._shared_np[name] = _SimNumpyStream(super().np_rng(name), name,
                                                             self._ctx)
        return stream  # type: ignore[return-value]  # a Generator's methods, checked

    def small_rng(self, name: str) -> Any:
        """``sim.small_rng(name)``: drawn from in build() only (see :class:`_SimSmallStream`)."""
        stream = self._shared_small.get(name) if type(name) is str else None
        if stream is None:  # the Sim's stream, checked at every draw
            stream = _SimSmallStream(super().small_rng(name), name, self._ctx)
            self._shared_small[name] = stream
        return stream

    def entity_small_rng(self, name: str) -> Any:
        """An entity's SmallRandom stream ``"<entity>/<name>"``."""
        return super().small_rng(name)

    def entity_rng(self, name: str) -> random.Random:
        """An entity's stream ``"<entity>/<name>"``: a plain Sim stream, never refused."""
        return super().rng(name)

    def entity_np_rng(self, name: str) -> Generator:
        """An entity's numpy stream ``"<entity>/<name>"``."""
        return super().np_rng(name)


class _Delivery:
    """The callback of a message event: put the payload into the destination's inbox."""

    __slots__ = ("entity", "record", "src")

    def __init__(self, entity: Entity, src: str, record: bool) -> None:
        self.entity = entity
        self.src = src
        self.record = record

    def __call__(self, event: Event[Any]) -> None:
        entity = self.entity
        payload = event._value
        if self.record:
            entity.sim.record("recv", entity.name, {"from": self.src, "payload": payload})
        handler = entity._on_message
        if handler is None:
            entity.inbox.put(payload)
            return
        # What the handler schedules or spawns belongs to the receiving entity:
        # its origin is named after it and after the message, the k-th it has
        # handled (an entity's messages run in the same order on every
        # partition, so k is partition-invariant, and '@' is in no process name,
        # so it is unique). An unnamed process the handler spawns is the
        # entity's (`job#n:<entity>/@<k>/1`) and may send. (Named after the
        # message's key instead, the identity grew by a key a hop: 4.5 kB after
        # 400 hops of PHOLD.)
        sim = entity.sim
        origin = sim._origin  # set: a delivery runs as the callback of its message event
        handled = entity._handled = entity._handled + 1
        sim._origin = [f"n:{entity.name}/@{handled}", 0, 0]
        try:
            handler(entity, payload)
        finally:
            sim._origin = origin


def _checked_delay(src: str, dst: str, lookahead: float, delay: object) -> float:
    """A send's *delay* as a float, or the error that says what is wrong with it."""
    if not isinstance(delay, int | float) or isinstance(delay, bool):
        raise InvalidDelay(
            f"send on channel {src!r} -> {dst!r}: delay must be a number, got {delay!r}"
        )
    if not math.isfinite(delay):
        raise InvalidDelay(
            f"send on channel {src!r} -> {dst!r}: delay must be finite, got "
            f"{delay!r} (a message that never arrives is not sent)"
        )
    if not delay >= lookahead:
        raise LookaheadViolation(
            f"send on channel {src!r} -> {dst!r} with delay {delay!r}: "
            f"below the channel's lookahead {lookahead!r} (a cross-shard message "
            "must take at least the lookahead, so that the shards can run ahead safely)"
        )
    return float(delay)


class Entity:
    """A named part of a sharded model: the unit the partition assigns to a shard.

    An entity owns its processes, an inbox and its outgoing channels. It runs
    on exactly one shard; on every other shard its handle exists (so a builder
    can pass it around) but is not :attr:`owned`. Processes of an entity must
    touch only their own entity's state and talk to other entities with
    :meth:`send`.

    Made by :meth:`ShardContext.spawn_entity` or :meth:`ShardContext.add_entity`.
    """

    __slots__ = ("_ctx", "_handled", "_inbox", "_on_message", "_rngs", "_smalls", "_start",
                 "index", "name", "process", "shard")

    #: The entity's name (unique in the model).
    name: str
    #: Its position in declaration order.
    index: int
    #: The shard that owns it (0 when unpartitioned); -1 until build() returns.
    shard: int
    #: Its main process once spawned (on the owning shard), else None.
    process: Process[Any] | None

    def __init__(self, ctx: ShardContext, name: str, index: int,
                 start: tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]] | None,
                 on_message: MessageHandler | None) -> None:
        self._ctx = ctx
        self.name = name
        self.index = index
        self.shard = -1
        self.process = None
        self._start = start
        self._on_message = on_message
        self._inbox: Store[Any] | None = None
        #: The streams rng() has returned, by name (the Sim's streams hold them too).
        self._rngs: dict[str, random.Random] = {}
        self._smalls: dict[str, Any] = {}
        #: Messages its on_message handler has handled (they name its origin).
        self._handled = 0

    def __repr__(self) -> str:
        where = "unassigned" if self.shard < 0 else f"shard {self.shard}"
        return f"<Entity {self.name!r} {where}{'' if self.owned else ' (remote)'}>"

    @property
    def owned(self) -> bool:
        """True on the shard that runs this entity (always, unpartitioned)."""
        ctx = self._ctx
        return ctx.shard is None or self.shard == ctx.shard

    @property
    def sim(self) -> Sim:
        """The Sim this entity runs on."""
        return self._ctx.sim

    @property
    def inbox(self) -> Store[Any]:
        """The Store messages to this entity are put into (unless it has an ``on_message``).

        Raises:
            PartitionError: the entity runs on another shard.
        """
        inbox = self._inbox
        if inbox is None:
            self._check_owned("inbox")
            inbox = self._inbox = Store(self._ctx.sim)
        return inbox

    def rng(self, name: str) -> random.Random:
        """This entity's random stream *name* (the Sim stream ``"<entity>/<name>"``).

        Streams are per entity, so the draws of an entity do not depend on which
        other entities share its shard.

        Raises:
            ConfigError: *name* is not a non-empty str.
        """
        try:
            return self._rngs[name]
        except (KeyError, TypeError):
            pass
        stream = self._ctx._streams.entity_rng(self._stream_name(name))
        self._rngs[name] = stream
        return stream

    def np_rng(self, name: str) -> Generator:
        """This entity's numpy stream *name* (needs the ``numpy`` extra); see :meth:`rng`."""
        return self._ctx._streams.entity_np_rng(self._stream_name(name))

    def _stream_name(self, name: object) -> str:
        """``"<entity>/<name>"``, the Sim stream of this entity's stream *name*."""
        if type(name) is not str or not name:
            raise ConfigError(f"entity {self.name!r}: a stream name must be a non-empty str, "
                              f"got {type(name).__name__} {name!r}")
        return f"{self.name}/{name}"

    def small_rng(self, name: str) -> Any:
        """This entity's :class:`~simulacra.rng.SmallRandom` stream *name*; see :meth:`rng`.

        32 bytes of state where a ``random.Random`` holds 2.5 kB: the stream to
        give each of many entities (PHOLD's 16,384 LPs a core).
        """
        stream = self._smalls.get(name) if type(name) is str else None
        if stream is None:  # the Sim's stream "<entity>/<name>", kept here after its first use
            stream = self._smalls[name] = self._ctx._streams.entity_small_rng(
                self._stream_name(name))
        return stream

    def spawn(self, fn: Any, *args: Any, name: str | None = None, **kwargs: Any) -> Process[Any]:
        """Start ``fn(sim, entity, *args, **kwargs)``: another process of this entity.

        Only while the model runs, from this entity's own processes or its
        ``on_message`` handler. With *name*, the process is named
        ``"<entity>/<name>"`` (unique per entity, not all digits). Without
        one, it is numbered by whoever spawned it: the *k*-th unnamed child of
        the entity's process ``p`` is ``<fn>#n:<p>/<k>``, and one a handler
        spawns is named after the message (``<fn>#n:<entity>/@<m>/<k>`` for its m-th message).
        Either identity is a property of the model, not of the partition, so
        both order the same on every shard; both processes may send for the
        entity.

        Raises:
            PartitionError: during build(), the entity runs on another shard,
                or an unnamed spawn from a process or handler of another
                entity (its identity would be that entity's).
            ConfigError: *name* is taken, all digits, or not a valid name.
        """
        if self._ctx._building:
            raise PartitionError(
                f"Entity.spawn() for {self.name!r} during build(): start extra processes from "
                "the entity's own process once the model runs"
            )
        self._check_owned("spawn()")
        sim = self._ctx.sim
        if name is None:
            proc = sim.active_process
            origin = sim._origin
            if proc is not None:
                caller = entity_of(proc.who)
            elif origin is not None:
                caller = entity_of("#" + origin[0])
            else:
                caller = "host code"
            if caller != self.name:
                raise PartitionError(
                    f"entity {self.name!r}: spawn() without a name from {caller!r}, not from "
                    f"{self.name!r}'s own process or handler: an unnamed process is numbered by "
                    "whoever spawns it, so it would belong to that caller; pass name=..."
                )
            return sim.spawn(fn, self, *args, **kwargs)
        check_entity_name(name)
        if name.isdigit():
            raise ConfigError(
                f"entity {self.name!r}: spawn(name={name!r}): a name of digits only is reserved "
                "(unnamed child processes are numbered); add a letter"
            )
        spawned = self._ctx._spawned.setdefault(self.name, set())
        if name in spawned:
            raise ConfigError(
                f"entity {self.name!r} already spawned a process named {name!r}: the names of an "
                f"entity's processes order its events, so each must be unique (for example "
                f"name=f'{name}-{{k}}')"
            )
        spawned.add(name)
        return sim.spawn(fn, self, *args, name=f"{self.name}/{name}", **kwargs)

    def send(self, dst: str | Entity, payload: Any, delay: float | None = None) -> None:
        """Send *payload* to entity *dst*, arriving *delay* from now.

        The message is an event keyed by the sending process (its next key),
        delivered into ``dst``'s inbox (or to its ``on_message``). It is ordered
        among the destination's events exactly as in one unpartitioned Sim,
        whichever shards the two entities run on. Treat *payload* as data: it is
        pickled when it crosses a process boundary, so never mutate it after
        sending.

        Args:
            dst: The destination entity (or its name).
            payload: What to deliver.
            delay: At least the channel's lookahead; ``None`` means exactly the lookahead.

        Raises:
            UnknownEntity: *dst* is not an entity of the model.
            PartitionError: no channel ``self -> dst`` was declared, or the
                sender is not this entity (a process of another entity, or
                build() itself).
            LookaheadViolation: *delay* is below the channel's lookahead.
            InvalidDelay: *delay* is not a number.
        """
        ctx = self._ctx
        name = self.name
        target = dst.name if isinstance(dst, Entity) else dst
        exact = ctx._channels.get((name, target))
        wild = exact is None
        if exact is None:
            channel = ctx._any_any  # ("*", "*") alone: every pair without its own channel
            if channel is None or target not in ctx._by_name:
                channel = ctx._wild_channel(name, target)
        else:
            channel = exact
        if ctx._building:
            raise PartitionError(
                f"send from {name!r} during build(): send from the entity's processes"
            )
        proc = ctx.sim.active_process
        if proc is not None and proc.who != name and entity_of(proc.who) != name:
            raise PartitionError(
                f"process {proc.who!r} sent on behalf of entity {name!r}: only the "
                "entity's own processes (and its on_message handler) may send from it, or "
                "the message would escape its shard's lookahead (name an entity's extra "
                "processes with entity.spawn(fn, name=...), whose names start with it)"
            )
        lookahead = channel.lookahead
        if delay is None:
            delay = lookahead
        elif not (type(delay) is float and lookahead <= delay < math.inf):
            delay = _checked_delay(name, target, lookahead, delay)
        if wild:
            ctx._runtime.send_wild(channel, self, ctx._by_name[target], payload, delay)
        else:
            ctx._runtime.send(channel, payload, delay)

    def _check_owned(self, what: str) -> None:
        if not self.owned:
            raise PartitionError(
                f"{what} of entity {self.name!r}: it runs on shard {self.shard}, this is shard "
                f"{self._ctx.shard}; reach other entities only with send()"
            )


class ShardContext:
    """What a builder ``build(ctx)`` gets: the Sim, the config, and the way to declare entities.

    The same builder runs unpartitioned (one keyed Sim holds every entity) and
    once per shard (each Sim holds the entities the partition gives it), so it
    must declare the same entities and channels, in the same order, every time.
    Rules that make the sharded trace equal the unpartitioned one:

    * every top-level process is an entity's process (``spawn_entity``): never
      ``ctx.sim.spawn`` in build(), and never schedule events from build();
    * entities share no state: they talk through :meth:`Entity.send` on
      declared channels, whose lookahead (minimum delay) is positive;
    * random draws come from per-entity streams (:meth:`Entity.rng`).
    """

    __slots__ = (
        "_any_any", "_building", "_by_name", "_channels", "_entities", "_runtime", "_spawned",
        "_streams", "config", "shard", "shards", "sim",
    )

    #: The Sim of this shard (the only Sim, unpartitioned), in keyed ordering.
    sim: Sim
    #: The model's config, as given to ShardedSim / UnshardedSim.
    config: Any
    #: This shard's index, or None when unpartitioned.
    shard: int | None
    #: The number of shards (1 when unpartitioned).
    shards: int

    def __init__(self, runtime: ShardRuntime, sim: Sim, config: Any, shard: int | None,
                 shards: int) -> None:
        self._runtime = runtime
        self.sim = sim
        self.config = config
        self.shard = shard
        self.shards = shards
        self._entities: list[Entity] = []
        self._by_name: dict[str, Entity] = {}
        self._channels: dict[tuple[str, str], _Channel] = {}
        #: The channel ("*", "*") when it is the only wildcard: every pair without a
        #: channel of its own uses it.
        self._any_any: _Channel | None = None
        #: The names each entity has spawned processes under (unique per entity).
        self._spawned: dict[str, set[str]] = {}
        self._building = True
        #: The Sim's streams, replaced: its own streams may be drawn from in build() only.
        self._streams = _ModelStreams(sim.streams.root, self)
        sim._streams = self._streams

    def __repr__(self) -> str:
        where = "unpartitioned" if self.shard is None else f"shard {self.shard}/{self.shards}"
        return f"<ShardContext {where}, {len(self._entities)} entities>"

    @property
    def entities(self) -> tuple[Entity, ...]:
        """Every entity declared so far, in declaration order."""
        return tuple(self._entities)

    def entity(self, name: str) -> Entity:
        """The entity called *name*.

        Raises:
            UnknownEntity: there is none.
        """
        try:
            return self._by_name[name]
        except (KeyError, TypeError):
            raise UnknownEntity(
                f"no entity {name!r} in the model; entities are declared in build() with "
                "ctx.spawn_entity() or ctx.add_entity()"
            ) from None

    def spawn_entity(self, name: str, fn: Any, *args: Any,
                     on_message: MessageHandler | None = None, **kwargs: Any) -> Entity:
        """Declare entity *name* whose process is ``fn(sim, entity, *args, **kwargs)``.

        The process is named *name* and is spawned (at the end of build, on the
        owning shard only) with keyed identity ``n:<name>``.

        Args:
            name: Unique entity name, without ``/ # @ :``.
            fn: A generator function or ``async def`` function.
            *args: Passed to *fn* after ``sim`` and the entity.
            on_message: Handle messages with ``on_message(entity, payload)``
                instead of putting them into the inbox.
            **kwargs: Passed to *fn*.

        Returns:
            The entity's handle (also on shards that do not own it).

        Raises:
            ConfigError: a bad or duplicate name, or called after build().
        """
        if not callable(fn):
            raise ConfigError(f"spawn_entity({name!r}, fn): fn must be callable, got {fn!r}")
        return self._declare(name, (fn, args, kwargs), on_message)

    def add_entity(self, name: str, *, on_message: MessageHandler | None = None) -> Entity:
        """Declare a passive entity: no process, only an inbox (or an ``on_message`` handler).

        Raises:
            ConfigError: a bad or duplicate name, or called after build().
        """
        return self._declare(name, None, on_message)

    def channel(self, src: str | Entity, dst: str | Entity, lookahead: float) -> None:
        """Declare the channel ``src -> dst``: every message on it takes at least *lookahead*.

        The lookahead of the channels that cross shards bounds how far the
        shards run ahead of one another: the larger, the fewer barriers.

        Either end may be ``"*"``, any entity: ``channel("*", "*", 1.0)`` lets
        every entity send to every other (PHOLD's random destinations, a
        market where anyone may trade with anyone) without declaring each of
        the pairs. A send uses the most specific channel declared for its
        pair: ``(src, dst)``, then ``(src, "*")``, ``("*", dst)``, ``("*", "*")``.

        Raises:
            ConfigError: *lookahead* is not a finite number > 0, the channel is
                declared twice, or called after build().
        """
        self._check_building("channel()")
        a = src.name if isinstance(src, Entity) else src
        b = dst.name if isinstance(dst, Entity) else dst
        raw: object = lookahead  # checked at run time: a builder is untyped user code
        ok = isinstance(raw, int | float) and not isinstance(raw, bool)
        if not ok or not (math.isfinite(lookahead) and lookahead > 0):
            raise ConfigError(
                f"channel({a!r}, {b!r}): lookahead must be a finite number > 0, got {lookahead!r}"
            )
        if (a, b) in self._channels:
            raise ConfigError(f"channel({a!r}, {b!r}) is declared twice")
        self._channels[(a, b)] = _Channel(len(self._channels), a, b, float(lookahead))

    # -- internals ------------------------------------------------------------

    def _refuse_sim_stream(self, call: str, fix: str) -> None:
        """Raise for a draw from a stream of the Sim once the model runs."""
        sim = self.sim
        proc = sim.active_process
        origin = sim._origin
        if proc is not None:
            who = f"entity {entity_of(proc.who)!r} (process {proc.who!r})"
        elif origin is not None:  # an event's callbacks: an on_message handler, a resource
            who = f"entity {entity_of('#' + origin[0])!r}"
        else:
            who = "host code after build()"
        raise PartitionError(
            f"{call} drawn by {who}: a stream of the Sim is shared by the entities of a shard, "
            f"so its draws would depend on the partition; draw from the entity's own stream, "
            f"{fix}"
        )

    def _check_building(self, what: str) -> None:
        if not self._building:
            raise ConfigError(f"{what}: entities and channels are declared in build() only")

    def _declare(self, name: str, start: Any, on_message: MessageHandler | None) -> Entity:
        self._check_building("declaring an entity")
        check_entity_name(name)
        if name in self._by_name:
            raise ConfigError(f"entity {name!r} is declared twice")
        if on_message is not None and not callable(on_message):
            raise ConfigError(f"entity {name!r}: on_message must be callable, got {on_message!r}")
        entity = Entity(self, name, len(self._entities), start, on_message)
        self._entities.append(entity)
        self._by_name[name] = entity
        return entity

    def _wild_channel(self, src: str, dst: object) -> _Channel:
        """The wildcard channel that serves ``src -> dst``, or the error that says there is none."""
        channels = self._channels
        if isinstance(dst, str) and dst in self._by_name:
            if self._any_any is not None:
                return self._any_any
            for pair in ((src, ANY), (ANY, dst), (ANY, ANY)):
                channel = channels.get(pair)
                if channel is not None:
                    return channel
        raise self._no_channel(src, dst)

    def _no_channel(self, src: str, dst: object) -> PartitionError:
        if not isinstance(dst, str) or dst not in self._by_name:
            return UnknownEntity(
                f"send from {src!r} to unknown entity {dst!r}; entities are declared in build() "
                "with ctx.spawn_entity() or ctx.add_entity()"
            )
        return PartitionError(
            f"send from {src!r} to {dst!r}: no such channel; declare it in build() with "
            f"ctx.channel({src!r}, {dst!r}, lookahead) (or with '*' for any entity at an end)"
        )


def _owners(entities: list[Entity], partition: Partition, shards: int) -> list[int]:
    """The owning shard of each entity, checked."""
    count = len(entities)
    if partition is None or partition == "blocks":
        return [e.index * shards // count for e in entities]
    if partition == "round_robin":
        return [e.index % shards for e in entities]
    if isinstance(partition, str):
        raise ConfigError(
            f"partition: expected a mapping, a function, 'blocks' or 'round_robin', "
            f"got {partition!r}"
        )
    if isinstance(partition, Mapping):
        known = {entity.name for entity in entities}
        unknown = sorted(str(name) for name in partition if name not in known)
        if unknown:
            raise PartitionError(
                f"the partition names {len(unknown)} entit{'y' if len(unknown) == 1 else 'ies'} "
                f"the model does not declare: {', '.join(map(repr, unknown[:5]))}"
                f"{', ...' if len(unknown) > 5 else ''} (declared: "
                f"{', '.join(repr(e.name) for e in entities[:8])}"
                f"{', ...' if len(entities) > 8 else ''})"
            )
    owners: list[int] = []
    for entity in entities:
        if isinstance(partition, Mapping):
            try:
                shard = partition[entity.name]
            except KeyError:
                raise PartitionError(
                    f"the partition has no shard for entity {entity.name!r}"
                ) from None
        elif callable(partition):
            shard = partition(entity.name)
        else:
            raise ConfigError(
                f"partition: expected a mapping, a function, 'blocks' or 'round_robin', "
                f"got {type(partition).__name__}"
            )
        raw: object = shard  # a user function may return anything
        try:
            if isinstance(raw, bool):
                raise TypeError
            index = operator.index(cast("SupportsIndex", raw))  # also numpy's integers
        except TypeError:
            raise ShardTypeError(
                f"the partition maps entity {entity.name!r} to shard {raw!r}, a "
                f"{type(raw).__name__}: expected an int, and there are {shards} shards "
                f"(0 to {shards - 1})"
            ) from None
        if not 0 <= index < shards:
            raise PartitionError(
                f"the partition maps entity {entity.name!r} to shard {index!r}, but there are "
                f"{shards} shards (0 to {shards - 1})"
            )
        owners.append(index)
    return owners


#: Payload types that surely pickle: a send of one of them is not checked further.
_ATOMIC = frozenset({int, float, str, bytes, bool, type(None), complex})


def _check_data(src: str, dst: str, payload: object) -> None:
    """Refuse a payload that does not pickle, in every mode, as processes would.

    A payload crosses a process boundary only between shards of
    ``mode="processes"``; checking it at every send makes a model that sends
    a lambda (a lock, a generator) fail the same way on one Sim, naming the
    message, whatever the partition and the mode.
    """
    try:
        pickle.dumps(payload, pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # PicklingError, TypeError, AttributeError: all say "not data"
        kind = type(payload)
        why = (str(exc).splitlines() or [""])[0]
        raise PayloadNotData(
            f"send from {src!r} to {dst!r}: the payload is a "
            f"{kind.__module__}.{kind.__qualname__}, which does not pickle "
            f"({type(exc).__name__}: {why}); "
            "payloads must be data (numbers, strings, tuples, lists, dicts, instances of "
            "module-level classes), since they are pickled between shard processes"
        ) from None


class ShardRuntime:
    """One shard (or the whole model, unpartitioned): its Sim, its entities, its outbox.

    Args:
        builder: The model's ``build(ctx)``.
        shard: This shard's index, or None to hold the whole model.
        shards: The number of shards.
        partition: See :data:`Partition`.
        seed: The model's seed (every shard uses the same one).
        config: Passed to the builder as ``ctx.config``.
        trace: Record a tagged trace.
    """

    def __init__(self, builder: Builder, *, shard: int | None, shards: int,
                 partition: Partition, seed: Any, config: Any, trace: bool) -> None:
        self.shard = shard
        self.tracer = _TagTracer() if trace else None
        self.sim = Sim(seed=seed, trace=self.tracer if self.tracer is not None else False,
                       ordering="keyed")
        if self.tracer is not None:
            self.sim._on_pop = self.tracer.pop
        #: Messages to other shards since the last window.
        self.outbox: list[Message] = []
        ctx = self.ctx = ShardContext(self, self.sim, config, shard, shards)
        self.state = builder(ctx)
        ctx._building = False
        wild = [pair for pair in ctx._channels if ANY in pair]
        ctx._any_any = ctx._channels[wild[0]] if wild == [(ANY, ANY)] else None
        entities = ctx._entities
        owners = _owners(entities, partition, shards) if shard is not None else [0] * len(
            entities)
        for entity, owner in zip(entities, owners, strict=True):
            entity.shard = owner
        self._owner = {entity.name: entity.shard for entity in entities}
        for (src, dst) in ctx._channels:
            for end in (src, dst):
                if end != ANY and end not in self._owner:
                    raise UnknownEntity(
                        f"channel({src!r}, {dst!r}) names unknown entity {end!r}; entities are "
                        "declared with ctx.spawn_entity() or ctx.add_entity()"
                    )
        self._deliveries = {
            ch.id: _Delivery(ctx._by_name[ch.dst], ch.src, trace)
            for ch in ctx._channels.values() if ANY not in (ch.src, ch.dst)
        }
        #: A wildcard channel's deliveries, made as its pairs are used: one per
        #: destination (per pair when traced: a "recv" record names the sender).
        self._wild_deliveries: dict[int, _Delivery] = {}
        self._record_sends = trace
        self._sequence = [0] * len(ctx._channels)
        #: The sequence numbers of the pairs that wildcard channels serve, by route.
        self._wild_sequence: dict[int, int] = {}
        self._routes_base = len(ctx._channels)
        self._entity_count = len(entities)
        self._spawn_entities(entities)
        #: The smallest lookahead of a channel from this shard to another: how far
        #: past its next event another shard may safely run. inf if none leaves.
        mine = self._mine
        here = any(owner == mine for owner in owners)
        away = any(owner != mine for owner in owners)
        self.lookahead_out = min(
            (ch.lookahead for ch in ctx._channels.values()
             if (here if ch.src == ANY else self._owner[ch.src] == mine)
             and (away if ch.dst == ANY else self._owner[ch.dst] != mine)),
            default=math.inf,
        )
        #: What every shard must agree on: the entities, their owners and the channels.
        self.fingerprint = (
            tuple((e.name, e.shard) for e in entities),
            tuple((ch.src, ch.dst, ch.lookahead) for ch in ctx._channels.values()),
        )

    @property
    def _mine(self) -> int:
        return 0 if self.shard is None else self.shard

    def _spawn_entities(self, entities: list[Entity]) -> None:
        sim = self.sim
        tracer = self.tracer
        mine = self._mine
        expected_pid = 1
        for entity in entities:
            if entity.shard != mine or entity._start is None:
                continue
            fn, args, kwargs = entity._start
            if tracer is not None:
                tracer.build_tag = (0, entity.index)
            proc = sim.spawn(fn, entity, *args, name=entity.name, **kwargs)
            if proc.pid != expected_pid:
                raise PartitionError(
                    f"build() spawned {proc.pid - expected_pid} process(es) itself with "
                    "ctx.sim.spawn; every shard runs build(), so such a process would run on "
                    "every shard (and one without a name gets an identity that depends on "
                    "spawn order): every top-level process must be an entity's, use "
                    "ctx.spawn_entity(name, fn)"
                )
            expected_pid += 1
            entity.process = proc
        if tracer is not None:
            tracer.build_tag = None
        # Host code that scheduled anything used a root key; count them. An unnamed
        # top-level process (or an event scheduled from build) gets an identity
        # that depends on spawn order, and would run on every shard.
        probe = sim._next_key()
        if probe[1:] != ("root", 1):
            raise PartitionError(
                f"build() spawned a process without a name or scheduled an event from host "
                f"code ({probe[2] - 1} such call(s)); a sharded model's top-level processes "
                "must be named entities: use ctx.spawn_entity(name, fn), and schedule events "
                "from the entities' processes"
            )

    # -- sending and receiving --------------------------------------------------

    def send(self, channel: _Channel, payload: Any, delay: float) -> None:
        """Send a message on *channel*: a keyed event, local or shipped to another shard."""
        if type(payload) not in _ATOMIC:
            _check_data(channel.src, channel.dst, payload)
        sim = self.sim
        when = sim.now + delay
        key = sim._keyed_normal()  # sim._next_key(): this Sim is keyed
        if self._record_sends:
            sim.record("send", channel.src, {"to": channel.dst, "at": when, "payload": payload})
        # The channel's own count: its sender lives on one shard, so the
        # sequence number does not depend on the partition.
        route = channel.id
        seq = self._sequence[route]
        self._sequence[route] = seq + 1
        owner = self._owner[channel.dst]
        if owner == self._mine:
            sim._post_keyed(when, key, payload, self._deliveries[route])
        else:
            self.outbox.append((owner, when, key, route, seq, payload))

    def send_wild(self, channel: _Channel, src: Entity, dst: Entity, payload: Any,
                  delay: float) -> None:
        """Send a message from *src* to *dst* on a wildcard *channel*.

        Its route is the pair's own id, ``channels + src.index * entities +
        dst.index``: past every declared channel's, and fixed by the
        declaration order alone, so the messages sort alike on every partition.
        """
        if type(payload) not in _ATOMIC:
            _check_data(src.name, dst.name, payload)
        sim = self.sim
        when = sim.now + delay
        key = sim._keyed_normal()  # sim._next_key(): this Sim is keyed
        if self._record_sends:
            sim.record("send", src.name, {"to": dst.name, "at": when, "payload": payload})
        route = self._routes_base + src.index * self._entity_count + dst.index
        sequence = self._wild_sequence
        seq = sequence.get(route, 0)
        sequence[route] = seq + 1
        owner = dst.shard
        if owner == self._mine:
            delivery = self._wild_deliveries.get(route if self._record_sends else dst.index)
            if delivery is None:
                delivery = self._wild_delivery(route)
            sim._post_keyed(when, key, payload, delivery)
        else:
            self.outbox.append((owner, when, key, route, seq, payload))

    def _wild_delivery(self, route: int) -> _Delivery:
        """The delivery of the pair *route* that a wildcard channel serves."""
        base = self._routes_base
        count = self._entity_count
        slot = route if self._record_sends else (route - base) % count
        delivery = self._wild_deliveries.get(slot)
        if delivery is None:
            entities = self.ctx._entities
            src, dst = divmod(route - base, count)
            delivery = _Delivery(entities[dst], entities[src].name, self._record_sends)
            self._wild_deliveries[slot] = delivery
        return delivery

    def deliver(self, inbound: list[Message]) -> None:
        """Schedule messages from other shards, in (time, channel, sequence) order."""
        now = self.sim.now
        for _, when, key, channel, _, payload in sorted(inbound, key=lambda m: (m[1], m[3], m[4])):
            if when < now:
                raise KernelBug(f"a message for time {when} reached shard {self.shard} at {now}")
            delivery = (self._deliveries[channel] if channel < self._routes_base
                        else self._wild_delivery(channel))
            self.sim._post_keyed(when, key, payload, delivery)

    # -- running ----------------------------------------------------------------

    def window(self, horizon: float, inbound: list[Message],
               exact: bool = False) -> tuple[list[Message], float, float]:
        """Deliver *inbound* and run every event before *horizon*.

        Args:
            horizon: Run the events before this time.
            inbound: Messages from other shards, all at or after the clock.
            exact: Leave the clock at the last event run (event by event, a
                little slower) rather than at *horizon*.

        Returns:
            The messages sent to other shards, the time of the next event, and
            the clock.
        """
        self.deliver(inbound)
        sim = self.sim
        if sim.peek() < horizon:
            if horizon == math.inf:
                sim.run()
            elif exact:
                while sim.peek() < horizon:
                    sim.step()
            else:
                self.run_until(horizon)
        out = self.outbox
        self.outbox = []
        for message in out:
            if message[1] < horizon:
                raise KernelBug(
                    f"shard {self.shard} sent a message for {message[1]} inside the window "
                    f"ending at {horizon}"
                )
        return out, sim.peek(), sim.now

    def advance(self, until: float) -> float:
        """Move the clock to *until* (every event before it has been processed).

        Returns:
            The time of the next event (``peek()``), as after a window.
        """
        sim = self.sim
        if sim.peek() < until:
            raise KernelBug(f"shard {self.shard} has an event at {sim.peek()} before {until}")
        if until > sim.now:
            self.run_until(until)
        return sim.peek()

    def run_until(self, until: float) -> None:
        """``sim.run(until=until)``, leaving no spent stop event behind.

        ``run(until=t)`` leaves its stop event at the head of the schedule
        (SimPy semantics); it is not part of the model (it has no callbacks and
        records nothing), so it is processed here, and ``peek()`` reports the
        model's next event. Every shard, and the unpartitioned run, goes
        through this one place.
        """
        self.sim.run(until=until)
        self.sim.step()

    def records(self) -> list[TaggedRecord]:
        """The tagged trace records so far."""
        return [] if self.tracer is None else list(self.tracer.records)

    def tie_counts(self) -> tuple[int, int, list[float]]:
        """``(events, ties, instants)`` of this shard so far (see :class:`_TagTracer`)."""
        tracer = self.tracer
        if tracer is None:
            return 0, 0, []
        return tracer.events, tracer.events - len(tracer.instants), list(tracer.instants)


def merge_ties(per_shard: list[tuple[int, int, list[float]]]) -> TieStats:
    """The tie counts of the whole model from each shard's ``tie_counts()``.

    An instant with *n* events in all holds *n - 1* ties, whichever shards ran
    them: the ties within each shard, plus, for each instant that *k* shards had
    events at, *k - 1* more. Those are the ties across shards.
    """
    events = sum(count[0] for count in per_shard)
    within = sum(count[1] for count in per_shard)
    spans = sum(len(count[2]) for count in per_shard)
    distinct = 0
    last: float | None = None
    for when in heapq.merge(*(count[2] for count in per_shard)):
        if when != last:
            distinct += 1
            last = when
    across = spans - distinct
    return TieStats(events, within + across, across)


def merge_records(per_shard: list[list[TaggedRecord]]) -> list[tuple[float, str, str, object]]:
    """Merge the shards' tagged records into the order one Sim would have produced.

    **What one Sim does.** A keyed Sim pops, at every step, the smallest
    ``(time, key)`` in its heap, and every record belongs to the pop during
    which it was made. Its pops form one sequence; each shard's pops are the
    subsequence of the events its entities own, in the same relative order
    (shards affect one another only through messages, which arrive at least a
    positive lookahead later, and carry the key their sender reserved). The
    global heap is the union of the shards' heaps, so at every step one Sim
    pops the smallest of the shards' *next* pops: its pop sequence is the
    greedy k-way merge of the shards' pop sequences on ``(time, key)``.

    **Why prefix maxima.** A shard's own sequence is not sorted (processing
    an event can schedule one with a smaller key at the same instant, such as
    the condition a timeout triggers), and most pops record nothing. The
    greedy merge of such sequences equals the plain merge of the sequences of
    their running maxima: an element smaller than the one before it is always
    taken right after it, because everything the other shards offered then was
    larger still (keys are unique across shards). So each shard tags a record
    with the largest ``(time, key)`` it has popped so far, silent pops
    included, which makes every shard's tags sorted; sorting all records by
    ``(tag, shard, position)`` is then the merge, and equals one Sim's order.
    """
    merged = heapq.merge(*per_shard, key=lambda record: record[4])
    return [(time, kind, who, payload) for time, kind, who, payload, _ in merged]
