"""Run configs: layered YAML (built-in defaults, a file, dotted overrides) checked with pydantic.

::

    config = load_config("examples/social/config.yaml", ["sim.steps=20", "sim.agents=200"])
    config.sim.engine.mode          # "threads"
    config.get("sim.llm.provider")  # "scripted"

The layers, each overriding the one before: :data:`DEFAULTS` (built into the
package), the file, then ``key.path=value`` overrides (values read as YAML:
``20`` is an int, ``true`` a bool, ``null`` None, anything else a string).
Every problem is a :class:`~simulacra.ConfigError` that names the dotted field.
pydantic is imported only when a config is read.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any, Final, final

from simulacra._util import describe_error, os_problem, yaml_problem
from simulacra.errors import ConfigError

__all__ = ["DEFAULTS", "STEP_ENGINES_BUILT_IN", "RunConfig", "apply_overrides", "load_config",
           "parse_config"]

#: The names ``sim.engine.step.built_in`` takes: the round-based engine, and the
#: event-driven one (registered by its own module).
STEP_ENGINES_BUILT_IN: Final = ("round", "async_event")

#: The built-in first layer of every run config.
DEFAULTS: Final[Mapping[str, Any]] = {
    "name": "run",
    "seed": 0,
    "sim": {
        "steps": 5,
        "agents": 50,
        "world": {"factory": None},
        "engine": {
            "step": {"built_in": "round", "options": {}},
            "mode": "threads",
            "concurrency": 64,
            "flows": 1,
            "participation": 1.0,
            "resolution": "seeded",
            "fail_fast": False,
        },
        "llm": {
            "provider": "scripted",
            "model": "scripted",
            "seed": None,
            "base_url": None,
            "api_key_env": "OPENAI_API_KEY",
            "temperature": 0.7,
            "max_tokens": 256,
            "timeout": 60.0,
            "max_retries": 5,
            "backoff_base": 0.5,
            "concurrency": 64,
            "latency": {"base": 0.2, "prefill_per_token": 0.0002, "decode_per_token": 0.02,
                        "noise_sigma": 0.1, "min_duration": 0.1},
            "pricing": {"prompt_per_mtok": 0.0, "completion_per_mtok": 0.0},
        },
        "agents_memory": {"max_tokens": None, "policy": "drop_oldest"},
    },
    "run": {"out": None, "record": True, "checkpoint_every": None,
            "checkpoint_every_time": None, "max_consecutive_provider_failures": 3,
            "max_failed_fraction": 0.5, "preflight": True, "memory_limit_gb": None,
            "budget": {"tokens": None, "cost": None}, "trace": {"otel": "off"}},
}


@cache
def _schema() -> Any:
    """The pydantic model of a run config (built on first use)."""
    from typing import Literal  # noqa: PLC0415

    from pydantic import (  # noqa: PLC0415  (lazy: heavy import)
        BaseModel,
        ConfigDict,
        Field,
        field_validator,
    )

    from ._rounds import canonical_mode  # noqa: PLC0415

    class _Strict(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    class Step(_Strict):
        built_in: Literal["round", "async_event"] = "round"
        options: dict[str, Any] = Field(default_factory=dict)

    class Engine(_Strict):
        step: Step = Field(default_factory=Step)
        mode: Literal["sequential", "threads", "asyncio"] = "threads"

        @field_validator("mode", mode="before")
        @classmethod
        def _alias(cls, value: object) -> object:
            return canonical_mode(value)
        concurrency: int = Field(default=64, ge=1)
        flows: int = Field(default=1, ge=1)
        participation: float = Field(default=1.0, gt=0.0, le=1.0)
        resolution: Literal["id", "seeded"] = "seeded"
        fail_fast: bool = False

    class Latency(_Strict):
        base: float = Field(default=0.2, ge=0.0)
        prefill_per_token: float = Field(default=0.0002, ge=0.0)
        decode_per_token: float = Field(default=0.02, ge=0.0)
        noise_sigma: float = Field(default=0.1, ge=0.0)
        min_duration: float = Field(default=0.1, gt=0.0)

    class Pricing(_Strict):
        #: Money per million prompt tokens (any currency; 0: not priced).
        prompt_per_mtok: float = Field(default=0.0, ge=0.0)
        #: Money per million completion tokens.
        completion_per_mtok: float = Field(default=0.0, ge=0.0)

    class Budget(_Strict):
        #: Stop before a step would take the run's tokens (prompt + completion) past this.
        tokens: int | None = Field(default=None, ge=1)
        #: Stop before a step would take the run's cost past this (see sim.llm.pricing).
        cost: float | None = Field(default=None, gt=0.0)

    class LLM(_Strict):
        provider: Literal["scripted", "openai_compatible"] = "scripted"
        model: str = "scripted"
        seed: int | str | None = None
        base_url: str | None = None
        api_key_env: str = "OPENAI_API_KEY"
        temperature: float = Field(default=0.7, ge=0.0)
        max_tokens: int | None = Field(default=256, ge=1)
        timeout: float = Field(default=60.0, gt=0.0)
        max_retries: int = Field(default=5, ge=0)
        #: Seconds before the first retry; it doubles per retry (with jitter).
        backoff_base: float = Field(default=0.5, ge=0.0)
        concurrency: int = Field(default=64, ge=1)
        latency: Latency = Field(default_factory=Latency)
        pricing: Pricing = Field(default_factory=Pricing)

    class World(BaseModel):
        model_config = ConfigDict(extra="allow", frozen=True)
        factory: str | None = None

    class AgentsMemory(_Strict):
        #: Each agent's prompt memory budget in tokens; None: no memory (checked
        #: in parse_config, whose message shows the value: pydantic's hides a "token").
        max_tokens: Any = None
        policy: Literal["drop_oldest", "summarise"] = "drop_oldest"

        @field_validator("policy", mode="before")
        @classmethod
        def _spelling(cls, value: object) -> object:
            return "summarise" if value == "summarize" else value

    class Sim(_Strict):
        steps: int = Field(default=5, ge=0)
        agents: int = Field(default=50, ge=1)
        world: World = Field(default_factory=World)
        engine: Engine = Field(default_factory=Engine)
        llm: LLM = Field(default_factory=LLM)
        agents_memory: AgentsMemory = Field(default_factory=AgentsMemory)

    class Trace(_Strict):
        #: OpenTelemetry spans of every step, turn and model call: ``off``, ``jsonl``
        #: (``otel_spans.jsonl`` in the run directory) or ``otlp`` (an OTLP collector at
        #: ``$OTEL_EXPORTER_OTLP_ENDPOINT``); see docs/howto/tracing.md.
        otel: Literal["off", "jsonl", "otlp"] = "off"

        @field_validator("otel", mode="before")
        @classmethod
        def _off(cls, value: object) -> object:
            # YAML 1.1 reads a bare `off` (and `no`, `false`) as False.
            return "off" if value is False or value is None else value

    class Run(_Strict):
        out: str | None = None
        record: bool = True
        checkpoint_every: int | None = Field(default=None, ge=1)
        checkpoint_every_time: float | None = Field(default=None, gt=0.0)
        #: Calls in a row whose retries were all used up, after which the
        #: provider is taken to be unusable and the run stops (exit 1).
        max_consecutive_provider_failures: int = Field(default=3, ge=1)
        #: The largest fraction of failed turns a run may have and exit 0.
        max_failed_fraction: float = Field(default=0.5, ge=0.0, le=1.0)
        #: Check the provider (package, server, model) before step 0.
        preflight: bool = True
        #: The most memory a big society (100,000 agents or more) may be
        #: estimated to need before it is built; None: what the machine has free.
        memory_limit_gb: float | None = Field(default=None, gt=0.0)
        budget: Budget = Field(default_factory=Budget)
        trace: Trace = Field(default_factory=Trace)

    class Document(_Strict):
        name: str = "run"
        seed: int | str = 0
        #: A scenario artifact's path (docs/scenarios.md), or None.
        scenario: str | None = None
        sim: Sim = Field(default_factory=Sim)
        run: Run = Field(default_factory=Run)

    return Document


def _merge(base: dict[str, Any], layer: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge *layer* into a copy of *base*: mappings merge, everything else replaces."""
    out = dict(base)
    for key, value in layer.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _parse_value(raw: str) -> Any:
    import yaml  # type: ignore[import-untyped]  # noqa: PLC0415  (lazy)

    try:
        return yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        return raw


