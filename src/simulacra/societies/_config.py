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
import re
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any, Final, final

from simulacra._util import describe_error, os_problem, yaml_problem
from simulacra.errors import ConfigError

__all__ = ["DEFAULTS", "PRESETS", "STEP_ENGINES_BUILT_IN", "RunConfig", "apply_overrides",
           "endpoint_provider", "load_config", "parse_config"]

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
            "shards": 1,
            "shard_mode": "processes",
            "partition": None,
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
            "response_schema": False,
            "schema_format": "json_schema",
            "endpoints": {},
            "routing": {"default": None, "rules": [], "function": None},
        },
        "agents_memory": {"max_tokens": None, "policy": "drop_oldest"},
    },
    "run": {"out": None, "record": True, "checkpoint_every": None,
            "checkpoint_every_time": None, "max_consecutive_provider_failures": 3,
            "max_failed_fraction": 0.5, "preflight": True, "memory_limit_gb": None,
            "budget": {"tokens": None, "cost": None}, "trace": {"otel": "off"},
            "dask": {"scheduler_address": None}, "recover_shards": 2},
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
        #: Shards the agents' turns run on (docs/sharding.md); 1: this process alone.
        shards: int = Field(default=1, ge=1, le=1024)
        #: How shards run: inline (in turn, here), threads, processes, or dask (actors
        #: on a Dask cluster: run.dask.scheduler_address, or a LocalCluster).
        shard_mode: Literal["inline", "threads", "processes", "dask"] = "processes"
        #: ``file.py:fn`` or ``module:fn``: ``fn(agent_ids, shards) -> [[ids of shard 0],
        #: ...]``; None: round-robin in id order.
        partition: str | None = None

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

    class EndpointConfig(_Strict):
        #: Defaults for a kind of server: base URL, key variable, schema format.
        preset: Literal["openai", "vllm", "llamacpp", "ollama", "scripted"] | None = None
        provider: Literal["scripted", "openai_compatible"] | None = None
        base_url: str | None = None
        #: A pool: several base URLs serving the same model (one is picked per call).
        servers: list[str] | None = Field(default=None, min_length=1)
        affinity: Literal["prefix", "agent", "round_robin"] = "agent"
        model: str | None = None
        seed: int | str | None = None
        #: Unset: the preset's, else sim.llm.api_key_env; null: never send a key.
        api_key_env: str | None = None
        timeout: float | None = Field(default=None, gt=0.0)
        max_retries: int | None = Field(default=None, ge=0)
        backoff_base: float | None = Field(default=None, ge=0.0)
        concurrency: int | None = Field(default=None, ge=1)
        #: Calls per second that may start on this endpoint; null: no limit.
        rate_limit: float | None = Field(default=None, gt=0.0)
        pricing: Pricing | None = None
        fallback: str | None = None
        schema_format: Literal["json_schema", "json_object"] | None = None

    class RouteRule(_Strict):
        endpoint: str
        #: Agent ids: an id, a list of ids, "3-9" (a range of int ids) or a glob ("pundit*").
        agents: int | str | list[int | str] | None = None
        #: A glob on the request's model name (an agent's name for a kind of decision).
        request_model: str | None = None

    class Routing(_Strict):
        default: str | None = None
        rules: list[RouteRule] = Field(default_factory=list)
        #: ``file.py:fn`` or ``module:fn``: ``fn(site, request) -> name | None``, after the rules.
        function: str | None = None

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
        #: Send each structured request's JSON schema (the factory's agents add it:
        #: the social demo's reply shape), so that a small local model's replies parse.
        response_schema: bool = False
        #: How a schema is sent: OpenAI's json_schema, or json_object (llama.cpp's form).
        schema_format: Literal["json_schema", "json_object"] = "json_schema"
        #: Named model endpoints (docs/howto/endpoints.md); empty: sim.llm alone.
        endpoints: dict[str, EndpointConfig] = Field(default_factory=dict)
        #: Which endpoint serves each call.
        routing: Routing = Field(default_factory=Routing)

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

    class Dask(_Strict):
        #: A running scheduler (``tcp://host:8786``); None: a LocalCluster on loopback.
        scheduler_address: str | None = None

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
        dask: Dask = Field(default_factory=Dask)
        #: Times a run whose shard was lost (a killed process, a Dask worker gone)
        #: resumes itself from its last checkpoint before it stops (exit 1).
        recover_shards: int = Field(default=2, ge=0)

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
        return yaml.load(raw, Loader=_unique_keys_loader()) if raw.strip() else ""  # noqa: S506
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
    _check_endpoints(doc.sim.llm, label, given)
    dumped: dict[str, Any] = doc.model_dump(mode="json")
    engine = dumped["sim"]["engine"]
    if engine["partition"] is None:
        del engine["partition"]
    if engine["shards"] == 1 and engine["shard_mode"] == "processes":
        del engine["shards"], engine["shard_mode"]  # an unsharded run stores what it always did
    llm = dumped["sim"]["llm"]
    if not llm["response_schema"] and llm["schema_format"] == "json_schema":
        del llm["response_schema"], llm["schema_format"]  # stored as it always was
    if not llm["endpoints"] and llm["routing"] == {"default": None, "rules": [],
                                                   "function": None}:
        del llm["endpoints"], llm["routing"]  # a run without them stores what it always did
    if dumped.get("scenario") is None:
        dumped.pop("scenario", None)  # a run without one stores the config it always did
    _agents_memory_to_factory(dumped)
    if dumped["run"]["dask"]["scheduler_address"] is None:
        dumped["run"].pop("dask")  # a run without a cluster stores the config it always did
    if dumped["run"]["recover_shards"] == 2:
        dumped["run"].pop("recover_shards")
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


