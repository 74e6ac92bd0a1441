"""Messages and the per-agent phase context: the only way agents talk to each other.

The hot path of every agent model runs through :meth:`Context.send`,
:meth:`Context.broadcast` and :meth:`Context.inbox`, once per message, so the
types here are built to be cheap: :class:`Message` is a named tuple made with
``tuple.__new__`` (no Python ``__init__``), a :class:`Context` is a slotted
object whose per-phase fields live in one shared :class:`Frame`, and an
immutable payload is passed by reference, never copied.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Final, NamedTuple, NoReturn, final

from simulacra.errors import ConfigError, ContextClosed, UnknownRecipient

from ._agent import AgentId, is_immutable

if TYPE_CHECKING:
    from simulacra.rng import SeedTree

__all__ = ["Context", "Frame", "Message", "new_context"]

#: Payload types passed by reference (exact types; see agents._agent.is_immutable).
_SCALARS: Final = frozenset({type(None), bool, int, float, complex, str, bytes})


@final
class Message(NamedTuple):
    """One message: immutable, slotted, and ordered.

    Messages compare as tuples of their fields, and the fields are in the
    order of the model's total order of messages: ``(phase, sender, seq)``
    (``seq`` is unique per sender within a phase, so the remaining fields never
    decide). Every inbox lists its messages in this order, on every backend.

    Attributes:
        phase: The index, within the step's sequence, of the phase that sent it.
        sender: The id of the agent that sent it.
        seq: The sender's n-th message in that phase, from 0.
        recipient: The id of the agent it is for.
        topic: What it is about; ``ctx.inbox(topic)`` filters on it.
        payload: Its content. Immutable values (see ``simulacra.agents.is_immutable``)
            are the sender's object itself; anything else is a deep copy made
            at send time, one per recipient.
    """

    phase: int
    sender: AgentId
    seq: int
    recipient: AgentId
    topic: str
    payload: Any


# Messages are built with tuple.__new__: NamedTuple's generated __new__ is a Python
# function that costs about twice as much, once per message.
_new_message = tuple.__new__
_PAYLOAD = itemgetter(5)


@final
class Frame:
    """What every context of one phase run shares (the engine makes one per phase run).

    Args:
        seed: The model's seed-tree node; agents' random streams derive from it.
        step: The step number, from 0.
        phase: The phase's name.
        phase_index: The phase's index in the step's sequence.
        world: A read-only view of the model's shared world, or ``None``.
        ids: Every agent id of the model (recipients are checked against it): a
            ``range`` when the ids are consecutive ints (membership is then
            arithmetic, with no hash-table lookup), else a frozenset.
        all_ids: The same ids, sorted: the recipients of ``broadcast(to=None)``.
    """

    __slots__ = ("all_ids", "id_type", "id_types", "ids", "phase", "phase_index", "seed",
                 "span", "step", "world")

    def __init__(
        self,
        *,
        seed: SeedTree,
        step: int,
        phase: str,
        phase_index: int,
        world: Mapping[str, Any] | None,
        ids: frozenset[AgentId] | range,
        all_ids: tuple[AgentId, ...],
    ) -> None:
        self.seed = seed
        self.step = step
        self.phase = phase
        self.phase_index = phase_index
        self.world = world
        self.ids = ids
        self.all_ids = all_ids
        #: The exact type of every id: a recipient must have it (3.0 == 3, but is no id).
        self.id_type: type = type(all_ids[0]) if all_ids else int
        self.id_types = frozenset({self.id_type})
        #: (first, last + 1) when the ids are a range, else None.
        self.span = (ids.start, ids.stop) if isinstance(ids, range) else None


@final
class _ClosedOutbox:
    """Stands in for the outbox of a context whose action has returned."""

    __slots__ = ()

    def append(self, message: object) -> NoReturn:
        raise ContextClosed(
            "a Context was used to send after its action returned; a Context is valid "
            "only during the action call that received it (do not store it)"
        )

    extend = append


_CLOSED: Any = _ClosedOutbox()


@final
class Context:
    """What one agent sees and does during one phase.

    The engine makes one per agent per phase and passes it to the action
    (``def act(self, ctx)``). It is valid only during that call: sending
    through a stored context afterwards raises :class:`~simulacra.ContextClosed`.

    No write sharing: a payload that is not immutable (``None``, ``bool``,
    ``int``, ``float``, ``complex``, ``str``, ``bytes``, and tuples and
    frozensets of those) is deep-copied when it is sent, once per recipient, so
    mutating it afterwards, or in the recipient, changes nothing anywhere else.
    """

    __slots__ = ("_frame", "_id", "_inbox", "_out", "_rng", "_seq")

    _frame: Frame
    _id: AgentId
    #: The messages delivered to this agent at the last phase boundary, in total order.
    _inbox: list[Message] | tuple[()]
    #: Where sends go: the outbox of the phase run (a shared list), or _CLOSED.
    _out: list[Message]
    #: The agent's random stream for this phase, made on first use.
    _rng: random.Random | None
    #: The seq of the next message this agent sends in this phase.
    _seq: int

    def __init__(self) -> None:
        raise ConfigError("Context objects are made by the engine, one per agent per phase")

    @property
    def id(self) -> AgentId:
        """The id of the agent this context belongs to."""
        return self._id

    @property
    def step(self) -> int:
        """The current step, from 0."""
        return self._frame.step

    @property
    def phase(self) -> str:
        """The name of the current phase."""
        return self._frame.phase

    @property
    def phase_index(self) -> int:
        """The index of the current phase in the step's sequence."""
        return self._frame.phase_index

    @property
    def world(self) -> Mapping[str, Any] | None:
        """A read-only view of the model's shared world, or ``None`` if it has none.

        The world is frozen when the run starts: mappings are read-only views,
        lists became tuples and sets frozensets. Nothing can write to it during
        a run, so every agent of every step sees the same world.
        """
        return self._frame.world

    @property
    def rng(self) -> random.Random:
        """This agent's random stream for this phase of this step.

        A ``random.Random`` seeded from the seed-tree path ``("agent", id,
        "step", step, "phase", phase_index)`` below the model's seed. It is a
        pure function of those, so draws do not depend on the backend, on the
        worker that holds the agent, or on what other agents drew. Made on
        first access (deriving a seed costs a few microseconds), so agents that
        draw nothing pay nothing.
        """
        rng = self._rng
        if rng is None:
            frame = self._frame
            node = frame.seed.child("agent", self._id, "step", frame.step, "phase",
                                    frame.phase_index)
            rng = self._rng = random.Random(node.seed)
        return rng

    def inbox(self, topic: str | None = None) -> tuple[Message, ...]:
        """Return the messages delivered to this agent at the last phase boundary.

        They are the messages sent to it in the previous phase (the last phase
        of the previous step, for the first phase of a step), in total order:
        by phase, then sender id, then the sender's sequence number.

        Args:
            topic: Keep only the messages with this topic.
        """
        if topic is None:
            return tuple(self._inbox)
        return tuple([m for m in self._inbox if m.topic == topic])

    def payloads(self, topic: str | None = None) -> tuple[Any, ...]:
        """Return the payloads of :meth:`inbox` (same messages, same order).

        ``sum(ctx.payloads("value"))`` is the cheap spelling of
        ``sum(m.payload for m in ctx.inbox("value"))``.
        """
        if topic is None:
            return tuple(map(_PAYLOAD, self._inbox))
        return tuple([m.payload for m in self._inbox if m.topic == topic])

    def send(self, to: AgentId, topic: str, payload: Any = None) -> None:
        """Send *payload* to agent *to*; it is in their inbox in the next phase.

        Args:
            to: The recipient's id.
            topic: A str naming what the message is about.
            payload: The content; copied unless immutable (see the class docstring).

        Raises:
            UnknownRecipient: The model has no agent *to*.
            ConfigError: *topic* is not a str.
        """
        frame = self._frame
        if type(to) is not frame.id_type or to not in frame.ids:
            self._unknown(to)
        if type(topic) is not str:
            _bad_topic(topic)
        if type(payload) not in _SCALARS and not is_immutable(payload):
            payload = copy.deepcopy(payload)
        seq = self._seq
        self._seq = seq + 1
        self._out.append(
            _new_message(Message, (frame.phase_index, self._id, seq, to, topic, payload))
        )

    def broadcast(self, topic: str, payload: Any = None,
                  to: Iterable[AgentId] | None = None) -> None:
        """Send *payload* to many agents, in the order of *to*; one message each.

        Args:
            topic: A str naming what the messages are about.
            payload: The content; deep-copied once per recipient unless immutable.
            to: The recipients' ids, in order (a set is sorted first, since its
                iteration order is not part of the model). ``None`` sends to
                every agent of the model, this one included, in id order.

        Raises:
            UnknownRecipient: The model has no agent with one of the ids in *to*.
            ConfigError: *topic* is not a str, or *to* is a single id.
        """
        frame = self._frame
        recipients: tuple[AgentId, ...] | list[AgentId]
        if to is None:
            recipients = frame.all_ids
        else:
            if type(to) is tuple or type(to) is list:
                recipients = to
            elif isinstance(to, AbstractSet):
                recipients = sorted(to)
            elif isinstance(to, str | int):
                raise ConfigError(
                    f"broadcast(to=...) takes an iterable of agent ids, got {type(to).__name__} "
                    f"{to!r}; use send() for one recipient"
                )
            else:
                recipients = tuple(to)
            # Inlines the membership test of send() for many ids at once: exact id types,
            # then, for consecutive int ids, two comparisons instead of a lookup per id.
            span = frame.span
            if not recipients:
                known = True
            elif not frame.id_types.issuperset(map(type, recipients)):
                known = False
            elif span is not None:
                known = span[0] <= min(recipients) and max(recipients) < span[1]  # type: ignore[operator]
            else:
                ids = frame.ids
                known = isinstance(ids, frozenset) and ids.issuperset(recipients)
            if not known:
                for recipient in recipients:
                    if type(recipient) is not frame.id_type or recipient not in frame.ids:
                        self._unknown(recipient)
        if type(topic) is not str:
            _bad_topic(topic)
        index, sender, seq = frame.phase_index, self._id, self._seq
        if type(payload) in _SCALARS or is_immutable(payload):
            self._out.extend([
                _new_message(Message, (index, sender, n, recipient, topic, payload))
                for n, recipient in enumerate(recipients, seq)
            ])
        else:
            deepcopy = copy.deepcopy
            self._out.extend([
                _new_message(Message, (index, sender, n, recipient, topic, deepcopy(payload)))
                for n, recipient in enumerate(recipients, seq)
            ])
        self._seq = seq + len(recipients)

    def _unknown(self, recipient: object) -> NoReturn:
        frame = self._frame
        error = UnknownRecipient(
            f"agent {self._id!r} sent a message to {recipient!r}, which is not an agent of "
            f"this model, in phase {frame.phase!r} at step {frame.step}"
        )
        error.sender, error.recipient = self._id, recipient
        error.step, error.phase = frame.step, frame.phase
        raise error

    def __repr__(self) -> str:
        frame = self._frame
        return f"<Context of agent {self._id!r}: step {frame.step}, phase {frame.phase!r}>"


def _bad_topic(topic: object) -> NoReturn:
    raise ConfigError(f"topic must be a str, got {type(topic).__name__} {topic!r}")


def new_context(frame: Frame, agent_id: AgentId,
                inbox: list[Message] | tuple[()], out: list[Message]) -> Context:
    """Make the context of one agent for one phase run (engines call this).

    The run loop of :class:`~simulacra.agents.Population` inlines this; it is
    here for backends that drive agents one at a time.
    """
    ctx: Context = object.__new__(Context)
    ctx._frame = frame
    ctx._id = agent_id
    ctx._inbox = inbox
    ctx._out = out
    ctx._rng = None
    ctx._seq = 0
    return ctx


def close_context(ctx: Context) -> None:
    """Make *ctx* refuse further sends: its action has returned."""
    ctx._out = _CLOSED
