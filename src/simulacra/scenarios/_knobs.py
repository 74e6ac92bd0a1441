"""Knobs: the named, typed parameters a model lets change during a run.

A model declares its knobs once (a :class:`Knobs`); each run holds their
current values on a :class:`KnobBoard`, which the model reads when it needs a
value (``board["charge_rate"]``) or watches for changes
(``board.watch("fleet_size", resize)``). An intervention (see
:mod:`simulacra.scenarios`) sets a knob at a virtual time; the board records
each change in the Sim's trace, so two runs with the same scenario have the
same trace, and a run without one records nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, final

from simulacra._util import did_you_mean
from simulacra.errors import ScenarioError

if TYPE_CHECKING:
    from simulacra.core import Sim

__all__ = ["KNOB_TYPES", "Knob", "KnobBoard", "KnobValue", "Knobs"]

#: A knob's value: plain data that JSON keeps exactly.
KnobValue = bool | int | float | str

#: The types a knob may have, by name.
KNOB_TYPES: Final[dict[str, type]] = {"float": float, "int": int, "bool": bool, "str": str}


@final
@dataclass(frozen=True, slots=True)
class Knob:
    """One parameter that may change during a run.

    Args:
        name: How scenarios name it (a Python identifier).
        type: ``"float"``, ``"int"``, ``"bool"`` or ``"str"``.
        default: Its value when no intervention has set it.
        low: The least value a number may take (inclusive), or None.
        high: The greatest value a number may take (inclusive), or None.
        choices: The values a ``str`` (or ``int``) knob may take, or None.
        doc: What it means, in a line (scenario generation shows it to the LLM).
        unit: The unit of a number ("per hour", "chargers"), or "".
        action: An action knob: each intervention is a one-off act (inject a
            post, interview agents), not a value that holds, so it takes no
            ``duration`` and no ``ramp``; a society's world turns it into events.

    Raises:
        ScenarioError: The declaration itself is inconsistent.
    """

    name: str
    type: str
    default: KnobValue
    low: float | None = None
    high: float | None = None
    choices: tuple[KnobValue, ...] | None = None
    doc: str = ""
    unit: str = ""
    action: bool = False

    def __post_init__(self) -> None:
        if not str(self.name).isidentifier():
            raise ScenarioError(f"Knob name must be a Python identifier, got {self.name!r}")
        if self.type not in KNOB_TYPES:
            raise ScenarioError(
                f"knob {self.name!r}: type must be one of {', '.join(KNOB_TYPES)}, "
                f"got {self.type!r}")
        if self.choices is not None:
            object.__setattr__(self, "choices", tuple(self.choices))
        self.check(self.default, f"knob {self.name!r} default")

    @property
    def numeric(self) -> bool:
        """Whether the knob is an int or a float (and can be ramped)."""
        return self.type in ("int", "float")

    def check(self, value: object, where: str) -> KnobValue:
        """Return *value* as this knob's type, or raise naming *where*.

        An int is accepted for a float knob (and returned as a float); a bool
        is never a number.

        Raises:
            ScenarioError: *value* has the wrong type, is out of range, or is
                not one of the choices.
        """
        if self.type == "float":
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            if ok and not math.isfinite(value):  # type: ignore[arg-type]
                ok = False
            expected = "a finite number"
        elif self.type == "int":
            ok = isinstance(value, int) and not isinstance(value, bool)
            expected = "an int"
        elif self.type == "bool":
            ok = isinstance(value, bool)
            expected = "true or false"
        else:
            ok = isinstance(value, str)
            expected = "a str"
        if not ok:
            raise ScenarioError(
                f"{where}: knob {self.name!r} takes {expected}, got "
                f"{type(value).__name__} {value!r}")
        result: KnobValue = (float(value) if self.type == "float"  # type: ignore[arg-type]
                             else value)  # type: ignore[assignment]
        if self.numeric:
            number = float(result)
            if self.low is not None and number < self.low:
                raise ScenarioError(
                    f"{where}: knob {self.name!r} must be >= {self.low}, got {value!r}")
            if self.high is not None and number > self.high:
                raise ScenarioError(
                    f"{where}: knob {self.name!r} must be <= {self.high}, got {value!r}")
        if self.choices is not None and result not in self.choices:
            known = ", ".join(map(repr, self.choices))
            raise ScenarioError(
                f"{where}: knob {self.name!r} must be one of {known}, got {value!r}")
        return result

    def describe(self) -> dict[str, Any]:
        """The declaration as plain data (for an LLM prompt, a report or a manifest)."""
        data: dict[str, Any] = {"name": self.name, "type": self.type, "default": self.default}
        for key in ("low", "high", "choices"):
            value = getattr(self, key)
            if value is not None:
                data[key] = list(value) if key == "choices" else value
        if self.doc:
            data["doc"] = self.doc
        if self.unit:
            data["unit"] = self.unit
        if self.action:
            data["action"] = True
        return data


@final
class Knobs(Mapping[str, Knob]):
    """The knobs a model declares, by name, in declaration order.

    ::

        KNOBS = Knobs(
            Knob("demand", "float", 1.0, low=0.0, doc="demand multiplier"),
            Knob("station_0", "bool", True, doc="station 0 is up"),
        )

    Raises:
        ScenarioError: Two knobs share a name, or an item is not a Knob.
    """

    __slots__ = ("_knobs",)

    def __init__(self, *knobs: Knob) -> None:
        table: dict[str, Knob] = {}
        for knob in knobs:
            if not isinstance(knob, Knob):
                raise ScenarioError(f"Knobs takes Knob objects, got {type(knob).__name__}")
            if knob.name in table:
                raise ScenarioError(f"knob {knob.name!r} is declared twice")
            table[knob.name] = knob
        self._knobs = table

    def __getitem__(self, name: str) -> Knob:
        return self._knobs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._knobs)

    def __len__(self) -> int:
        return len(self._knobs)

    def knob(self, name: str, where: str) -> Knob:
        """The knob called *name*, or ScenarioError naming *where* and the closest name."""
        found = self._knobs.get(name)
        if found is None:
            hint = did_you_mean(name, self._knobs)
            raise ScenarioError(
                f"{where}: the model has no knob {name!r} (its knobs: "
                f"{', '.join(self._knobs) or 'none'}){hint}")
        return found

    def describe(self) -> list[dict[str, Any]]:
        """Every declaration as plain data, in order."""
        return [knob.describe() for knob in self._knobs.values()]

    def __repr__(self) -> str:
        return f"Knobs({', '.join(self._knobs)})"


@dataclass(slots=True)
class _Watchers:
    callbacks: list[Callable[[KnobValue, KnobValue], None]] = field(default_factory=list)


@final
class KnobBoard:
    """The current value of each knob in one run, recorded in the Sim's trace when set.

    Args:
        knobs: The model's declarations.
        sim: The Sim whose trace records each change (``sim.record``) and
            whose clock stamps it; None for a board outside a simulation.
        values: Start values other than the defaults (checked).

    Raises:
        ScenarioError: A start value names no knob or does not fit it.
    """

    __slots__ = ("_knobs", "_probes", "_sim", "_values", "_watchers", "changes")

    def __init__(self, knobs: Knobs, sim: Sim | None = None,
                 values: Mapping[str, object] | None = None) -> None:
        self._knobs = knobs
        self._sim = sim
        self._values: dict[str, KnobValue] = {name: k.default for name, k in knobs.items()}
        for name, value in (values or {}).items():
            knob = knobs.knob(name, "start values")
            self._values[name] = knob.check(value, "start values")
        self._watchers: dict[str, _Watchers] = {}
        #: What a trigger may watch: name -> a function of no arguments giving a number.
        self._probes: dict[str, Callable[[], float]] = {}
        #: Every change so far: ``(time, knob, old, new, source)``, in order.
        self.changes: list[tuple[float, str, KnobValue, KnobValue, str]] = []

    @property
    def knobs(self) -> Knobs:
        """The declarations."""
        return self._knobs

    @property
    def sim(self) -> Sim | None:
        """The Sim whose trace records the changes."""
        return self._sim

    def __getitem__(self, name: str) -> KnobValue:
        return self._values[self._knobs.knob(name, "KnobBoard").name]

    def values(self) -> dict[str, KnobValue]:
        """A copy of every current value."""
        return dict(self._values)

    def watch(self, name: str, callback: Callable[[KnobValue, KnobValue], None]) -> None:
        """Call ``callback(old, new)`` each time knob *name* changes (in the setter's process)."""
        self._knobs.knob(name, "KnobBoard.watch")
        self._watchers.setdefault(name, _Watchers()).callbacks.append(callback)

    def probe(self, name: str, read: Callable[[], float]) -> None:
        """Let scenario triggers watch ``read()``, a number of the model's state, as *name*.

        E.g. ``board.probe("queue_0", lambda: len(stations[0].queue))``. Register
        probes before :func:`~simulacra.scenarios.apply_scenario`, which checks
        the triggers' names against them. *read* must not change the model: it
        is called at each evaluation of a trigger.

        Raises:
            ScenarioError: *name* is not an identifier, is taken, or *read* is
                not callable.
        """
        if not str(name).isidentifier():
            raise ScenarioError(f"KnobBoard.probe: name must be a Python identifier, got "
                                f"{name!r}")
        if name in self._probes:
            raise ScenarioError(f"KnobBoard.probe: a probe {name!r} is registered already")
        if not callable(read):
            raise ScenarioError(f"KnobBoard.probe({name!r}, read): read must be a function of "
                                f"no arguments returning a number, got {type(read).__name__}")
        self._probes[name] = read

    @property
    def probes(self) -> tuple[str, ...]:
        """The names of the registered probes, in registration order."""
        return tuple(self._probes)

    def read(self, name: str) -> float:
        """The current value of probe *name*.

        Raises:
            ScenarioError: No such probe, or it gave something other than a
                finite number.
        """
        read = self._probes.get(name)
        if read is None:
            known = ", ".join(self._probes) or "none"
            raise ScenarioError(f"KnobBoard.read: no probe {name!r} (the probes: {known})")
        value: object = read()
        if not isinstance(value, int | float) or isinstance(value, bool) or \
                not math.isfinite(value):
            raise ScenarioError(f"probe {name!r} gave {type(value).__name__} {value!r}; "
                                "expected a finite number")
        return float(value)

    def bind_capacity(self, name: str, resource: Any) -> None:
        """Make knob *name* the capacity of *resource*: now, and at each change.

        The resource takes the knob's current value at once, and each later
        change at its virtual time (``resource.capacity = new``): a rise grants
        waiting requests at once, a cut lets the requests in service finish
        (see :attr:`simulacra.Resource.capacity`). An intervention with a
        ``duration`` thus opens or closes slots for a window.

        Raises:
            ScenarioError: No such knob; the knob is not an ``int`` knob with
                ``low >= 1`` (so that every value a scenario may give it is a
                capacity); *resource* is not a Resource, or belongs to
                another Sim than the board.
        """
        # Duck-typed: resources is this package's sibling (layer 2), so it is not imported.
        where = "KnobBoard.bind_capacity"
        knob = self._knobs.knob(name, where)
        if knob.type != "int" or knob.low is None or knob.low < 1:
            raise ScenarioError(
                f"{where}: knob {name!r} must be an int knob with low >= 1 to be a "
                f"capacity, got type {knob.type!r} with low {knob.low!r}")
        held = getattr(type(resource), "capacity", None)
        if not isinstance(held, property) or held.fset is None:
            raise ScenarioError(f"{where}(resource=...): expected a Resource (or a "
                                f"PriorityResource...), whose capacity can be set; got "
                                f"{type(resource).__name__}")
        if self._sim is not None and getattr(resource, "sim", None) is not self._sim:
            raise ScenarioError(f"{where}: the resource belongs to another Sim than the "
                                "board; make both with the same Sim")
        value = self._values[name]
        if resource.capacity != value:
            resource.capacity = value  # an int, checked by the knob

        def follow(_old: KnobValue, new: KnobValue) -> None:
            resource.capacity = new

        self.watch(name, follow)

    def set(self, name: str, value: object, *, source: str = "") -> KnobValue:
        """Set knob *name* to *value* now; record it; call its watchers. Returns the old value.

        Raises:
            ScenarioError: No such knob, or *value* does not fit it.
        """
        where = source or "KnobBoard.set"
        knob = self._knobs.knob(name, where)
        new = knob.check(value, where)
        old = self._values[name]
        self._values[name] = new
        now = self._sim.now if self._sim is not None else 0.0
        self.changes.append((now, name, old, new, source))
        if self._sim is not None:
            self._sim.record("knob", name, {"from": old, "to": new, "source": source})
        watchers = self._watchers.get(name)
        if watchers is not None and old != new:
            for callback in watchers.callbacks:
                callback(old, new)
        return old

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"KnobBoard({shown})"


def knobs_of(declared: Iterable[Knob] | Knobs) -> Knobs:
    """*declared* as a Knobs (a list or tuple of Knob is accepted)."""
    return declared if isinstance(declared, Knobs) else Knobs(*declared)
