"""The event-driven engine with its agents on shards (``sim.engine.shards`` on ``async_event``).

The engine in the run's process (the coordinator) keeps what makes the run
what it is: the clock and its queue, the world, the wake-ups, the
resolutions. What moves to the shards is each agent and its turn. At a
turn's wake-up, the coordinator builds the agent's observation from its
world, as one process does. It sends the observation and the turn's
:class:`~simulacra.agents.ActionSpec` to the agent's shard. There the agent
observes, acts and makes its model calls. The shard returns the action (or
the error) and the calls. The coordinator passes the calls through the
run's own model stack: the recordings and ``calls.jsonl``, and the turn's
simulated latency, which is drawn per call site. It then schedules the
resolution exactly where one process would.

A turn therefore sees the same observation, state and replies whichever
shard holds its agent. The digest, the events and the checkpoints are those
of one process. Turns in flight overlap across shards as they overlap across
threads (``sim.engine.mode=threads``, ``concurrency``). Blocking agents
(:class:`~simulacra.societies.BlockingAgent`) do not run on shards yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from simulacra.errors import ConfigError

from ._events import EventEngine, EventSteps, engine_options
from ._sharded import ServedCalls, ShardSet, ShardSpec, pass_through

if TYPE_CHECKING:
    from simulacra.agents import ActionSpec, Actor, AgentId, World
    from simulacra.llm import LanguageModel

__all__ = ["ShardedEventEngine", "sharded_event_steps"]


class ShardedEventEngine(EventEngine):
    """An :class:`EventEngine` whose agents act on shards (see the module's doc).

    Args:
        world, agents: As for :class:`EventEngine` (the coordinator's copies:
            its agents do not act; their states are pulled from the shards).
        specs, shard_mode, dask: The shards (:class:`ShardSet`).
        served: The bottom of *model*'s stack, answering with the shards' replies.
        **kwargs: As for :class:`EventEngine`.

    Raises:
        ConfigError: A blocking agent, or an agent on no shard.
    """

    def __init__(self, world: World, agents: Iterable[Actor], *, specs: Sequence[ShardSpec],
                 shard_mode: str, served: ServedCalls, dask: str | None = None,
                 **kwargs: Any) -> None:
        shards = ShardSet(specs, shard_mode, dask)
        super().__init__(world, agents, **kwargs)
        # Observations go to the shards where the agents act: no turn starts early there.
        self._dependencies = False
        if self._blocking:
            first = next(iter(self._blocking))
            raise ConfigError(f"sim.engine.shards: agent {str(first)!r} is a blocking agent, "
                              "which does not run on shards yet")
        shards.check(self._by_key)
        self._set = shards
        self._served = served
        self._seen: dict[AgentId, Any] = {}
        self._restored: Mapping[str, Any] | None = None

    # -- the shards ------------------------------------------------------------------

    def _start(self) -> None:
        if self._set.start() and self._restored is not None:
            self._set.push(self._restored["world"], self._restored["agents"])

    def close(self) -> None:
        """Stop the shards (idempotent)."""
        self.abandon()
        self._set.close()

    def run(self, *, max_turns: int | None = None, until: float | None = None,
            drain: bool = True, early_until: float | None = None) -> Any:
        self._start()
        return super().run(max_turns=max_turns, until=until, drain=drain,
                           early_until=early_until)

    # -- a turn ------------------------------------------------------------------------

    def _observe(self, agent_id: AgentId, observation: Any) -> None:
        self._seen[agent_id] = observation  # sent with the turn, to the agent's shard

    def _act(self, agent_id: AgentId, spec: ActionSpec) -> tuple[bool, Any, float]:
        key = self._book[agent_id].key
        ok, value, calls, count = self._set.one(key, "turn", key, spec,
                                                self._seen.pop(agent_id, None))
        model = self._turn_models.get(agent_id) or self._model
        pass_through(model, self._served, calls)
        agent = self._agents[agent_id]
        if hasattr(agent, "calls"):
            agent.calls = count  # the coordinator's copy counts its calls as the shard's does
        if self.tracer is not None:
            self._turn_traced(agent_id, ok, value)
        return ok, value, self._turn_duration(agent_id)

    async def _aact(self, agent_id: AgentId, spec: ActionSpec) -> tuple[bool, Any, float]:
        return await asyncio.to_thread(self._act, agent_id, spec)

    # -- state -------------------------------------------------------------------------

    def _pull(self) -> None:
        self._set.pull({key: self._agents[agent_id] for key, agent_id in self._by_key.items()},
                       list(self._by_key))

    def state(self) -> dict[str, Any]:
        self.drain()  # the turns in flight on the shards first
        self._pull()
        return super().state()

    def restore(self, state: Mapping[str, Any]) -> None:
        super().restore(state)
        self._restored = state
        if self._set.open:
            self._set.push(state["world"], state["agents"])

    def agents_digest(self) -> str:
        self._pull()
        return super().agents_digest()


def sharded_event_steps(world: World, agents: list[Actor], *, model: LanguageModel | None,
                        seed: Any, config: Any, on_step: Callable[[Any], None] | None,
                        on_turn: Callable[[], None] | None,
                        fatal: tuple[type[BaseException], ...], specs: Sequence[ShardSpec],
                        served: ServedCalls) -> tuple[EventSteps, ShardedEventEngine]:
    """The event engine a run config asks for, on shards: ``(its steps, the engine)``."""
    settings = config.sim.engine
    kwargs, width, max_turns, barrier = engine_options(config)
    engine = ShardedEventEngine(
        world, agents, specs=specs, shard_mode=settings.shard_mode, served=served,
        dask=config.run.dask.scheduler_address, model=model, seed=seed, fatal=fatal,
        on_turn=on_turn, **kwargs)
    return EventSteps(engine, width=width, max_turns=max_turns, on_step=on_step,
                      barrier=barrier), engine
