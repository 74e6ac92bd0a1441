"""Scenarios as data: a validated schema, a canonical JSON encoding and a SHA-256 content hash.

A scenario is a named list of interventions, each of which sets one knob at a
virtual time: for good (``value`` alone), for a while (``duration``: the old
value comes back after it), or gradually (``ramp``: the value moves in equal
steps over that long). A generated scenario also cites the passages of the
documents that motivate it, and says how it was made (``provenance``).

The file of an artifact is its canonical JSON (sorted keys, no spaces, UTF-8)
plus a ``hash`` field: the SHA-256 of the canonical JSON of everything else.
A run with a scenario is a pure function of (seed, config, scenario hash).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Collection
from pathlib import Path
from statistics import NormalDist
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from simulacra._util import describe_error
from simulacra.errors import ScenarioError

from ._knobs import Knobs, KnobValue

if TYPE_CHECKING:
    import random

__all__ = ["DISTRIBUTIONS", "GROUNDED_FIELDS", "SCENARIO_FORMAT", "Citation", "Distribution",
           "Draw", "Ground", "Intervention", "Scenario", "Trigger", "canonical_json",
           "load_scenario", "load_scenarios"]

#: The ``format`` field of every scenario artifact.
SCENARIO_FORMAT: Final = "simulacra.scenario.v1"

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def canonical_json(data: object) -> str:
    """The one encoding hashed and written: sorted keys, no spaces, UTF-8, no NaN."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


#: The fields of an intervention that a grounding may state the source of.
GROUNDED_FIELDS: Final = ("value", "at", "duration", "ramp")


class Ground(_Strict):
    """Where one field of an intervention comes from: words of a citation, or an assumption.

    Either *citation* (the index of one of the scenario's citations) and
    *text* (words inside that citation's quote that state the number, the
    time or the on/off event, e.g. ``"15 patients/h"``, ``"t=180-540"``,
    ``"down"``), or *assumption* (why the value was assumed, in words).
    ``simulacra scenarios check`` reads *text* again and requires the value
    to be one of its numbers (units and clock times normalised).
    """

    citation: Annotated[int, Field(ge=0)] | None = None
    text: Annotated[str, Field(min_length=1)] | None = None
    assumption: Annotated[str, Field(min_length=1)] | None = None

    def __init__(self, **data: Any) -> None:
        """Validate: a citation with its text, or an assumption, never both."""
        super().__init__(**data)
        cited = self.citation is not None or self.text is not None
        if cited == (self.assumption is not None) or (cited and (self.citation is None
                                                                 or self.text is None)):
            raise ValueError("a grounding is either {citation, text} (words of a citation's "
                             "quote) or {assumption} (why it was assumed)")


_Finite = Annotated[float, Field(allow_inf_nan=False)]