#: What a preset of ``sim.llm.endpoints`` fills in where the endpoint says nothing:
#: provider, base URL, key variable ("": send none) and how a response schema is sent.
PRESETS: Final[Mapping[str, Mapping[str, Any]]] = {
    "openai": {"provider": "openai_compatible", "base_url": "https://api.openai.com/v1",
               "api_key_env": "OPENAI_API_KEY", "schema_format": "json_schema"},
    "vllm": {"provider": "openai_compatible", "base_url": "http://localhost:8000/v1",
             "api_key_env": "VLLM_API_KEY", "schema_format": "json_schema"},
    "llamacpp": {"provider": "openai_compatible", "base_url": "http://localhost:8080/v1",
                 "api_key_env": "LLAMA_API_KEY", "schema_format": "json_object"},
    "ollama": {"provider": "openai_compatible", "base_url": "http://localhost:11434/v1",
               "api_key_env": "", "schema_format": "json_schema"},
    "scripted": {"provider": "scripted"},
}

_ENDPOINT_NAME: Final = re.compile(r"[A-Za-z0-9_-]+")
_AGENT_RANGE: Final = re.compile(r"(-?\d+)-(-?\d+)")


def endpoint_provider(endpoint: Any) -> str | None:
    """The provider an endpoint config resolves to (its own, else its preset's), or None."""
    if endpoint.provider is not None:
        return str(endpoint.provider)
    if endpoint.preset is not None:
        return str(PRESETS[endpoint.preset]["provider"])
    return None


def _check_endpoints(llm: Any, label: str, given: set[str]) -> None:
    """``sim.llm.endpoints`` and ``sim.llm.routing`` make sense together, before any call.

    Raises:
        ConfigError: One line naming the key, the value and what it must be.
    """
    from simulacra.llm import check_fallbacks  # noqa: PLC0415  (lazy)

    def plain_fail(key: str, text: str) -> ConfigError:
        if any(key == g or key.startswith((g + ".", g + "[")) or g.startswith(key)
               for g in given):
            return ConfigError(f"{key}: {text} (set on the command line)")
        return ConfigError(f"{label}: {key}: {text}")

    fail: Callable[[str, str], ConfigError] = plain_fail
    endpoints: Mapping[str, Any] = llm.endpoints
    routing = llm.routing
    if not endpoints:
        if routing.default is not None or routing.rules or routing.function is not None:
            raise fail("sim.llm.routing", "routes calls to endpoints, and sim.llm.endpoints "
                       "declares none: declare them, or drop sim.llm.routing")
        return
    declared = ", ".join(endpoints)
    for name, endpoint in endpoints.items():
        key = f"sim.llm.endpoints.{name}"
        # An endpoint that does not make sense is most often a misspelt name, made by an
        # override's dotted key (sim.llm.endpoints.primry.model=...): say which one is close.
        fail = _suggesting(plain_fail, _closest_name(name, [n for n in endpoints if n != name]))
        if not _ENDPOINT_NAME.fullmatch(name):
            raise fail(key, f"the name {name!r} must be letters, digits, '_' or '-' (a '.' "
                       "would split its dotted keys)")
        provider = endpoint_provider(endpoint)
        if provider is None:
            raise fail(key, "says neither a preset (openai, vllm, llamacpp, ollama, scripted) "
                       "nor a provider (scripted, openai_compatible)")
        if provider == "scripted":
            if endpoint.base_url is not None or endpoint.servers is not None:
                raise fail(key, "is scripted (answered in process), so it takes no base_url "
                           "or servers")
            continue
        if endpoint.seed is not None:
            raise fail(key + ".seed", "is a scripted endpoint's seed; a server takes no seed "
                       "(set sim.llm.seed for the requests' sampling seed)")
        if endpoint.base_url is not None and endpoint.servers is not None:
            raise fail(key, "gives both base_url and servers: one server, or a pool")
        if (endpoint.base_url is None and endpoint.servers is None
                and (endpoint.preset is None or "base_url" not in PRESETS[endpoint.preset])):
            raise fail(key + ".base_url", "is required for an openai_compatible endpoint "
                       "(e.g. http://localhost:8000/v1), or servers: [url, ...]")
        if not endpoint.model:
            raise fail(key + ".model", "is required for an openai_compatible endpoint: the "
                       "model's id as the server lists it at GET {base_url}/models")
    fail = plain_fail
    for name, endpoint in endpoints.items():
        if endpoint.fallback is not None and endpoint.fallback not in endpoints:
            raise fail(f"sim.llm.endpoints.{name}.fallback", f"{endpoint.fallback!r} is not a "
                       f"declared endpoint (declared: {declared})"
                       f"{_closest_name(endpoint.fallback, endpoints)}")
    try:
        check_fallbacks({name: e.fallback for name, e in endpoints.items()})
    except ConfigError as exc:
        raise fail("sim.llm.endpoints", str(exc)) from None
    if routing.default is not None and routing.default not in endpoints:
        raise fail("sim.llm.routing.default",
                   f"{routing.default!r} is not a declared endpoint (declared: {declared})"
                   f"{_closest_name(routing.default, endpoints)}")
    if routing.default is None and len(endpoints) > 1:
        raise fail("sim.llm.routing.default",
                   f"is required with {len(endpoints)} endpoints: it serves the calls no rule "
                   f"routes (declared: {declared})")
    for i, rule in enumerate(routing.rules):
        where = f"sim.llm.routing.rules[{i}]"
        if rule.endpoint not in endpoints:
            raise fail(where + ".endpoint", f"{rule.endpoint!r} is not a declared endpoint "
                       f"(declared: {declared}){_closest_name(rule.endpoint, endpoints)}")
        if rule.agents is None and rule.request_model is None:
            raise fail(where, "matches every call: give agents or request_model (or make "
                       f"{rule.endpoint!r} the routing.default)")
        if isinstance(rule.agents, list) and not rule.agents:
            raise fail(where + ".agents", "is an empty list, which matches no agent")
        for item in rule.agents if isinstance(rule.agents, list) else [rule.agents]:
            match = None if not isinstance(item, str) else _AGENT_RANGE.fullmatch(item)
            if match is not None and int(match.group(1)) > int(match.group(2)):
                raise fail(where + ".agents", f"the range {item!r} is empty (from > to)")


