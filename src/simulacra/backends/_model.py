"""Model: agents plus a backend, run in phased lockstep steps; RunResult: what a run gives."""

from __future__ import annotations

import copy
import inspect
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, final

from simulacra._util import full_collections_deferred
from simulacra.agents import (
    Action,
    Agent,
    AgentId,
    AgentSpec,
    Message,
    MessageDigest,
    Phase,
    Sequence,
    check_agent_class,
    check_id,
    copy_initial_state,
    freeze_world,
    is_immutable,
    state_digest,
)
from simulacra.errors import ConfigError
from simulacra.rng import SeedTree, as_seed_tree

from ._base import AgentSnapshot, AgentStates, ExecutionBackend
from ._collect import DataCollector
from ._registry import ensure_buildable, get_backend
from ._settings import Settings, load_settings, parse_settings

__all__ = ["RUN_SCHEME", "Model", "RunResult"]

#: Header of the overall run digest.
RUN_SCHEME: Final = "simulacra.engines.run.v1"





@final
class RunResult(AgentStates):
    """What one run of a :class:`Model` gives.

    Attributes:
        seed: The model's seed-tree node (its ``master_seed`` reproduces the run).
        backend: The name of the backend that ran it.
        steps: How many steps ran.
        state_digests: The state digest after each step (empty when the run
            had ``digests=False``).
        message_digests: The digest of each step's messages, in total order
            (empty when the run had ``digests=False``).
        message_counts: How many messages each step sent.
        agents: The final state of every agent: ``{id: (class qualname,
            vars)}``, in id order.
    """

    __slots__ = ("backend", "seed", "steps")
    _scheme = RUN_SCHEME

    def __init__(self, *, seed: SeedTree, backend: str, steps: int,
                 state_digests: tuple[str, ...], message_digests: tuple[str, ...],
                 message_counts: tuple[int, ...], agents: AgentSnapshot) -> None:
        super().__init__(agents, message_counts, state_digests, message_digests)
        self.seed = seed
        self.backend = backend
        self.steps = steps

    def _digest_fields(self) -> dict[str, Any]:
        return {"steps": self.steps}

    def __repr__(self) -> str:
        return (f"<RunResult: {len(self.agents)} agents, {self.steps} steps on "
                f"{self.backend!r}, digest {self.digest[:12]}>")


#: State values of these (exact) types are kept as they are by add(): immutable, no copy.
_SCALARS: Final = frozenset({type(None), bool, int, float, complex, str, bytes})
#: How add() and add_many() say when they copied initial state (see copy_initial_state).
_ADD_WHEN: Final = "when Model.add copied it, before any phase or step"
_ADD_MANY_WHEN: Final = "when Model.add_many copied it, before any phase or step"

#: Signatures of agent classes, to check add() arguments once per call.
_SIGNATURES: dict[type, inspect.Signature | None] = {}


#: (class, state keys) pairs that bind: binding depends on the names only.
_BINDS: set[tuple[type, tuple[str, ...]]] = set()


def _check_arguments(cls: type[Agent], agent_id: AgentId, state: Mapping[str, Any]) -> None:
    key = (cls, tuple(state))
    if key in _BINDS:
        return
    if cls not in _SIGNATURES:
        try:
            _SIGNATURES[cls] = inspect.signature(cls)
        except (TypeError, ValueError):
            _SIGNATURES[cls] = None
    signature = _SIGNATURES[cls]
    if signature is None:
        return
    try:
        signature.bind(agent_id, **state)
    except TypeError as exc:
        raise ConfigError(
            f"{cls.__qualname__}(id, **state) cannot take state {sorted(state)}: {exc}"
        ) from None
    if len(_BINDS) < 4096:
        _BINDS.add(key)