#: The parameters each distribution takes: (required, optional).
DISTRIBUTIONS: Final[dict[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
    "exponential": (("mean",), ("high",)),
    "uniform": (("low", "high"), ()),
    "normal": (("mean", "sd"), ("low", "high")),
    "triangular": (("low", "mode", "high"), ()),
}
_PARAMETERS = ("mean", "sd", "low", "mode", "high")


def _ints_are_numbers(value: object) -> object:
    # A JSON 30 is a number as good as 30.0 (strict mode refuses ints for floats).
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


class Distribution(_Strict):
    """A distribution a time is drawn from, with the replication's own random stream.

    ``{"dist": "exponential", "mean": 30}`` (optionally truncated above at
    ``high``), ``{"dist": "uniform", "low": 10, "high": 20}``,
    ``{"dist": "normal", "mean": 60, "sd": 10, "low": 0}`` (truncated to
    ``[low, high]``, either bound optional) or ``{"dist": "triangular",
    "low": 0, "mode": 5, "high": 20}``. A sample takes one uniform draw of the
    stream and maps it through the inverse of the (truncated) distribution
    function, so each sample costs exactly one draw.
    """

    dist: Literal["exponential", "uniform", "normal", "triangular"]
    mean: _Finite | None = None
    sd: _Finite | None = None
    low: _Finite | None = None
    mode: _Finite | None = None
    high: _Finite | None = None

    @field_validator(*_PARAMETERS, mode="before")
    @classmethod
    def _numbers(cls, value: object) -> object:
        return _ints_are_numbers(value)

    @model_validator(mode="after")
    def _parameters(self) -> Distribution:
        required, optional = DISTRIBUTIONS[self.dist]
        given = [name for name in _PARAMETERS if getattr(self, name) is not None]
        missing = [name for name in required if name not in given]
        extra = [name for name in given if name not in required + optional]
        takes = ", ".join(required) + (f" (and optionally {', '.join(optional)})"
                                       if optional else "")
        if missing or extra:
            article = "an" if self.dist[0] in "aeiou" else "a"
            raise ValueError(f"{article} {self.dist} distribution takes {takes}; got "
                             f"{', '.join(given) or 'none'}")
        low, high = self.low, self.high
        if self.mean is not None and self.dist == "exponential" and not self.mean > 0:
            raise ValueError(f"mean must be > 0, got {self.mean}")
        if self.sd is not None and not self.sd > 0:
            raise ValueError(f"sd must be > 0, got {self.sd}")
        if low is not None and high is not None and not low < high:
            raise ValueError(f"low must be < high, got low {low} and high {high}")
        if self.dist == "exponential" and high is not None and not high > 0:
            raise ValueError(f"high must be > 0, got {high}")
        if self.mode is not None and not (low or 0.0) <= self.mode <= (high or 0.0):
            raise ValueError(f"mode must be within [low, high], got {self.mode}")
        return self

    def support(self) -> tuple[float, float]:
        """The least and the greatest value a sample can take (either may be infinite)."""
        if self.dist == "exponential":
            return 0.0, math.inf if self.high is None else self.high
        return (-math.inf if self.low is None else self.low,
                math.inf if self.high is None else self.high)

    def sample(self, rng: random.Random) -> float:
        """One sample, from one ``rng.random()`` draw (inverse transform)."""
        u = rng.random()
        if self.dist == "uniform":
            low, high = self.support()
            return low + (high - low) * u
        if self.dist == "exponential":
            mean = float(self.mean)  # type: ignore[arg-type]  # required, checked
            if self.high is not None:
                u *= -math.expm1(-self.high / mean)  # F(high): truncated above
            return -mean * math.log1p(-u)
        if self.dist == "normal":
            normal = NormalDist(float(self.mean), float(self.sd))  # type: ignore[arg-type]
            first = 0.0 if self.low is None else normal.cdf(self.low)
            last = 1.0 if self.high is None else normal.cdf(self.high)
            p = min(max(first + (last - first) * u, 1e-300), 1.0 - 2.0 ** -53)
            value = normal.inv_cdf(p)
            low, high = self.support()
            return min(max(value, low), high)  # rounding never leaves the bounds
        low, mode, high = float(self.low), float(self.mode), float(self.high)  # type: ignore[arg-type]
        cut = (mode - low) / (high - low)
        if u < cut:
            return low + math.sqrt(u * (high - low) * (mode - low))
        return high - math.sqrt((1.0 - u) * (high - low) * (high - mode))

    def describe(self) -> str:
        """E.g. ``exponential(mean=30)``."""
        shown = ", ".join(f"{name}={getattr(self, name):g}" for name in _PARAMETERS
                          if getattr(self, name) is not None)
        return f"{self.dist}({shown})"


class Draw(_Strict):
    """Times of an intervention drawn when it is applied (see :class:`Intervention`).

    *delay*: the intervention starts at ``at`` plus a sample (a delay is never
    negative, so its distribution's support starts at 0 or later). *duration*:
    the knob holds the value for a sampled time, then goes back (in place of
    the intervention's ``duration``).
    """

    delay: Distribution | None = None
    duration: Distribution | None = None

    @model_validator(mode="after")
    def _something(self) -> Draw:
        if self.delay is None and self.duration is None:
            raise ValueError("a draw gives delay, duration or both")
        for name in ("delay", "duration"):
            dist: Distribution | None = getattr(self, name)
            if dist is not None and dist.support()[0] < 0:
                raise ValueError(f"{name}: a {dist.describe()} can be negative, and a {name} "
                                 "cannot; give low >= 0")
        return self


class Trigger(_Strict):
    """A condition on the model's state that an intervention waits for.

    The model names what may be watched: ``board.probe("queue_0", fn)`` on its
    :class:`KnobBoard`, *fn* returning a number. From the intervention's start
    the condition is evaluated every *every* time units of virtual time (at
    ``start``, ``start + every``, ``start + 2 * every``...); the intervention
    fires at the first evaluation where it holds, and its ``duration`` or
    ``ramp`` counts from there. Each evaluation is an ordinary event of the
    Sim, so it sees the state left by the events before it in the kernel's
    order: the same in every run with the same seed, under either kernel.
    The watch stops at *until* (or the ``end`` given to ``apply_scenario``);
    a condition that never holds by then never fires.
    """

    #: The name of a probe the model registered on its board.
    probe: str
    #: The condition holds when the probe's value is > above (and/or < below).
    above: _Finite | None = None
    below: _Finite | None = None
    #: The polling period in virtual time.
    every: Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
    #: The last time the condition is evaluated, or None (the run's end).
    until: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] | None = None

    @field_validator("above", "below", "every", "until", mode="before")
    @classmethod
    def _numbers(cls, value: object) -> object:
        return _ints_are_numbers(value)

    @field_validator("probe")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not value.isidentifier():
            raise ValueError(f"must be a probe's name (a Python identifier), got {value!r}")
        return value

    @model_validator(mode="after")
    def _condition(self) -> Trigger:
        if self.above is None and self.below is None:
            raise ValueError("a trigger needs a condition: above, below or both")
        return self

    def holds(self, value: float) -> bool:
        """Whether *value* meets the condition."""
        return ((self.above is None or value > self.above)
                and (self.below is None or value < self.below))

    def describe(self) -> str:
        """E.g. ``queue_0 > 50 (every 1)``."""
        parts = [f"> {self.above:g}" if self.above is not None else "",
                 f"< {self.below:g}" if self.below is not None else ""]
        return f"{self.probe} {' and '.join(p for p in parts if p)} (every {self.every:g})"


