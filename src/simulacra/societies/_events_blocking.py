"""Blocking-style agents in the event-driven engine: a plain function on a greenlet.

An agent written as one blocking function::

    def member(ctx):
        while True:
            seen = ctx.observe()                       # the live world at this wake-up
            reply = ctx.llm.complete(prompt(seen))     # a simulated duration
            ctx.act(parse(reply))                      # resolves at wake + durations

runs in :class:`~simulacra.societies.EventEngine` next to ``observe``/``act``
agents. Its function runs on a greenlet owned by the engine's apply loop.
Each blocking call switches back to the loop:

* ``ctx.llm.complete(request)`` hands the request to the engine, which sends it
  to the model on its workers -- so the calls of many blocking agents overlap
  in wall-clock time, under the same lookahead rule as every other turn -- and
  switches back into the agent with the completion when it is in. The call's
  simulated duration (the latency model, keyed by the call site) is added to
  the turn's;
* ``ctx.sleep(d)`` adds *d* of simulated thinking time to the turn;
* ``ctx.act(action)`` ends the turn: the action resolves at the wake time plus
  the turn's durations. The call returns at the agent's next wake-up.

Returning from the function retires the agent. The agent touches only its
own state and what it observed, so when its code runs in wall-clock time does
not matter: the run is the same on every mode and concurrency. A paused
greenlet cannot be pickled: runs with blocking agents are restored by
re-execution from the LLM recordings, not from checkpoints.
"""

from __future__ import annotations

import importlib
import math
import random
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from simulacra.agents import AgentId
from simulacra.errors import AgentStateError, ConfigError

if TYPE_CHECKING:
    from simulacra.llm import Completion, CompletionRequest

__all__ = ["BlockingAgent", "BlockingContext"]

#: What a blocking agent hands the engine: ("call", request), ("act", action) or ("done", None).
Op = tuple[str, Any]
_DONE: Final[Op] = ("done", None)


def _greenlet() -> Any:
    """The greenlet module (it ships no type information: everything from it is Any)."""
    return importlib.import_module("greenlet")


class _LLM:
    """``ctx.llm``: the engine's model, seen from a blocking agent."""

    __slots__ = ("_agent",)

    def __init__(self, agent: BlockingAgent) -> None:
        self._agent = agent

    def complete(self, request: CompletionRequest) -> Completion:
        """Call the model; the simulated duration of the call is added to this turn."""
        return self._agent._block(("call", request))  # type: ignore[no-any-return]


class BlockingContext:
    """What a blocking agent's function gets: observe, the model, act, sleep."""

    __slots__ = ("_agent", "llm")

    def __init__(self, agent: BlockingAgent) -> None:
        self._agent = agent
        #: The language model: ``ctx.llm.complete(request)``.
        self.llm = _LLM(agent)

    @property
    def id(self) -> AgentId:
        """The agent's id."""
        return self._agent.id

    @property
    def now(self) -> float:
        """The virtual time of this wake-up."""
        return self._agent.now

    @property
    def turn(self) -> int:
        """This turn's number (0, 1, 2...)."""
        return self._agent.turn

    @property
    def state(self) -> dict[str, Any]:
        """The agent's own state: plain data, in its ``get_state()`` and digests."""
        return self._agent.state

    @property
    def rng(self) -> random.Random:
        """A stream keyed by (run seed, agent, turn): the same on every mode."""
        return self._agent._rng()

    def observe(self) -> Any:
        """What the agent sees now: the live world at this wake-up."""
        return self._agent.observation

    def sleep(self, delay: float) -> None:
        """Think for *delay* units of virtual time before this turn's action resolves."""
        given: object = delay
        ok = isinstance(given, int | float) and not isinstance(given, bool)
        if not ok or not math.isfinite(delay) or delay < 0:
            raise ConfigError(f"ctx.sleep(): delay must be a finite number >= 0, got {delay!r}")
        self._agent.extra += float(delay)

    def act(self, action: Any) -> None:
        """End this turn with *action*; return at the agent's next wake-up."""
        self._agent._block(("act", action))

    def __repr__(self) -> str:
        return f"<BlockingContext of {self._agent.id!r}>"


