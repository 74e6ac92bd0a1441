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
from typing import TYPE_CHECKING, Any, Final, NamedTuple, NoReturn, Protocol, TypeAlias, final

from simulacra.errors import ConfigError, ContextClosed, UnknownRecipient

from ._agent import AgentId, is_immutable
from ._copies import payload_error

if TYPE_CHECKING:
    from simulacra.rng import SeedTree

__all__ = ["Context", "Entry", "Fanout", "Frame", "Message", "PregelHooks", "count_entries",
           "expand_entries", "new_context"]

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


class PregelHooks(Protocol):
    """What a superstep engine puts on a :class:`Frame` for halting and aggregators.

    Only the Pregel backend (``simulacra.backends.PregelBackend``) sets one; on
    every other backend ``Frame.pregel`` is ``None`` and the Pregel methods of
    :class:`Context` refuse to run.
    """

    def vote_to_halt(self, agent_id: AgentId) -> None:
        """Record that *agent_id* votes to halt in this superstep."""

    def aggregate(self, name: str, agent_id: AgentId, value: Any) -> None:
        """Record *agent_id*'s contribution *value* to aggregator *name*."""

    def aggregated(self, name: str) -> Any:
        """The value of aggregator *name* reduced over the previous superstep."""


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
        pregel: The superstep engine's hooks (halting, aggregators), or ``None``
            on backends without supersteps.
        known: Recipient tuples already checked against *ids*, by ``id()``
            (each value is the tuple itself, so its id cannot be reused while
            it is cached); share one dict across the phase runs of one
            population so that ``broadcast(to=self.neighbours)`` checks a
            tuple once per run, not once per call.
    """

    __slots__ = ("all_ids", "id_type", "id_types", "ids", "known", "phase", "phase_index",
                 "pregel", "seed", "span", "step", "world")

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
        pregel: PregelHooks | None = None,
        known: dict[int, tuple[AgentId, ...]] | None = None,
    ) -> None:
        self.seed = seed
        self.known = {} if known is None else known
        self.pregel = pregel
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
    #: (Messages and fan-outs: see Entry.)
    _inbox: list[Entry] | tuple[()]
    #: Where sends go: the outbox of the phase run (a shared list), or _CLOSED.
    _out: list[Entry]
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
        messages = _messages_for(self._id, self._inbox)
        if topic is None:
            return tuple(messages)
        return tuple([m for m in messages if m.topic == topic])

    def payloads(self, topic: str | None = None) -> tuple[Any, ...]:
        """Return the payloads of :meth:`inbox` (same messages, same order).

        ``sum(ctx.payloads("value"))`` is the cheap spelling of
        ``sum(m.payload for m in ctx.inbox("value"))``.
        """
        # Inbox entries are Messages or fan-outs, both with the topic at 4 and the
        # payload at 5: no Message needs to be built to read the payloads.
        if topic is None:
            return tuple(map(_PAYLOAD, self._inbox))
        return tuple([m[5] for m in self._inbox if m[4] == topic])

    def send(self, to: AgentId, topic: str, payload: Any = None) -> None:
        """Send *payload* to agent *to*; it is in their inbox in the next phase.

        Args:
            to: The recipient's id.
            topic: A str naming what the message is about.
            payload: The content; copied unless immutable (see the class docstring).

        Raises:
            UnknownRecipient: The model has no agent *to*.
            ConfigError: *topic* is not a str.
            UncopyableState: *payload* is mutable and cannot be deep-copied (a
                lock, an open file); names the sender, recipient, topic, phase
                and step.
        """
        frame = self._frame
        if type(to) is not frame.id_type or to not in frame.ids:
            self._unknown(to)
        if type(topic) is not str:
            _bad_topic(topic)
        if type(payload) not in _SCALARS and not is_immutable(payload):
            try:
                payload = copy.deepcopy(payload)
            except Exception as exc:
                _uncopyable(self, to, topic, payload, exc)
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
            UncopyableState: *payload* is mutable and cannot be deep-copied.
        """
        frame = self._frame
        recipients: tuple[AgentId, ...]
        if type(to) is tuple and frame.known.get(id(to)) is to:
            recipients = to  # this very tuple was checked before in this run
        elif to is None:
            recipients = frame.all_ids
        else:
            recipients = self._recipients(to)
        if type(topic) is not str:
            _bad_topic(topic)
        if type(payload) in _SCALARS or is_immutable(payload):
            # One fan-out entry stands for the len(recipients) messages (seq, seq + 1,
            # ...), one per recipient in order; inboxes hold it as it is and Messages
            # are built only when someone asks for them (see expand_entries).
            if recipients:
                seq = self._seq
                self._out.append((frame.phase_index, self._id, seq, recipients, topic, payload))
                self._seq = seq + len(recipients)
            else:
                self._out.extend(())  # a closed context still refuses
        else:
            _send_copies(self, recipients, topic, payload)

    def _recipients(self, to: Iterable[AgentId]) -> tuple[AgentId, ...]:
        """Check the recipients of a broadcast; return them as a tuple (cached if *to* is one)."""
        frame = self._frame
        recipients: tuple[AgentId, ...]
        if type(to) is tuple:
            recipients = to
        elif type(to) is list:
            recipients = tuple(to)
        elif isinstance(to, AbstractSet):
            recipients = tuple(sorted(to))
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
        cache = frame.known
        if recipients is to and len(cache) < _KNOWN_LIMIT:
            cache[id(to)] = recipients
        return recipients

    def _pregel(self, method: str) -> PregelHooks:
        if self._out is _CLOSED:
            raise ContextClosed(
                f"a Context was used to call {method}() after its action returned; a Context "
                "is valid only during the action call that received it (do not store it)"
            )
        hooks = self._frame.pregel
        if hooks is None:
            raise ConfigError(
                f"ctx.{method}() needs a backend with supersteps (PregelBackend or "
                f"run_pregel), but agent {self._id!r} runs on one without them"
            )
        return hooks

    def vote_to_halt(self) -> None:
        """Pregel: make this agent inactive until a message reaches it.

        From the next superstep (phase run) on, the agent is skipped until a
        message is delivered to it, which reactivates it. A Pregel run ends
        when every agent has halted and no message is in flight.

        Raises:
            ConfigError: The backend has no supersteps (only
                ``PregelBackend`` and ``run_pregel`` have them).
        """
        self._pregel("vote_to_halt").vote_to_halt(self._id)

    def aggregate(self, name: str, value: Any) -> None:
        """Pregel: contribute *value* to the global aggregator *name*.

        Contributions are reduced in agent id order (an agent's own in call
        order); the result is :meth:`aggregated` in the next superstep.

        Raises:
            ConfigError: No aggregator *name* was declared, or the backend has
                no supersteps.
        """
        self._pregel("aggregate").aggregate(name, self._id, value)

    def aggregated(self, name: str) -> Any:
        """Pregel: the value of aggregator *name* reduced over the previous superstep.

        ``None`` in the first superstep and after a superstep in which no
        agent contributed.

        Raises:
            ConfigError: No aggregator *name* was declared, or the backend has
                no supersteps.
        """
        return self._pregel("aggregated").aggregated(name)

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


