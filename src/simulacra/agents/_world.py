"""Worlds (game masters), observe/act agents and the events a world resolves their actions into.

This is the model side of LLM agent societies, shared by every engine that
drives them (the round-based engine now, the event-driven one later):

* an agent (:class:`Actor`, or the :class:`LLMAgent` base class) is told what
  it sees with ``observe(observation)`` and chooses what to do with
  ``act(spec)``; it never reads the world or another agent;
* a :class:`World` (the game master) owns the shared state. It builds each
  agent's observation, and it resolves actions into :class:`ActionEvent`
  records -- the only way the state changes. It is the single writer: engines
  call :meth:`World.resolve` only while holding :attr:`World.lock`, one
  action at a time, in a deterministic order.

Events are event-sourced: applying a run's events in order to a fresh world
(:meth:`World.apply`) rebuilds its state, and their canonical encoding is the
run's trace.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final, Protocol, final, runtime_checkable

from simulacra._util import fields_pickled
from simulacra.errors import ConfigError
from simulacra.trace import canonical

from ._agent import AgentId
from ._digest import canonical_line

if TYPE_CHECKING:
    from simulacra.llm import CallSite, Completion, CompletionRequest, LanguageModel

__all__ = [
    "WORLD_SCHEME",
    "ActionEvent",
    "ActionSpec",
    "Actor",
    "LLMAgent",
    "World",
]

#: Header of a world's state digest.
WORLD_SCHEME: Final = "simulacra.agents.world.v1"

#: The one-pass encoder of a PLAIN_STATE world (as canonical_line's, without the walk).
_PLAIN: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                 allow_nan=False).encode


@final
@fields_pickled
@dataclass(frozen=True, slots=True)
class ActionSpec:
    """What an engine asks of an agent for one turn.

    Attributes:
        step: On the round engine, the step (round) of the turn. On the
            event-driven engine, the agent's own turn number: 0 for its first
            turn, 1 for its second..., counted per agent (not the window); the
            events the turn resolves into hold it as :attr:`ActionEvent.turn`,
            and the window as their ``step``.
        time: The simulated time of the turn (the step, as a float, in rounds).
        reason: Why the agent acts now: ``"round"``, or for the event-driven
            engine ``"wake"`` or the kind of event that woke it (``"mention"``).
    """

    step: int
    time: float = 0.0
    reason: str = "round"


@final
@fields_pickled
@dataclass(frozen=True, slots=True)
class ActionEvent:
    """One resolved action: a record of what changed in the world, event-sourced.

    Attributes:
        index: The event's position in the run (0, 1, 2...), given by the world.
        step: The step it was resolved in, on both engines: on the round
            engine the step (round), the same for every event of the step; on
            the event-driven engine the window of virtual time it fell in,
            ``int(time // window)`` (a scenario's event too). A world that
            tallies by ``step`` counts the same thing on both.
        time: Its simulated time.
        agent: The id of the agent whose action it resolves (as a str).
        kind: What happened: ``"post"``, ``"reply"``, ``"like"``,
            ``"turn_failed"``...
        data: The details, plain JSON data (str keys; str, int, float, bool,
            None, lists and dicts of those).
        triggers: Ids (as str) of agents this event concerns directly -- the
            agents it mentions. The event-driven engine wakes them.
        turn: On the event-driven engine, the acting agent's own turn number
            (its :attr:`ActionSpec.step`: 0, 1, 2... per agent, whatever the
            window); ``None`` on the round engine, where it is the step. Runs
            of the event-driven engine written before this field existed held
            the turn in ``step``; they replay and resume as they were made.
    """

    index: int
    step: int
    time: float
    agent: str
    kind: str
    data: Mapping[str, Any] = field(default_factory=dict)
    triggers: tuple[str, ...] = ()
    turn: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The event as one JSON object (a line of ``action_events.jsonl``)."""
        out: dict[str, Any] = {"i": self.index, "step": self.step, "time": self.time,
                               "agent": self.agent, "kind": self.kind, "data": dict(self.data)}
        if self.triggers:
            out["triggers"] = list(self.triggers)
        if self.turn is not None:
            out["turn"] = self.turn
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ActionEvent:
        """Rebuild an event from :meth:`to_json`'s object.

        Raises:
            ConfigError: A field is missing or has the wrong type.
        """
        try:
            turn = obj.get("turn")
            return cls(int(obj["i"]), int(obj["step"]), float(obj["time"]), str(obj["agent"]),
                       str(obj["kind"]), dict(obj.get("data") or {}),
                       tuple(str(t) for t in obj.get("triggers") or ()),
                       None if turn is None else int(turn))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"not an action event: {obj!r} ({exc})") from None

    def payload(self) -> dict[str, Any]:
        """The index, step, data, triggers and turn in one dict (a trace record's payload)."""
        payload: dict[str, Any] = {"i": self.index, "step": self.step, **self.data}
        if self.triggers:
            payload["triggers"] = list(self.triggers)
        if self.turn is not None:
            payload["turn"] = self.turn
        return payload

    def record(self) -> tuple[float, str, str, dict[str, Any]]:
        """The event as a trace record ``(time, kind, agent, payload)``."""
        return (self.time, self.kind, self.agent, self.payload())

    def line(self) -> bytes:
        """The canonical encoding of :meth:`record`, plus a newline (what digests hash)."""
        return canonical_line(list(self.record()))