@final
class Model:
    """A population of agents and the backend that runs them, in phased steps.

    ::

        model = Model(seed=7)
        model.add_many(Bank, range(100), capital=4.0)
        result = model.run(Sequence(Bank.send_state, Bank.check_solvency), steps=20)
        result.digest        # the same on every backend and worker count

    Each :meth:`run` starts from the agents as added (runs do not continue one
    another) and is a pure function of the seed, the agents, the world, the
    sequence and the step count.

    Args:
        seed: The master seed (int, str, bytes or a :class:`~simulacra.SeedTree`
            node). ``None`` draws one from the OS: the run is then not
            reproducible unless ``result.seed`` is recorded.
        backend: ``"local"`` (the default), ``"threaded"``, ``"processes"``,
            another registered name, or an :class:`ExecutionBackend` instance.
            A backend built from a name is made for each run and closed after
            it; an instance you pass is yours to close (it is started anew for
            each run and may keep its workers in between).
        settings: A settings file path, an already-read settings mapping, or
            :class:`Settings`; chooses the backend instead of *backend*.
        world: Shared read-only data every agent can read as ``ctx.world``:
            plain data (numbers, strings, lists, tuples, sets, dicts). Copied
            and frozen here.

    Raises:
        ConfigError: *backend* and *settings* are both given, a name is
            unknown, a setting is bad, or *world* is not plain data.
        BackendUnavailable: The named backend is reserved for a later version.
    """

    __slots__ = ("_backend", "_id_type", "_ids", "_refs", "_seed", "_settings", "_specs",
                 "_world")

    def __init__(self, seed: int | str | bytes | SeedTree | None = None,
                 backend: str | ExecutionBackend | None = None,
                 settings: str | os.PathLike[str] | Mapping[str, Any] | Settings | None = None,
                 world: Mapping[str, Any] | None = None) -> None:
        self._seed = as_seed_tree(seed)
        if backend is not None and settings is not None:
            raise ConfigError(
                "pass backend= or settings=, not both: settings choose the backend"
            )
        self._settings: Settings | None = None
        if settings is not None:
            if isinstance(settings, Settings):
                self._settings = settings
            elif isinstance(settings, Mapping):
                self._settings = parse_settings(settings)
            else:
                self._settings = load_settings(settings)
            _check_buildable(self._settings.mode)
        if backend is None:
            backend = "local"
        if isinstance(backend, str):
            _check_buildable(backend)
        elif not isinstance(backend, ExecutionBackend):
            raise ConfigError(
                f"backend must be a backend name or an ExecutionBackend, got "
                f"{type(backend).__name__} {backend!r}"
            )
        self._backend: str | ExecutionBackend = backend
        freeze_world(world)  # validates: plain data only
        self._world: Mapping[str, Any] | None = None if world is None else copy.deepcopy(
            dict(world))
        self._specs: list[AgentSpec] = []
        self._ids: set[AgentId] = set()
        self._id_type: type | None = None
        self._refs: dict[type, str] = {}

    @property
    def seed(self) -> SeedTree:
        """The model's seed-tree node."""
        return self._seed

    @property
    def world(self) -> Mapping[str, Any] | None:
        """The shared world every agent reads (``ctx.world``), or None; a private copy."""
        return self._world

    @property
    def agent_ids(self) -> tuple[AgentId, ...]:
        """The ids of the agents added so far, sorted."""
        return tuple(sorted(self._ids))  # one type: int or str

    @property
    def specs(self) -> tuple[AgentSpec, ...]:
        """The agents added so far, as the data a backend builds them from (in add order)."""
        return tuple(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def _ref(self, cls: type[Agent]) -> str:
        ref = self._refs.get(cls)
        if ref is None:
            ref = self._refs[cls] = check_agent_class(cls, "cls")
        return ref

    def _claim(self, value: object, field: str) -> AgentId:
        agent_id = check_id(value, field)
        if self._id_type is None:
            self._id_type = type(agent_id)
        elif type(agent_id) is not self._id_type:
            kind = "an int" if self._id_type is int else "a str"
            raise ConfigError(
                f"{field} must be {kind} like the model's other agent ids (one model, one id "
                f"type, so ids sort), got {type(agent_id).__name__} {agent_id!r}"
            )
        if agent_id in self._ids:
            raise ConfigError(f"{field}: the model already has an agent with id {agent_id!r}")
        self._ids.add(agent_id)
        return agent_id

    def add(self, cls: type[Agent], id: AgentId, /, **state: Any) -> None:
        """Add one agent: it will be built as ``cls(id, **state)`` where it runs.

        Mutable state values (see :func:`~simulacra.agents.is_immutable`) are
        deep-copied here, as the world is by :class:`Model`: changing a list
        after passing it changes no run, and every run starts from the same
        state. Each build deep-copies them again, so runs never share them.

        Raises:
            ConfigError: *cls* is not an importable Agent subclass, *id* is not
                an int or str, has another type than the model's other ids, or
                is taken, or *state* does not fit ``cls.__init__``.
            UncopyableState: A state value cannot be deep-copied (a lock, an
                open file); the message names the agent, its class and the
                argument. The model is unchanged.
        """
        ref = self._refs.get(cls) or self._ref(cls)
        if (cls, tuple(state)) not in _BINDS:
            _check_arguments(cls, id, state)
        for value in state.values():
            if type(value) not in _SCALARS and not is_immutable(value):
                state = copy_initial_state(cls, id, state, when=_ADD_WHEN)
                break
        if type(id) is self._id_type and id not in self._ids:
            self._ids.add(id)  # what _claim does for an id of the model's (exact) type
        else:
            id = self._claim(id, "id")
        self._specs.append(AgentSpec(ref, id, state))

    def add_many(self, cls: type[Agent], ids: Iterable[AgentId], /, **state: Any) -> None:
        """Add one agent of class *cls* per id, all with the same initial *state*.

        Mutable state values are deep-copied here once, for all of them (as
        :meth:`add` does), and again for each agent when it is built, so each
        gets its own copy.

        Raises:
            ConfigError: As for :meth:`add`, naming the offending id.
            UncopyableState: As for :meth:`add`, naming the first id.
        """
        ref = self._ref(cls)
        shared: dict[str, Any] = state  # one dict for all: pickled once per worker
        checked = False
        for n, value in enumerate(ids):
            if not checked:
                _check_arguments(cls, check_id(value, f"ids[{n}]"), state)
                shared = copy_initial_state(cls, value, state, when=_ADD_MANY_WHEN)
                checked = True
            agent_id = self._claim(value, f"ids[{n}]")
            self._specs.append(AgentSpec(ref, agent_id, shared))

    def _backend_for_run(self) -> tuple[ExecutionBackend, bool]:
        """The backend for one run, and whether this model owns (and closes) it."""
        if self._settings is not None:
            return self._settings.backend(), True
        if isinstance(self._backend, str):
            return get_backend(self._backend), True
        return self._backend, False

    def run(self, sequence: Sequence | Phase | Action, steps: int = 1, *,
            digests: bool = True, defer_gc: bool = True,
            collect: DataCollector | None = None) -> RunResult:
        """Run *steps* steps of *sequence* from the agents as added.

        Each step runs the sequence's phases in order; messages sent in one
        phase are delivered, sorted in total order, before the next begins.

        Args:
            sequence: The phases of a step (a bare action or Phase is a
                one-phase sequence).
            steps: How many steps (an int >= 0).
            digests: Compute a state digest and a message digest after each
                step (canonical encoding and SHA-256 of every agent and every
                message: for checking determinism, about as costly as a cheap
                model). The final states are returned either way.
            defer_gc: While the run is in progress, raise the oldest
                generation's garbage-collection threshold (``gc.set_threshold``;
                restored afterwards). Messages survive long enough to reach the
                oldest generation, and the frequent full collections that
                follow dominate the run time of message-heavy models. Cyclic
                garbage the model makes is still collected, just later. Set
                ``False`` to leave the collector alone (it is process-wide).
            collect: A :class:`DataCollector` whose reporters are evaluated on
                the agents' states after every step (the snapshot the state
                digest is taken from; with ``digests=False`` a snapshot is
                taken for it alone). It gives the same tables on every backend.

        Returns:
            The per-step digests, message counts and final agent states.

        Raises:
            AgentActionError: An agent's action (or constructor) raised; it
                names the agent, the phase and the step.
            UnknownRecipient: An agent sent a message to an id the model lacks.
            UncopyableState: Agent state or a payload cannot be copied (a lock,
                an open file) or, on a backend with worker processes, pickled
                (an instance of a local class); names the agent, the attribute
                or message, the phase and the step.
            WorkerLost: A worker process of the backend died.
            ConfigError: *steps* is not an int >= 0, *sequence* is not a
                Sequence, Phase or importable action, *collect* is not a
                DataCollector or already holds a run, or an agent lacks an
                attribute an agent reporter names.
        """
        given: object = steps
        if isinstance(given, bool) or not isinstance(given, int) or given < 0:
            raise ConfigError(f"steps must be an int >= 0, got {type(given).__name__} {given!r}")
        if collect is not None:
            if not isinstance(collect, DataCollector):
                raise ConfigError(f"collect must be a DataCollector or None, got "
                                  f"{type(collect).__name__} {collect!r}")
            collect._begin()
        phases = Sequence.of(sequence).phases
        backend, owned = self._backend_for_run()
        # Optional fast path of in-process backends: run, order and deliver in one
        # call, returning (count, messages in total order or None); see
        # LocalBackend.execute_and_deliver.
        fast: Callable[[Phase, int, int, bool], tuple[int, list[Message] | None]] | None
        fast = getattr(backend, "execute_and_deliver", None)
        state_digests: list[str] = []
        message_digests: list[str] = []
        counts: list[int] = []
        with full_collections_deferred(defer_gc):
            try:
                backend.start(self._specs, self._seed, self._world)
                for step in range(steps):
                    hasher = MessageDigest() if digests else None
                    count = 0
                    for index, phase in enumerate(phases):
                        if fast is not None:
                            sent, kept = fast(phase, step, index, hasher is not None)
                            count += sent
                            if hasher is not None and kept is not None:
                                hasher.update(kept)
                            continue
                        messages = backend.execute_action(phase, step, index)
                        # Total order: Message compares as (phase, sender, seq, ...), and
                        # seq is unique per sender, so this sorts by (phase, sender, seq).
                        messages.sort()
                        count += len(messages)
                        if hasher is not None:
                            hasher.update(messages)
                        backend.deliver_messages(messages)
                    counts.append(count)
                    if hasher is not None or collect is not None:
                        snapshot = backend.snapshot()
                        if hasher is not None:
                            message_digests.append(hasher.hexdigest())
                            state_digests.append(state_digest(snapshot))
                        if collect is not None:
                            collect._collect(step, snapshot)
                agents = backend.snapshot()
            finally:
                if owned:
                    backend.close()
        return RunResult(seed=self._seed, backend=backend.name, steps=steps,
                         state_digests=tuple(state_digests),
                         message_digests=tuple(message_digests),
                         message_counts=tuple(counts), agents=agents)

    def __repr__(self) -> str:
        backend = self._settings.mode if self._settings is not None else self._backend
        return f"<Model: {len(self._specs)} agents, backend {backend!r}, seed {self._seed!r}>"


def _check_buildable(name: str) -> None:
    ensure_buildable(name)