#: At most this many checked recipient tuples are remembered per population.
_KNOWN_LIMIT: Final = 1 << 20

Fanout: TypeAlias = tuple[int, AgentId, int, tuple[AgentId, ...], str, Any]
"""``(phase, sender, seq, recipients, topic, payload)``: the messages one
``broadcast`` of an immutable payload sent, one per recipient, with the
sequence numbers ``seq, seq + 1, ...``. A plain tuple (never a Message: the
recipient field of a Message is an id, never a tuple)."""

Entry: TypeAlias = Message | Fanout
"""An item of an outbox or of an inbox: a :class:`Message` or a :data:`Fanout`."""


def expand_entries(entries: Iterable[Entry]) -> list[Message]:
    """The messages that outbox *entries* stand for, in the same order.

    Entries in total order give messages in total order: a fan-out's messages
    have consecutive sequence numbers of one sender.
    """
    out: list[Message] = []
    append = out.append
    new = _new_message
    for entry in entries:
        recipients = entry[3]
        if type(recipients) is tuple:
            index, sender, seq, _, topic, payload = entry
            out.extend([new(Message, (index, sender, n, recipient, topic, payload))
                        for n, recipient in enumerate(recipients, seq)])
        else:
            append(entry)  # type: ignore[arg-type]  # a Message
    return out


def count_entries(entries: Iterable[Entry]) -> int:
    """How many messages *entries* stand for."""
    return sum([len(e[3]) if type(e[3]) is tuple else 1 for e in entries])


def _messages_for(me: AgentId, entries: Iterable[Entry]) -> list[Message]:
    """The Messages of inbox *entries* of agent *me*, built from fan-outs where needed.

    A fan-out that names *me* k times sits k times in a row in the inbox (its
    messages to *me* are consecutive in total order): the j-th copy stands for
    the j-th place of *me* among its recipients.
    """
    out: list[Message] = []
    last: object = None
    place = -1
    for entry in entries:
        recipients = entry[3]
        if type(recipients) is tuple:
            place = recipients.index(me, place + 1) if entry is last else recipients.index(me)
            last = entry
            out.append(_new_message(Message, (entry[0], entry[1], entry[2] + place, me,
                                              entry[4], entry[5])))
        else:
            out.append(entry)  # type: ignore[arg-type]  # a Message
    return out


def _send_copies(ctx: Context, recipients: tuple[AgentId, ...], topic: str,
                 payload: Any) -> None:
    """The messages of a broadcast of a mutable *payload*: one deep copy per recipient.

    (Not inlined in :meth:`Context.broadcast`: the comprehension would make its
    arguments closure cells, which costs every call, not just this rare one.)
    """
    seq = ctx._seq
    index, sender, deepcopy = ctx._frame.phase_index, ctx._id, copy.deepcopy
    try:
        copies = [
            _new_message(Message, (index, sender, n, recipient, topic, deepcopy(payload)))
            for n, recipient in enumerate(recipients, seq)
        ]
    except Exception as exc:
        _uncopyable(ctx, recipients[0], topic, payload, exc)
    ctx._out.extend(copies)
    ctx._seq = seq + len(recipients)


def _uncopyable(ctx: Context, recipient: AgentId, topic: str, payload: Any,
                exc: Exception) -> NoReturn:
    """Raise UncopyableState for a payload whose deep copy raised *exc*."""
    frame = ctx._frame
    raise payload_error(ctx._id, recipient, topic, payload, exc, phase=frame.phase,
                        step=frame.step, pickled=False) from exc


def _bad_topic(topic: object) -> NoReturn:
    raise ConfigError(f"topic must be a str, got {type(topic).__name__} {topic!r}")


def new_context(frame: Frame, agent_id: AgentId,
                inbox: list[Entry] | tuple[()], out: list[Entry]) -> Context:
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