def apply_overrides(data: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Return *data* with each ``dotted.key=value`` override set (values read as YAML).

    Raises:
        ConfigError: An override is not ``key.path=value``, or its path runs
            through a value that is not a mapping.
    """
    out = copy.deepcopy(dict(data))
    for item in overrides:
        key, sep, raw = str(item).partition("=")
        parts = key.strip().split(".")
        if not sep or not all(p.strip() for p in parts):
            raise ConfigError(f"override {item!r} must look like dotted.key=value "
                              "(e.g. sim.steps=20)")
        node = out
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif not isinstance(child, dict):
                where = ".".join(parts[:depth + 1])
                raise ConfigError(f"override {item!r}: {where} is {child!r}, not a mapping")
            node = child
        node[parts[-1]] = _parse_value(raw)
    return out


@final
class RunConfig:
    """A validated run config: plain data (:attr:`data`) plus attribute access (:attr:`sim`).

    Build it with :func:`load_config` or :func:`parse_config`.
    """

    __slots__ = ("_doc", "data", "source")

    def __init__(self, doc: Any, data: dict[str, Any], source: str | None) -> None:
        self._doc = doc
        #: The resolved config as plain data (what the run directory stores).
        self.data = data
        #: Where it was read from (a path), or None.
        self.source = source

    @property
    def name(self) -> str:
        """The run's name (run directories are called after it)."""
        return str(self._doc.name)

    @property
    def seed(self) -> int | str:
        """The master seed."""
        seed: int | str = self._doc.seed
        return seed

    @property
    def sim(self) -> Any:
        """The ``sim`` section, with attribute access (``config.sim.engine.mode``)."""
        return self._doc.sim

    @property
    def scenario(self) -> str | None:
        """The path of the scenario artifact the run takes, or None."""
        value: str | None = self._doc.scenario
        return value

    @property
    def run(self) -> Any:
        """The ``run`` section (``out``, ``record``)."""
        return self._doc.run

    def get(self, dotted: str) -> Any:
        """The value at ``dotted.key`` in :attr:`data`.

        Raises:
            ConfigError: No such key.
        """
        node: Any = self.data
        for part in dotted.split("."):
            if not isinstance(node, Mapping) or part not in node:
                raise ConfigError(f"the config has no {dotted!r}")
            node = node[part]
        return node

    def with_overrides(self, overrides: Iterable[str]) -> RunConfig:
        """A new config with *overrides* applied on top of this one."""
        return parse_config(apply_overrides(self.data, overrides), self.source)

    def __repr__(self) -> str:
        return f"<RunConfig {self.name!r} seed={self.seed!r} from {self.source or 'data'}>"


def _did_you_mean(error: Mapping[str, Any]) -> str:
    """For an unknown key: the closest known key at the same place, if one is close."""
    if error.get("type") != "extra_forbidden" or not error.get("loc"):
        return ""
    import difflib  # noqa: PLC0415

    *parents, last = (str(part) for part in error["loc"])
    node: Any = DEFAULTS
    for part in parents:
        if not isinstance(node, Mapping) or part not in node:
            return ""
        node = node[part]
    if not isinstance(node, Mapping):
        return ""
    close = difflib.get_close_matches(last, [str(k) for k in node], n=1, cutoff=0.6)
    return f"; did you mean {'.'.join([*parents, close[0]])}?" if close else ""


def parse_config(data: object, source: str | None = None,
                 overrides: Iterable[str] = ()) -> RunConfig:
    """Validate a config document (layered on :data:`DEFAULTS`, then *overrides*).

    Raises:
        ConfigError: A key is unknown, or a value has the wrong type or range;
            the message names each dotted field (``sim.steps``).
    """
    from pydantic import ValidationError  # noqa: PLC0415  (lazy: heavy import)

    label = source or "<config>"
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{label}: a run config must be a mapping, got {type(data).__name__}")
    overrides = list(overrides)
    merged = apply_overrides(_merge(dict(copy.deepcopy(DEFAULTS)), data), overrides)
    try:
        doc = _schema().model_validate(merged)
    except ValidationError as exc:
        # a problem with a command-line override is named by the override, not the file
        # (by its key only: describe_error already hides the value of a secret)
        given = {str(item).partition("=")[0].strip() for item in overrides}
        from_file: list[str] = []
        from_line: list[str] = []
        for error in exc.errors():
            problem = describe_error(error, "must be a mapping") + _did_you_mean(error)
            dotted = ".".join(str(part) for part in error["loc"])
            if any(dotted == key or dotted.startswith(key + ".") for key in given):
                from_line.append(f"{problem} (set on the command line)")
            else:
                from_file.append(problem)
        parts = ([f"{label}: " + "; ".join(from_file)] if from_file else []) + from_line
        raise ConfigError("; ".join(parts)) from None
    given = {str(item).partition("=")[0].strip() for item in overrides}
    _check_agents_memory(doc.sim.agents_memory, label, given)
    dumped: dict[str, Any] = doc.model_dump(mode="json")
    if dumped.get("scenario") is None:
        dumped.pop("scenario", None)  # a run without one stores the config it always did
    _agents_memory_to_factory(dumped)
    if dumped["run"]["trace"]["otel"] == "off":
        dumped["run"].pop("trace")  # a run without tracing stores the config it always did
    return RunConfig(doc, dumped, source)


def _check_agents_memory(memory: Any, label: str, given: set[str]) -> None:
    """``sim.agents_memory.max_tokens``: None, or a whole number of tokens that holds one entry.

    Raises:
        ConfigError: One line naming the key, the value and what it must be.
    """
    budget = memory.max_tokens
    if budget is None:
        return
    from simulacra.agents import min_memory_tokens  # noqa: PLC0415

    least = min_memory_tokens(memory.policy)
    whole = isinstance(budget, int) and not isinstance(budget, bool)
    if whole and budget >= least:
        return
    key = "sim.agents_memory.max_tokens"
    problem = "is below one observation" if whole and budget > 0 else "is not a token budget"
    room = ("one observation of 16 tokens (12 words)" if memory.policy == "drop_oldest" else
            "one observation of 16 tokens (12 words) and the summary line's 16")
    text = (f"{key}={budget!r} {problem}: expected a whole number of at least {least} tokens "
            f"under policy {memory.policy} ({room}, counted as simulacra.llm.approx_tokens: "
            "4/3 a word), or null for no memory")
    if key in given or "sim.agents_memory" in given:
        raise ConfigError(f"{text} (set on the command line)")
    raise ConfigError(f"{label}: {text}")


def _agents_memory_to_factory(dumped: dict[str, Any]) -> None:
    """Without a budget, ``sim.agents_memory`` is not stored: the config a run always stored.

    With one, :func:`~simulacra.societies.build_society` hands the factory
    ``agents_memory={"max_tokens", "policy"}``.
    """
    sim = dumped["sim"]
    if sim["agents_memory"]["max_tokens"] is None:
        sim.pop("agents_memory")


def load_config(path: str | os.PathLike[str] | None = None,
                overrides: Iterable[str] = ()) -> RunConfig:
    """Read a YAML run config, layer it on the defaults and apply dotted *overrides*.

    A relative ``sim.world.factory`` file path is made absolute against the
    file's directory, so the resolved config runs from anywhere.

    Raises:
        ConfigError: The file is missing or not YAML, or a setting is bad (the
            message names the dotted field).
    """
    if path is None:
        return parse_config({}, None, overrides)
    import yaml  # noqa: PLC0415  (lazy)

    where = Path(path)
    try:
        with where.open(encoding="utf-8") as file:
            data = yaml.safe_load(file)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {str(where)!r}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {str(where)!r}: {os_problem(exc)}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML: {yaml_problem(exc)}") from None
    if isinstance(data, dict):
        data = _absolute_factory(data, where.resolve().parent)
        artifact = data.get("scenario")
        if isinstance(artifact, str) and artifact and not Path(artifact).is_absolute():
            data = {**data, "scenario": str((where.resolve().parent / artifact).resolve())}
    return parse_config(data, str(where), overrides)


def _absolute_factory(data: dict[str, Any], base: Path) -> dict[str, Any]:
    sim = data.get("sim")
    world = sim.get("world") if isinstance(sim, dict) else None
    factory = world.get("factory") if isinstance(world, dict) else None
    if not isinstance(factory, str):
        return data
    where, sep, name = factory.rpartition(":")
    if sep and where.endswith(".py") and not Path(where).is_absolute():
        out = copy.deepcopy(data)
        out["sim"]["world"]["factory"] = f"{(base / where).resolve()}:{name}"
        return out
    return data
