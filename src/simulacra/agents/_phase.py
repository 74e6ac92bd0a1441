"""Phases and sequences: which action runs on which agents, in which order."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any, TypeAlias, final, overload

from simulacra.errors import ConfigError

from ._agent import Agent
from ._refs import object_ref, resolve_ref

__all__ = ["Action", "Phase", "Sequence"]

Action: TypeAlias = Callable[[Any, Any], object]
"""A phase action: called as ``action(agent, ctx)``. An unbound method such as
``Bank.send_state`` or a module-level function ``f(agent, ctx)``."""


def _owner_class(action: Callable[..., object]) -> type[Agent] | None:
    """The Agent subclass whose body defines *action*, or ``None`` for a plain function."""
    qualname: str = action.__qualname__
    owner_name, dot, _ = qualname.rpartition(".")
    if not dot:
        return None
    owner = resolve_ref(f"{action.__module__}:{owner_name}", "action")
    if isinstance(owner, type) and issubclass(owner, Agent):
        return owner
    return None


def _check_only(only: object) -> tuple[type[Agent], ...]:
    classes = only if isinstance(only, tuple | list) else (only,)
    if not classes:
        raise ConfigError("only must be an Agent subclass or a non-empty tuple of them, got ()")
    for cls in classes:
        if not isinstance(cls, type) or not issubclass(cls, Agent):
            raise ConfigError(
                f"only must be an Agent subclass or a tuple of them, got {type(cls).__name__} "
                f"{cls!r}"
            )
        object_ref(cls, "only")
    return tuple(classes)


def _check_signature(action: Callable[..., object], name: str) -> None:
    try:
        signature = inspect.signature(action)
    except (TypeError, ValueError):  # some builtins have no signature: let them be
        return
    try:
        signature.bind(None, None)
    except TypeError:
        raise ConfigError(
            f"phase action {name} must accept (agent, ctx) (for a method: (self, ctx)), "
            f"but its signature is {signature}"
        ) from None


def _restore(action: Action, only: tuple[type[Agent], ...] | None, receivers_only: bool,
             name: str) -> Phase:
    return Phase(action, only=only, receivers_only=receivers_only, name=name)


@final
class Phase:
    """One phase of a step: an action and the agents it runs on.

    The action runs once on every eligible agent, in id order on the
    reference backend (concurrently elsewhere: agents of one phase never
    affect each other, since what they send is delivered only at the next
    phase boundary).

    Eligible agents are, by default, the instances of the class whose body
    defines the action (``Bank.send_state`` runs on banks, including
    subclasses of ``Bank``), or every agent for a module-level function.

    Args:
        action: An unbound method (``Bank.send_state``) or a module-level
            function ``f(agent, ctx)``. It must be importable by module and
            qualified name, so that worker processes can find it: lambdas,
            nested functions and bound methods are refused.
        only: Run on instances of this Agent subclass (or tuple of them)
            instead of the default.
        receivers_only: Run only on agents that received at least one message
            at the last phase boundary (the Pregel rule: quiet agents sleep).
        name: The phase's name in errors and in ``ctx.phase``; defaults to the
            action's qualified name.

    Raises:
        ConfigError: *action* is not an importable callable taking
            ``(agent, ctx)``, or *only* is not made of importable Agent
            subclasses.
    """

    __slots__ = ("_action", "_name", "_only", "_receivers_only")

    _action: Action
    _only: tuple[type[Agent], ...] | None
    _receivers_only: bool
    _name: str

    def __init__(self, action: Action, *, only: type[Agent] | tuple[type[Agent], ...] | None = None,
                 receivers_only: bool = False, name: str | None = None) -> None:
        if isinstance(action, Phase | Sequence):
            raise ConfigError(f"action must be a function or an unbound method, got {action!r}")
        if not callable(action):
            raise ConfigError(
                f"action must be a function or an unbound method, got {type(action).__name__} "
                f"{action!r}"
            )
        object_ref(action, "action")
        if not isinstance(receivers_only, bool):
            raise ConfigError(
                f"receivers_only must be a bool, got {type(receivers_only).__name__} "
                f"{receivers_only!r}"
            )
        given: object = name
        if given is None:
            name = action.__qualname__
        elif not isinstance(given, str) or not given:
            raise ConfigError(
                f"name must be a non-empty str, got {type(given).__name__} {given!r}"
            )
        else:
            name = given
        _check_signature(action, name)
        object.__setattr__(self, "_action", action)
        classes = _owner_only(action) if only is None else _check_only(only)
        object.__setattr__(self, "_only", classes)
        object.__setattr__(self, "_receivers_only", receivers_only)
        object.__setattr__(self, "_name", name)

    @property
    def action(self) -> Action:
        """The action, called as ``action(agent, ctx)``."""
        return self._action

    @property
    def only(self) -> tuple[type[Agent], ...] | None:
        """The classes whose instances the phase runs on, or ``None`` for every agent."""
        return self._only

    @property
    def receivers_only(self) -> bool:
        """Whether only agents that received a message at the last boundary run."""
        return self._receivers_only

    @property
    def name(self) -> str:
        """The phase's name."""
        return self._name

    def applies_to(self, agent: Agent) -> bool:
        """Whether *agent*'s class makes it eligible (``receivers_only`` aside)."""
        return self._only is None or isinstance(agent, self._only)

    def _key(self) -> tuple[object, ...]:
        return (self._action, self._only, self._receivers_only, self._name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Phase):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        # Only for dict keys inside one process: functions hash by identity.
        return hash(self._key())

    def __reduce__(self) -> tuple[Any, ...]:
        # Functions and classes pickle by reference (module and qualname).
        return (_restore, (self._action, self._only, self._receivers_only, self._name))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Phase is immutable; cannot set {name!r}")

    def __repr__(self) -> str:
        parts = [self._name]
        if self._only is not None:
            parts.append("only=" + "|".join(c.__qualname__ for c in self._only))
        if self._receivers_only:
            parts.append("receivers_only")
        return f"Phase({', '.join(parts)})"