class Intervention(_Strict):
    """Set knob *knob* to *value* at virtual time *at*.

    With *duration*, the knob goes back to the value it had just before, that
    long after *at*. With *ramp* (numeric knobs), the value moves from the one
    it has at *at* to *value* in *ramp_steps* equal steps, the last at
    ``at + ramp``. *note* says why, in words.

    With *draw*, the start is *at* plus a delay, or the duration is, drawn
    from a :class:`Distribution` with the replication's own stream. With
    *when*, the intervention waits from its start for a :class:`Trigger` on
    the model's state and fires when it holds. Only :func:`apply_scenario`
    runs these (see :meth:`Scenario.check`).
    """

    knob: str
    at: Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
    value: KnobValue
    duration: Annotated[float, Field(gt=0.0, allow_inf_nan=False)] | None = None
    ramp: Annotated[float, Field(gt=0.0, allow_inf_nan=False)] | None = None
    ramp_steps: Annotated[int, Field(ge=1, le=1000)] = 10
    note: str = ""
    #: Where each of value, at, duration, ramp comes from (see :class:`Ground`); None: unstated.
    grounding: Annotated[dict[Literal["value", "at", "duration", "ramp"], Ground],
                         Field(strict=False)] | None = None
    #: Times drawn from distributions when the scenario is applied; None: fixed times.
    draw: Draw | None = None
    #: A condition on the model's state the intervention waits for; None: it fires at its start.
    when: Trigger | None = None

    @property
    def dynamic(self) -> bool:
        """Whether a time is drawn or a trigger waited for (only apply_scenario runs it)."""
        return self.draw is not None or self.when is not None

    @field_validator("at", "duration", "ramp", mode="before")
    @classmethod
    def _int_is_a_time(cls, value: object) -> object:
        # A JSON 100 is a time as good as 100.0 (strict mode refuses ints for floats).
        if isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value