class BlockingAgent:
    """A blocking function ``fn(ctx, *args, **kwargs)`` as an agent of the event-driven engine.

    Args:
        id: The agent's id (an int or a str).
        fn: The agent's function; it gets a :class:`BlockingContext` first.
        *args: More arguments for *fn*.
        **kwargs: Keyword arguments for *fn*.
    """

    def __init__(self, id: AgentId, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> None:
        if not callable(fn):
            raise ConfigError(f"BlockingAgent({id!r}): fn must be callable, got {fn!r}")
        self.id = id
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.state: dict[str, Any] = {}
        self.calls = 0
        self.turn = -1
        self.now = 0.0
        self.extra = 0.0
        self.observation: Any = None
        self.done = False
        self._greenlet: Any = None
        self._ctx = BlockingContext(self)
        self._stream: Callable[[int], random.Random] | None = None

    # -- the engine's side -------------------------------------------------------------

    def wake(self, observation: Any, now: float, turn: int,
             stream: Callable[[int], random.Random]) -> Op:
        """Start a turn on the apply loop: run the function to its first blocking call."""
        if self.done:
            return _DONE
        self.observation, self.now, self.turn, self.extra = observation, now, turn, 0.0
        self._stream = stream
        if self._greenlet is None:
            self._greenlet = _greenlet().greenlet(self._main)
        return self._switch(None)

    def deliver(self, value: Any) -> Op:
        """Continue after a model call with its completion (or the exception it raised)."""
        return self._switch(value)

    def _switch(self, value: Any) -> Op:
        assert self._greenlet is not None  # noqa: S101  (wake() made it)
        op: Op = self._greenlet.switch(value)
        return op

    def _main(self, _first: object) -> Op:
        try:
            self.fn(self._ctx, *self.args, **self.kwargs)
        finally:
            self.done = True
        return _DONE

    # -- the agent's side --------------------------------------------------------------

    def _block(self, op: Op) -> Any:
        current = _greenlet().getcurrent()
        if self._greenlet is None or current is not self._greenlet:
            raise AgentStateError(
                f"agent {self.id!r}: ctx.{'act' if op[0] == 'act' else 'llm.complete'}() was "
                "called outside the agent's own function")
        parent = current.parent
        if parent is None:
            raise AgentStateError(f"agent {self.id!r} has no engine to hand off to")
        value = parent.switch(op)
        if isinstance(value, BaseException):
            raise value
        return value

    def _rng(self) -> random.Random:
        if self._stream is None:
            raise AgentStateError(f"agent {self.id!r}: ctx.rng is only available in a turn")
        return self._stream(self.turn)

    # -- the Actor surface ----------------------------------------------------------------

    def observe(self, observation: Any) -> None:
        """Kept for the Actor protocol: the engine hands observations to :meth:`wake`."""
        self.observation = observation

    def act(self, spec: Any) -> Any:
        """Not used: blocking agents act by calling ``ctx.act`` inside their function."""
        raise AgentStateError(f"agent {self.id!r} is a blocking agent: run it in an EventEngine")

    def get_state(self) -> dict[str, Any]:
        """The agent's plain-data state: ``ctx.state``, calls made, whether it is done."""
        return {"state": dict(self.state), "calls": self.calls, "done": self.done}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Refused: a paused function cannot be restored from data; replay the run instead."""
        raise AgentStateError(
            f"agent {self.id!r} is a blocking agent: its paused function cannot be restored "
            "from a checkpoint; restore the run by replaying it from its LLM recordings")

    def __repr__(self) -> str:
        return f"<BlockingAgent {self.id!r}: {getattr(self.fn, '__qualname__', self.fn)}>"