def _owner_only(action: Action) -> tuple[type[Agent], ...] | None:
    owner = _owner_class(action)
    return None if owner is None else (owner,)


@final
class Sequence:
    """The phases of one step, in order: ``Sequence(Bank.send_state, Bank.check_solvency)``.

    Messages sent in phase N are in their recipients' inboxes when phase N+1
    begins (and the last phase's messages when the next step's first phase
    begins); a phase's inboxes are replaced at each boundary.

    Args:
        *items: Actions (wrapped in a default :class:`Phase`), phases, and
            sequences, which are flattened: ``Sequence(Sequence(a, b), c)``
            equals ``Sequence(a, b, c)``.

    Raises:
        ConfigError: No items, or an item is not an importable action, a
            Phase or a Sequence.
    """

    __slots__ = ("_phases",)

    _phases: tuple[Phase, ...]

    def __init__(self, *items: Action | Phase | Sequence) -> None:
        phases: list[Phase] = []
        for item in items:
            if isinstance(item, Sequence):
                phases.extend(item._phases)
            elif isinstance(item, Phase):
                phases.append(item)
            else:
                phases.append(Phase(item))
        if not phases:
            raise ConfigError("Sequence needs at least one action or phase, got none")
        object.__setattr__(self, "_phases", tuple(phases))

    @classmethod
    def of(cls, value: Action | Phase | Sequence) -> Sequence:
        """Return *value* if it is a Sequence, else a one-item Sequence of it."""
        return value if isinstance(value, Sequence) else cls(value)

    @property
    def phases(self) -> tuple[Phase, ...]:
        """The flattened phases, in order."""
        return self._phases

    def __iter__(self) -> Iterator[Phase]:
        return iter(self._phases)

    def __len__(self) -> int:
        return len(self._phases)

    @overload
    def __getitem__(self, index: int) -> Phase: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Phase, ...]: ...
    def __getitem__(self, index: int | slice) -> Phase | tuple[Phase, ...]:
        return self._phases[index]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return self._phases == other._phases

    def __hash__(self) -> int:
        return hash(self._phases)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Sequence is immutable; cannot set {name!r}")

    def __repr__(self) -> str:
        return f"Sequence({', '.join(repr(p) for p in self._phases)})"