class Citation(_Strict):
    """A passage of a source document that motivates a scenario, and the words it quotes."""

    #: The passage's id: ``FILE#START-END:SHA256PREFIX`` (see :mod:`~simulacra.scenarios`).
    passage: str
    #: Words that appear in the passage verbatim.
    quote: Annotated[str, Field(min_length=1)]


class Scenario(_Strict):
    """A validated scenario: a name, interventions, citations and provenance."""

    format: Literal["simulacra.scenario.v1"] = SCENARIO_FORMAT
    name: str
    description: str = ""
    #: The model whose knobs it sets (``module:ATTR`` or ``path.py:ATTR``), or "".
    target: str = ""
    # strict=False here only lets a JSON list stand for the tuple; items stay strict.
    interventions: Annotated[tuple[Intervention, ...], Field(strict=False)]
    citations: Annotated[tuple[Citation, ...], Field(strict=False)] = ()
    #: How it was made: the LLM model, the prompt's hash, the recording...
    provenance: dict[str, Any] = Field(default_factory=dict)

    def __init__(self, **data: Any) -> None:
        """Validate *data*; interventions and citations may be given as dicts.

        Raises:
            ScenarioError: A field does not fit the schema; the message names each.
        """
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ScenarioError(f"scenario {data.get('name', '?')!r}: not a valid scenario: "
                                f"{_problems(exc)}") from None
        if not self.interventions:
            raise ScenarioError(f"scenario {self.name!r}: not a valid scenario: interventions "
                                "is empty; a scenario makes at least one intervention")

    @field_validator("name")
    @classmethod
    def _slug(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("must be a slug: lower-case letters, digits and '-', "
                             "starting with a letter or digit, at most 63 characters")
        return value

    # -- identity ------------------------------------------------------------

    def content(self) -> dict[str, Any]:
        """Everything the hash covers, as plain data (JSON's types)."""
        data: dict[str, Any] = json.loads(canonical_json(self.model_dump(mode="json")))
        # An intervention without grounding is written as before grounding existed, so
        # the hashes of earlier artifacts stay what they were; a ground keeps its own keys.
        for item in data["interventions"]:
            if item.get("grounding") is None:
                item.pop("grounding", None)
            else:
                item["grounding"] = {field: {k: v for k, v in ground.items() if v is not None}
                                     for field, ground in item["grounding"].items()}
            # Draws and triggers likewise: absent unless given, and only the keys given.
            for key in ("draw", "when"):
                if item.get(key) is None:
                    item.pop(key, None)
            draw = item.get("draw")
            if draw is not None:
                item["draw"] = {name: {k: v for k, v in dist.items() if v is not None}
                                for name, dist in draw.items() if dist is not None}
            when = item.get("when")
            if when is not None:
                item["when"] = {k: v for k, v in when.items() if v is not None}
        return data

    @property
    def hash(self) -> str:
        """The SHA-256 of the canonical JSON of :meth:`content`."""
        return hashlib.sha256(canonical_json(self.content()).encode("utf-8")).hexdigest()

    @property
    def filename(self) -> str:
        """``<name>-<first 12 hex digits of the hash>.json``."""
        return f"{self.name}-{self.hash[:12]}.json"

    def artifact(self) -> str:
        """The file's text: the canonical JSON of the content plus its ``hash``, and a newline."""
        return canonical_json({**self.content(), "hash": self.hash}) + "\n"

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write the artifact to ``directory/<filename>`` atomically; return its path."""
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / self.filename
        partial = path.with_name(path.name + ".partial")
        partial.write_text(self.artifact(), encoding="utf-8")
        os.replace(partial, path)
        return path

    # -- against a model -------------------------------------------------------

    def check(self, knobs: Knobs, *, start: float = 0.0, end: float | None = None,
              dynamic: bool = False, probes: Collection[str] | None = None) -> None:
        """Check every intervention against *knobs*, before any run starts.

        Args:
            knobs: The model's knobs.
            start: The time the scenario is applied: no intervention starts before.
            end: The run's end, if known: no intervention starts after.
            dynamic: Whether the caller runs drawn times and triggers
                (:func:`apply_scenario` does; a society run expands a scenario
                into fixed changes before it starts, and cannot).
            probes: The probes the model registered (``KnobBoard.probe``), to
                check the triggers' names against; None: not checked.

        Raises:
            ScenarioError: An intervention names no knob, gives a value of the
                wrong type or out of range, starts before *start* or after
                *end*, ramps a knob that is not a number, draws or triggers
                where the caller cannot run them, or watches a probe the model
                lacks; the message names the scenario, the intervention (by
                index) and the knob.
        """
        for index, item in enumerate(self.interventions):
            where = f"scenario {self.name!r}, intervention {index}"
            knob = knobs.knob(item.knob, where)
            self._check_dynamic(item, f"{where} (knob {item.knob!r})", knob.action, dynamic,
                                probes)
            knob.check(item.value, where)
            if item.at < start:
                raise ScenarioError(f"{where} (knob {item.knob!r}): at={item.at} is before the "
                                    f"start of the run ({start})")
            if end is not None and item.at > end:
                raise ScenarioError(f"{where} (knob {item.knob!r}): at={item.at} is after the "
                                    f"end of the run ({end})")
            if item.ramp is not None and not knob.numeric:
                raise ScenarioError(f"{where}: knob {item.knob!r} is a {knob.type}; only a "
                                    "number can ramp")
            if knob.action and (item.ramp is not None or item.duration is not None):
                raise ScenarioError(f"{where}: knob {item.knob!r} is an action (each "
                                    "intervention acts once); it takes no duration or ramp")
            if item.ramp is not None and item.duration is not None:
                raise ScenarioError(f"{where} (knob {item.knob!r}): give ramp or duration, "
                                    "not both")

    @staticmethod
    def _check_dynamic(item: Intervention, where: str, action: bool, dynamic: bool,
                       probes: Collection[str] | None) -> None:
        if not item.dynamic:
            return
        what = "draws a time from a distribution" if item.when is None else \
            "waits for a trigger"
        if not dynamic:
            raise ScenarioError(f"{where}: it {what}, which only apply_scenario runs (a "
                                "kernel model's run or study); here every change must be "
                                "fixed before the run starts (a society run, a generated "
                                "scenario)")
        if item.when is not None and item.when.until is not None and item.when.until < item.at:
            raise ScenarioError(f"{where}: when.until={item.when.until} is before at="
                                f"{item.at}, so the condition would never be watched")
        if item.draw is not None and item.draw.duration is not None:
            if item.duration is not None or item.ramp is not None:
                raise ScenarioError(f"{where}: draw.duration replaces duration, and a ramp "
                                    "has no duration; give one of duration, draw.duration "
                                    "and ramp")
            if action:
                raise ScenarioError(f"{where}: knob {item.knob!r} is an action (each "
                                    "intervention acts once); it takes no draw.duration")
        if item.when is not None and probes is not None and item.when.probe not in probes:
            known = ", ".join(sorted(probes)) or "none (register one with board.probe)"
            raise ScenarioError(f"{where}: when.probe {item.when.probe!r} is not a probe of "
                                f"the model (its probes: {known})")

    def __repr__(self) -> str:
        return (f"Scenario({self.name!r}, {len(self.interventions)} interventions, "
                f"hash {self.hash[:12]})")

    __str__ = __repr__


_VALUE_TYPES = ("bool", "int", "float", "str")


def _problems(exc: ValidationError) -> str:
    """The errors, one per field: a knob value's four union branches become one line."""
    lines: list[str] = []
    merged: set[tuple[Any, ...]] = set()
    for error in exc.errors():
        loc = tuple(error.get("loc", ()))
        if len(loc) >= 2 and loc[-2] == "value" and loc[-1] in _VALUE_TYPES:
            if loc[:-1] not in merged:
                merged.add(loc[:-1])
                where = ".".join(map(str, loc[:-1]))
                lines.append(f"{where} must be a bool, int, float or str "
                             f"(got {error.get('input')!r})")
            continue
        # A validator's ValueError reads as pydantic's "Value error, <message>": keep the message.
        lines.append(describe_error(error).replace(" Value error, ", " ", 1))
    return "; ".join(lines)


def _parse(data: dict[str, Any], where: str) -> Scenario:
    try:
        return Scenario(**data)
    except ScenarioError as exc:
        _, _, problems = str(exc).partition("not a valid scenario: ")
        raise ScenarioError(f"{where}: not a valid scenario: {problems}") from None


def load_scenario(source: str | os.PathLike[str] | dict[str, Any], *,
                  require_hash: bool = True) -> Scenario:
    """Read a scenario artifact (a file, or its parsed JSON) and check its hash.

    A mapping without a ``hash`` (one written by hand) is accepted as it is;
    a file must carry the hash of its content, unless *require_hash* is false
    (a scenario file written by hand, for a run or a study: the hash is then
    computed from the content, and recorded where the run or study records it).
    A hash that is there must always match.

    Raises:
        ScenarioError: The file cannot be read, is not JSON, does not fit the
            schema, or its hash does not match its content (it was edited).
    """
    if isinstance(source, dict):
        data: Any = dict(source)
        where = f"scenario {data.get('name', '?')!r}"
        needs_hash = False
    else:
        path = Path(source)
        where = str(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ScenarioError(f"{where}: cannot read the scenario ({exc.strerror or exc})") \
                from None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ScenarioError(f"{where}: not a JSON scenario artifact ({exc})") from None
        needs_hash = require_hash
    if not isinstance(data, dict):
        raise ScenarioError(f"{where}: a scenario is a JSON object, got {type(data).__name__}")
    stated = data.pop("hash", None)
    scenario = _parse(data, where)
    if stated is None and needs_hash:
        raise ScenarioError(f"{where}: the artifact has no 'hash' field (an artifact written "
                            f"by Scenario.save or `simulacra scenarios generate` has one; "
                            f"its hash is {scenario.hash})")
    if stated is not None and stated != scenario.hash:
        raise ScenarioError(f"{where}: its hash {str(stated)[:12]}... does not match its "
                            f"content ({scenario.hash[:12]}...): the file was changed after "
                            "it was written")
    return scenario


def load_scenarios(directory: str | os.PathLike[str]) -> list[Scenario]:
    """Every ``*.json`` artifact of *directory*, checked, sorted by name then hash.

    A file written by hand may leave out the ``hash``: it is computed from the
    content (a study records it, and refuses to resume once it changes).

    Raises:
        ScenarioError: The directory does not exist or holds none, two
            artifacts share a name, or one of them fails :func:`load_scenario`.
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise ScenarioError(f"{str(folder)!r} is not a directory of scenario artifacts")
    scenarios = [load_scenario(path, require_hash=False)
                 for path in sorted(folder.glob("*.json"))]
    if not scenarios:
        raise ScenarioError(f"{str(folder)!r} holds no scenario artifact (*.json)")
    seen: dict[str, Scenario] = {}
    for scenario in scenarios:
        if scenario.name in seen:
            raise ScenarioError(f"{str(folder)!r}: two scenarios are called "
                                f"{scenario.name!r}; names must be unique in a study")
        seen[scenario.name] = scenario
    return sorted(scenarios, key=lambda s: (s.name, s.hash))
