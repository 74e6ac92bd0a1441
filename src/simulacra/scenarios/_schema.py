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
import os
import re
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from simulacra._util import describe_error
from simulacra.errors import ScenarioError

from ._knobs import Knobs, KnobValue

__all__ = ["GROUNDED_FIELDS", "SCENARIO_FORMAT", "Citation", "Ground", "Intervention",
           "Scenario", "canonical_json", "load_scenario", "load_scenarios"]

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


class Intervention(_Strict):
    """Set knob *knob* to *value* at virtual time *at*.

    With *duration*, the knob goes back to the value it had just before, that
    long after *at*. With *ramp* (numeric knobs), the value moves from the one
    it has at *at* to *value* in *ramp_steps* equal steps, the last at
    ``at + ramp``. *note* says why, in words.
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

    def check(self, knobs: Knobs, *, start: float = 0.0, end: float | None = None) -> None:
        """Check every intervention against *knobs*, before any run starts.

        Raises:
            ScenarioError: An intervention names no knob, gives a value of the
                wrong type or out of range, starts before *start* or after
                *end*, or ramps a knob that is not a number; the message names
                the scenario, the intervention (by index) and the knob.
        """
        for index, item in enumerate(self.interventions):
            where = f"scenario {self.name!r}, intervention {index}"
            knob = knobs.knob(item.knob, where)
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
        lines.append(describe_error(error))
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