@runtime_checkable
class Actor(Protocol):
    """What engines need of an agent: an id, observe/act, and its state.

    ``observe`` and ``act`` run on the engine's workers (threads, an asyncio
    loop), several agents at once, so an agent touches only its own
    attributes. ``get_state()`` returns plain data, and ``set_state`` of it
    restores the agent exactly (checkpoints, digests).
    """

    id: AgentId

    def observe(self, observation: Any) -> None:
        """Take in what the agent sees now."""
        ...

    def act(self, spec: ActionSpec) -> Any:
        """Choose this turn's action (may call a language model)."""
        ...

    def get_state(self) -> dict[str, Any]:
        """The agent's state as plain data."""
        ...

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore a state from :meth:`get_state`."""
        ...


_CALL_SITE: Any = None


def _call_site(agent: str, n: int) -> CallSite:
    global _CALL_SITE  # noqa: PLW0603  (the llm layer is imported on first use)
    factory = _CALL_SITE
    if factory is None:
        from simulacra.llm import CallSite  # noqa: PLC0415  (lazy: keeps agents import light)

        factory = _CALL_SITE = CallSite
    site: CallSite = factory(agent, n)
    return site


class LLMAgent:
    """Base class of agents that think with a language model.

    An engine binds the run's model (:meth:`bind`) before the first turn.
    Each turn it calls :meth:`observe` and then :meth:`act` (or :meth:`aact`
    on asyncio), which by default builds a request with :meth:`prompt`, sends
    it with :meth:`complete` and turns the reply into an action with
    :meth:`parse`. Subclasses implement those two; or override :meth:`act`
    for agents that need no model.

    :meth:`complete` names each call by its *call site*, ``CallSite(str(id),
    n)`` for the agent's n-th call, so a scripted model and record/replay give
    every agent the same replies whatever order the calls are made in.

    Args:
        id: The agent's id (an int or a str).
    """

    #: Attributes that are not state (see :meth:`get_state`).
    _NOT_STATE: ClassVar[frozenset[str]] = frozenset({"model", "observation"})

    def __init__(self, id: AgentId) -> None:
        self.id = id
        self.model: LanguageModel | None = None
        self.calls = 0
        self.observation: Any = None

    def bind(self, model: LanguageModel | None) -> None:
        """Use *model* for this agent's calls."""
        self.model = model

    def observe(self, observation: Any) -> None:
        """Keep *observation* for the next :meth:`act`."""
        self.observation = observation

    def prompt(self, spec: ActionSpec) -> CompletionRequest | None:
        """The request to send this turn, or ``None`` to skip the model (then parse gets None)."""
        raise NotImplementedError(f"{type(self).__qualname__} must define prompt() or act()")

    def parse(self, completion: Completion | None, spec: ActionSpec) -> Any:
        """Turn the model's reply into an action.

        Raises:
            InvalidAction: The reply is not an action (the turn fails).
        """
        raise NotImplementedError(f"{type(self).__qualname__} must define parse() or act()")

    def _next_site(self) -> CallSite:
        if self.model is None:
            raise ConfigError(f"agent {self.id!r} has no language model: call bind(model) first")
        n = self.calls
        self.calls = n + 1
        return _call_site(str(self.id), n)

    def complete(self, request: CompletionRequest) -> Completion:
        """Send *request* to the bound model as this agent's next call."""
        site = self._next_site()
        return self.model.complete(request, site=site)  # type: ignore[union-attr]  # checked

    async def acomplete(self, request: CompletionRequest) -> Completion:
        """Like :meth:`complete`, on asyncio."""
        site = self._next_site()
        return await self.model.acomplete(request, site=site)  # type: ignore[union-attr]

    def act(self, spec: ActionSpec) -> Any:
        """Prompt, call the model, parse: this turn's action."""
        request = self.prompt(spec)
        return self.parse(None if request is None else self.complete(request), spec)

    async def aact(self, spec: ActionSpec) -> Any:
        """:meth:`act` on asyncio (an overridden :meth:`act` runs on a thread)."""
        if type(self).act is not LLMAgent.act:
            import asyncio  # noqa: PLC0415

            return await asyncio.to_thread(self.act, spec)
        request = self.prompt(spec)
        return self.parse(None if request is None else await self.acomplete(request), spec)

    def get_state(self) -> dict[str, Any]:
        """Every attribute but the model and the last observation, as they are."""
        return {k: v for k, v in vars(self).items() if k not in self._NOT_STATE}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore the attributes of :meth:`get_state`."""
        for key, value in state.items():
            setattr(self, key, value)

    def __repr__(self) -> str:
        return f"<{type(self).__qualname__} {self.id!r}>"


class World:
    """Base class of worlds (game masters): the shared state, and its only writer.

    Subclasses implement :meth:`observation_for` and :meth:`decide` (what
    events an action makes) and :meth:`apply` (how an event changes the
    state); :meth:`resolve` ties them together. Engines call
    :meth:`observation_for` from several workers at once while no action is
    being resolved, and :meth:`resolve` one call at a time under
    :attr:`lock`, in a deterministic order (never the order in which model
    calls finished).

    State lives in plain-data attributes; :meth:`get_state` returns them and
    :meth:`state_digest` hashes them canonically.
    """

    #: Attributes that are not state.
    _NOT_STATE: ClassVar[frozenset[str]] = frozenset({"lock"})
    #: Set True by a world whose :meth:`get_state` is plain JSON data: dicts
    #: with ``str`` keys only, lists and tuples, str, int, finite float, bool
    #: and None. Its :meth:`state_digest` is then encoded by the C JSON
    #: encoder in one pass (the same bytes as the canonical walk gives such
    #: data, at a tenth of the cost: a million agents' feeds in seconds); a
    #: state that turns out not to be plain (a set, a NaN, a cycle) falls back
    #: to the walk. A dict with int keys is the one thing it cannot catch (JSON
    #: writes the key as a string): leave the flag unset for such a state.
    PLAIN_STATE: ClassVar[bool] = False

    def __init__(self) -> None:
        #: The per-game-master lock engines hold while resolving.
        self.lock = threading.Lock()
        #: How many events this world has made (the next event's index).
        self.events = 0

    # -- reading --------------------------------------------------------------

    def snapshot(self) -> Any:
        """A token for the state at the start of a batch; ``observation_for`` reads it.

        Engines take one snapshot per batch and no action is resolved while
        observations are built, so the default (``None``: read the live
        state) is right for worlds whose reads never write.
        """
        return None

    def observation_for(self, agent_id: AgentId, snapshot: Any = None) -> Any:
        """What *agent_id* sees, from *snapshot* (or the live state when it is ``None``)."""
        raise NotImplementedError(f"{type(self).__qualname__} must define observation_for()")

    def affected_by(self, agent_id: AgentId) -> Collection[AgentId] | None:
        """The agents whose actions can change what *agent_id* observes, or wake it.

        ``None`` (the default): any agent can. A world with locality (a
        street, a map with a radius of sight, a follow graph that cannot grow
        beyond a neighbourhood) names them, and the event-driven engine then
        starts a turn *early*, in wall-clock time, while turns of agents far
        away are still in flight: see ``docs/events.md``, "Early starts".
        The answer must hold for the whole run (name every agent that could
        ever affect *agent_id*: a superset is safe), must cover every agent
        whose events can trigger *agent_id*, and *agent_id*'s observation must
        depend on nothing else (no global counts, no "newest posts of all").
        An agent answered None is taken to be affected by every other agent
        (it rarely starts early; the others still do); None for every agent
        and no turn starts early. The engine checks
        the answer: a turn started early is observed again at its own time and
        its pickled bytes compared with those it started with (an observation
        that will not pickle is never started early), and an observation that
        changed, or a wake-up from an agent not named, stops the run with a
        ConfigError naming the agent (and the agents that may have changed it,
        or the one that woke it). :meth:`observation_for` must only read: it is
        called twice for a turn started early.
        """
        return None

    def observation_at(self, agent_id: AgentId, time: float) -> Any:
        """What *agent_id* would see at *time*, counting others' turns before *time* only.

        Its :meth:`observation_for`, with every turn of its own and only the
        turns of other agents that resolved before *time*. Optional, for a
        world whose turns commute (:meth:`commutes`) and whose records carry
        their time: the event-driven engine's out-of-order commit then puts
        every returned turn into its forward world at once, and a turn started
        early reads the world with this, however far its neighbours have gone
        ahead. Without it (the default raises NotImplementedError and is never
        called), a turn waits to go in until no agent it affects can still
        observe before it. Checked as :meth:`affected_by` is: the observation
        a turn started early with must be the one the world gives at its own
        time. Like :meth:`observation_for`, it must only read.
        """
        raise NotImplementedError(f"{type(self).__qualname__} does not define observation_at()")

    def commutes(self) -> bool:
        """Whether turns of different agents commute in this world (False by default).

        True promises that resolving the turns of different agents in any
        order (each agent's own turns in their order) leaves every observation,
        every :meth:`decide` and every agent woken the same: what an agent sees
        holds no order of arrival (an inbox is sorted by time, then by id, not
        appended to) and no identity numbered across agents (ids per author).
        The event-driven engine's out-of-order commit (``out_of_order``) then
        commits a turn to its forward world as soon as its call has returned
        and no agent it affects may still observe before it, rather than once
        every turn within two hops of it in :meth:`affected_by` has gone in
        first (``docs/events.md``, "Out-of-order commit"). It is checked as
        :meth:`affected_by` is: a turn started early whose observation or
        wake-up differs at its own time stops the run with a ConfigError,
        never a different run.
        """
        return False

    # -- writing (under self.lock) ---------------------------------------------

    def decide(self, agent_id: AgentId, action: Any, step: int,
               time: float) -> list[tuple[str, dict[str, Any], tuple[str, ...]]]:
        """The events *action* makes, as ``(kind, data, triggers)``; changes nothing.

        Raises:
            InvalidAction: The action is not one this world understands.
        """
        raise NotImplementedError(f"{type(self).__qualname__} must define decide()")

    def apply(self, event: ActionEvent) -> None:
        """Change the state as *event* says (also when rebuilding from a log).

        The base class counts the event (:attr:`events`); :meth:`resolve`,
        :meth:`failed` and :meth:`replay` count it again after calling this,
        so a subclass that forgets ``super().apply(event)`` still numbers its
        events 0, 1, 2...
        """
        self.events = event.index + 1

    def replay(self, events: Iterable[ActionEvent]) -> int:
        """Apply logged events in order, skipping those already applied; return how many applied.

        Idempotent: replaying a log (``action_events.jsonl``) twice, or a log
        that overlaps what the world has already applied, applies each event
        once -- events are numbered, and an event whose index is below
        :attr:`events` is skipped.

        Raises:
            ConfigError: The log has a gap (an event's index is past the next one).
        """
        applied = 0
        for event in events:
            if event.index < self.events:
                continue
            if event.index != self.events:
                raise ConfigError(
                    f"event #{event.index} cannot follow event #{self.events - 1}: the log "
                    "has a gap")
            self.apply(event)
            self.events = event.index + 1  # whether or not apply() called super().apply
            applied += 1
        return applied

    def resolve(self, agent_id: AgentId, action: Any, *, step: int,
                time: float | None = None, turn: int | None = None) -> list[ActionEvent]:
        """Resolve one agent's action: decide its events, number them, apply them.

        Callers hold :attr:`lock`. *turn* is the acting agent's own turn number on
        the event-driven engine (:attr:`ActionEvent.turn`), ``None`` on the round one.

        Raises:
            InvalidAction: The world cannot resolve *action*; nothing changed.
        """
        when = float(step) if time is None else time
        out: list[ActionEvent] = []
        who = str(agent_id)
        for kind, data, triggers in self.decide(agent_id, action, step, when):
            index = self.events
            event = ActionEvent(index, step, when, who, kind, data, triggers, turn)
            self.apply(event)
            self.events = index + 1  # the numbering is ours, whatever apply() does
            out.append(event)
        return out

    def failed(self, agent_id: AgentId, error: BaseException, *, step: int,
               time: float | None = None, turn: int | None = None) -> ActionEvent:
        """Record a failed turn as a ``turn_failed`` event (callers hold :attr:`lock`)."""
        message = str(error)
        data = {"error": type(error).__name__,
                "message": message if len(message) <= 200 else message[:197] + "..."}
        index = self.events
        event = ActionEvent(index, step, float(step) if time is None else time,
                            str(agent_id), "turn_failed", data, (), turn)
        self.apply(event)
        self.events = index + 1
        return event

    # -- state -------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        """The world's state as plain data (every attribute but the lock)."""
        return {k: v for k, v in vars(self).items() if k not in self._NOT_STATE}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore a state from :meth:`get_state`."""
        for key, value in state.items():
            setattr(self, key, value)

    def state_digest(self) -> str:
        """SHA-256 of the canonical encoding of :meth:`get_state`."""
        h = hashlib.sha256((WORLD_SCHEME + "\n").encode("ascii"))
        state = self.get_state()
        line = None
        if self.PLAIN_STATE:
            try:
                line = (_PLAIN([type(self).__qualname__, state]) + "\n").encode(
                    "utf-8", "surrogatepass")
            except (TypeError, ValueError):  # not plain after all: the canonical walk
                line = None
        h.update(canonical_line([type(self).__qualname__, canonical(state)])
                 if line is None else line)
        return h.hexdigest()

    # -- reporting ---------------------------------------------------------------

    def probe(self, step: int) -> dict[str, Any]:
        """Metrics measured after each step (telemetry); plain data. Default: none."""
        return {}

    def summary(self) -> dict[str, Any]:
        """Headline numbers of the run so far (the end-of-run table). Default: none."""
        return {}

    def samples(self, limit: int = 3) -> list[list[str]]:
        """A few short excerpts of what the agents did, each a list of lines (default: none).

        ``simulacra run`` prints them after the summary table, so that a user
        sees what the agents wrote, not only how much; the social world gives
        its longest mention threads.
        """
        return []

    def __repr__(self) -> str:
        return f"<{type(self).__qualname__}: {self.events} events>"