def _suggesting(fail: Callable[[str, str], ConfigError],
                suffix: str) -> Callable[[str, str], ConfigError]:
    """*fail* with *suffix* added to its text (nothing added for an empty suffix)."""
    if not suffix:
        return fail
    return lambda key, text: fail(key, text + suffix)


def _closest_name(name: str, names: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the declared name closest to *name*, else ``""``."""
    import difflib  # noqa: PLC0415

    close = difflib.get_close_matches(name, list(names), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


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
            data = yaml.load(file, Loader=_unique_keys_loader())  # noqa: S506  (a SafeLoader)
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


@cache
def _unique_keys_loader() -> Any:
    """A ``yaml.SafeLoader`` that refuses a mapping with one key twice (YAML keeps the last).

    It also reads ``1e-3`` as a number, as YAML 1.2 does: PyYAML follows YAML 1.1,
    whose floats need a dot (``1.0e-3``), and handed ``1e-3`` on as a string, which
    the config's number fields then refused.
    """
    import yaml  # noqa: PLC0415  (lazy)

    class UniqueKeys(yaml.SafeLoader):  # type: ignore[misc]  # untyped base
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _value in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    again = key in seen
                except TypeError:  # an unhashable key: the base class reports it
                    break
                if again:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"the key {key!r} is given twice in one mapping",
                        key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    # Beside PyYAML's own float forms (add_implicit_resolver copies the base's lists).
    UniqueKeys.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT, list("-+0123456789"))
    return UniqueKeys


#: The one float form YAML 1.2 adds to PyYAML's (YAML 1.1's): an exponent without a dot.
_EXPONENT = re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$")


def _absolute_ref(ref: object, base: Path) -> object:
    """A ``file.py:name`` reference with a relative file made absolute against *base*."""
    if not isinstance(ref, str):
        return ref
    where, sep, name = ref.rpartition(":")
    if sep and where.endswith(".py") and not Path(where).is_absolute():
        return f"{(base / where).resolve()}:{name}"
    return ref


def _absolute_factory(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """``sim.world.factory`` and ``sim.llm.routing.function`` made absolute against *base*."""
    sim = data.get("sim")
    if not isinstance(sim, dict):
        return data
    out = copy.deepcopy(data)
    world = out["sim"].get("world")
    if isinstance(world, dict) and "factory" in world:
        world["factory"] = _absolute_ref(world["factory"], base)
    engine = out["sim"].get("engine")
    if isinstance(engine, dict) and "partition" in engine:
        engine["partition"] = _absolute_ref(engine["partition"], base)
    llm = out["sim"].get("llm")
    routing = llm.get("routing") if isinstance(llm, dict) else None
    if isinstance(routing, dict) and "function" in routing:
        routing["function"] = _absolute_ref(routing["function"], base)
    return out
