"""Agents, agent ids, the data that builds an agent anywhere, and the no-sharing copy rule."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias, final

from simulacra.errors import AgentActionError, ConfigError

from ._copies import INITIAL_ADVICE, first_failure, state_error
from ._refs import object_ref, resolve_ref

__all__ = [
    "Agent",
    "AgentId",
    "AgentSpec",
    "check_agent_class",
    "check_id",
    "copy_initial_state",
    "is_immutable",
    "private_copy",
]

AgentId: TypeAlias = int | str
"""An agent's identity: an int or a str. All agents of one model use the same type,
so ids sort; their sorted order is the order of every tie in the model."""

#: Types whose values are immutable and hold nothing mutable: passed as they are.
_SCALARS: frozenset[type] = frozenset({type(None), bool, int, float, complex, str, bytes})


def is_immutable(value: object) -> bool:
    """Whether *value* can be shared between agents without copying.

    ``None``, ``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes``, and
    ``tuple``/``frozenset`` whose elements are (recursively) immutable. Exact
    types only: a subclass may add mutable attributes.
    """
    cls = type(value)
    if cls in _SCALARS:
        return True
    if cls is tuple or cls is frozenset:
        # Flat ones (the common case) in one C-level pass, nested ones element by element.
        return _SCALARS.issuperset(map(type, value)) or all(  # type: ignore[call-overload]
            type(v) in _SCALARS or is_immutable(v) for v in value)  # type: ignore[attr-defined]
    return False


def private_copy(value: Any) -> Any:
    """Return *value* itself if it is immutable (see :func:`is_immutable`), else a deep copy.

    This is the no-write-sharing rule: a payload or an initial state value that
    could be mutated is copied, so no two agents ever hold the same mutable object.
    A flat ``list``, ``dict`` or ``set`` of plain scalars (exact types) is
    copied shallowly: the same copy, without ``deepcopy``'s per-element
    dispatch (``Model.add`` copies every such neighbour list or counter).
    """
    cls = type(value)
    if cls in _SCALARS or is_immutable(value):
        return value
    if cls is list or cls is set:
        if _SCALARS.issuperset(map(type, value)):
            return value.copy()
    elif cls is dict and _SCALARS.issuperset(map(type, value)) and _SCALARS.issuperset(
            map(type, value.values())):
        return value.copy()
    return copy.deepcopy(value)


def copy_initial_state(cls: type, agent_id: object, state: Mapping[str, Any], *,
                       when: str) -> dict[str, Any]:
    """A private copy of initial *state* (see :func:`private_copy`), value by value.

    Raises:
        UncopyableState: A value cannot be deep-copied (a lock, an open file);
            names the agent, its class and the argument, and says what works.
    """
    try:
        return {key: private_copy(value) for key, value in state.items()}
    except Exception as exc:
        found = first_failure(state.items(), private_copy)
        raise state_error(agent_id, cls.__qualname__, found, exc, pickled=False, when=when,
                          advice=INITIAL_ADVICE, argument=True) from exc


def check_id(value: object, field: str = "id") -> AgentId:
    """Return *value* as an agent id (a plain int or str) or raise ConfigError."""
    if type(value) is int or type(value) is str:
        return value
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ConfigError(
            f"{field} must be an int or a str, got {type(value).__name__} {value!r}"
            + (" (bool is ambiguous: True == 1)" if isinstance(value, bool) else "")
        )
    return int(value) if isinstance(value, int) else str.__str__(value)


class Agent:
    """Base class of agents: state in attributes, actions as plain methods.

    Subclass it, take the initial state as keyword arguments and call
    ``super().__init__(id)`` first; write each action as a method that takes
    the phase :class:`Context`::

        class Bank(Agent):
            def __init__(self, id: int, *, capital: float, lenders: tuple[int, ...]) -> None:
                super().__init__(id)
                self.capital = capital
                self.lenders = lenders
                self.defaulted = False

            def send_state(self, ctx: Context) -> None:
                ctx.broadcast("state", self.defaulted, to=self.lenders)

    An agent never sees another agent: everything it learns comes through its
    inbox, and everything it tells others goes out as a message. Its state is
    everything in ``vars(agent)``; that is what state digests hash and what
    results report, so keep it plain data (numbers, strings, tuples, lists,
    dicts, sets) or give other types a ``__trace__`` method.

    Agents are built where they run (in a worker process, for the process
    backend) from an :class:`AgentSpec`, so the class must be importable by
    its module and qualified name.

    Args:
        id: The agent's id, an int or a str.
    """

    #: The agent's id. Never reassign it.
    id: AgentId

    def __init__(self, id: AgentId) -> None:
        self.id = id

    def __repr__(self) -> str:
        return f"<{type(self).__qualname__} {self.id!r}>"


def check_agent_class(cls: object, field: str = "cls") -> str:
    """Return the ``module:qualname`` reference of an importable Agent subclass.

    Raises:
        ConfigError: *cls* is not a subclass of :class:`Agent`, or cannot be
            imported by name.
    """
    if not isinstance(cls, type) or not issubclass(cls, Agent):
        raise ConfigError(
            f"{field} must be a subclass of simulacra.Agent, got {type(cls).__name__} {cls!r}"
        )
    return object_ref(cls, field)


#: Agent classes by reference, resolved once per process.
_CLASSES: dict[str, type[Agent]] = {}


def _resolve_class(ref: str) -> type[Agent]:
    cls = _CLASSES.get(ref)
    if cls is None:
        found = resolve_ref(ref, "AgentSpec.cls_path")
        if not isinstance(found, type) or not issubclass(found, Agent):
            raise ConfigError(
                f"AgentSpec.cls_path must name a subclass of simulacra.Agent, "
                f"but {ref!r} is {type(found).__name__} {found!r}"
            )
        cls = _CLASSES[ref] = found
    return cls


@final
@dataclass(frozen=True, slots=True)
class AgentSpec:
    """The data that builds one agent, in any process: an importable class, an id, a state.

    ``spec.build()`` imports the class and calls ``cls(id, **state)``. Values of
    *state* that are not immutable (see :func:`is_immutable`) are deep-copied
    for each build, so agents added with one shared list never share it.

    Args:
        cls_path: ``"module:qualname"`` of a subclass of :class:`Agent`.
        id: The agent's id.
        state: Keyword arguments of the class's ``__init__`` (a plain dict, so
            that specs pickle; treat it as read-only).
    """

    cls_path: str
    id: AgentId
    state: Mapping[str, Any] = field(default_factory=dict)

    def build(self) -> Agent:
        """Construct the agent.

        Raises:
            ConfigError: The class cannot be imported, or did not set ``id``
                (its ``__init__`` must call ``super().__init__(id)``).
            AgentActionError: The class's ``__init__`` raised; the exception is
                chained.
            UncopyableState: A state value cannot be deep-copied.
        """
        cls = _CLASSES.get(self.cls_path) or _resolve_class(self.cls_path)
        state = self.state  # passed as **state: the agent gets its own dict either way
        for value in state.values():
            if type(value) not in _SCALARS and not is_immutable(value):
                state = copy_initial_state(cls, self.id, state,
                                           when="when the agent was built for a run")
                break
        try:
            agent = cls(self.id, **state)
        except Exception as exc:
            error = AgentActionError(
                f"building agent {self.id!r} ({cls.__qualname__}) raised "
                f"{type(exc).__name__}: {exc}"
            )
            error.agent, error.phase = self.id, "__init__"
            raise error from exc
        if _own_id(agent) != self.id:
            raise ConfigError(
                f"{cls.__qualname__}.__init__ must call super().__init__(id) and keep "
                f"self.id == id; agent {self.id!r} has id {getattr(agent, 'id', None)!r}"
            )
        return agent


_MISSING = object()

#: Per agent class: whether ``getattr(agent, "id")`` can only come from the instance
#: (no class attribute ``id``, no ``__getattr__``, the default ``__getattribute__``).
_PLAIN_ID: dict[type, bool] = {}


def _own_id(agent: Agent) -> object:
    """``vars(agent).get("id", _MISSING)``, without calling ``vars`` where it is the same.

    ``vars()`` turns CPython's compact attribute storage into a real dict, for
    good; every attribute access of that agent is slower afterwards (about 3x
    on 3.11), in every action of the run.
    """
    cls = type(agent)
    plain = _PLAIN_ID.get(cls)
    if plain is None:
        plain = _PLAIN_ID[cls] = (cls.__getattribute__ is object.__getattribute__
                                  and not hasattr(cls, "__getattr__") and not hasattr(cls, "id"))
    if plain:
        return getattr(agent, "id", _MISSING)
    return vars(agent).get("id", _MISSING)
