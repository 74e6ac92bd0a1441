"""From a run config to a finished run directory, and back: ``run_society`` and ``replay_run``.

``run_society(config)`` builds the model the config names (the scripted model,
or an OpenAI-compatible server), the world and agents (``sim.world.factory``),
and the step engine (``sim.engine.step.built_in``), runs ``sim.steps`` steps
and, given a directory, writes the run directory (``simulacra.societies._rundir``)
with every completion recorded. ``replay_run(run_dir)`` runs the stored config
again with every completion served from those recordings (strict: a call that
is not recorded stops the replay, naming its call site) -- no model is called
-- and checks that the digest is the one the run ended with.

Step engines are found by name in a registry: ``"round"`` is built in, the
event-driven engine (``"async_event"``) is imported the first time it is
asked for, and :func:`register_step_engine` adds others.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import inspect
import sys
import threading
import time as _time
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar, final

from simulacra._util import ModelWrapper, full_collections_deferred, install_hint
from simulacra.agents import ActionEvent, Actor, World
from simulacra.errors import (
    BackendUnavailable,
    ConfigError,
    DeterminismError,
    ProviderUnavailable,
    RunStopped,
    ScenarioError,
    ShardCrashed,
    UnknownEndpoint,
)
from simulacra.executors import RefLoader
from simulacra.rng import SeedTree, as_seed_tree

from ._calls import CallLog, CallLogModel
from ._config import RunConfig, parse_config
from ._endpoints import (
    build_router,
    endpoint_pricer,
    endpoints_info,
    preflight_run,
    uses_endpoints,
)
from ._manifest import (
    event_step_of,
    finish_manifest,
    portable_factory,
    read_manifest,
    simulation_sha256,
    start_manifest,
)
from ._provider import ProviderGuard
from ._rounds import Metered, RoundEngine, RoundResult, StepReport, gc_paused
from ._rounds import deprecated_count as _deprecated_count
from ._rundir import RunDirectory, event_line
from ._scenario import (
    SocietyScenario,
    copy_artifact,
    load_society_scenario,
    manifest_entry,
    model_knobs,
    run_scenario,
    scenario_end,
)
from ._sharded import (
    ServedCalls,
    ShardedRoundEngine,
    ShardSpec,
    check_apart,
    check_shards,
    shard_parts,
)

E = TypeVar("E", bound=BaseException)

if TYPE_CHECKING:
    import os

    from simulacra.llm import CallSite, Completion, CompletionRequest, LanguageModel, Router
    from simulacra.scenarios import Scenario

    from ._otel import RunTracer

__all__ = ["ReplayReport", "SocietyRun", "StepEngine", "build_model", "build_society",
           "load_factory", "register_step_engine", "replay_run", "resume_society",
           "run_society", "step_engine_names"]


class StepEngine(Protocol):
    """What a step engine built from a config must do: run steps, give a result."""

    def run(self, steps: int, *, pause: Callable[[], bool] | None = None) -> RoundResult:
        """Run *steps* steps; return the result so far.

        *pause* is called after each step; True returns after that step.
        """
        ...

    def state(self) -> dict[str, Any]:
        """Everything a resumed run needs, as data (checkpoints)."""
        ...

    def restore(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state`."""
        ...


#: ``factory(world, agents, *, model, seed, config, on_step, on_turn, fatal) -> StepEngine``
StepEngineFactory = Callable[..., StepEngine]


def _round_engine(world: World, agents: list[Actor], *, model: LanguageModel | None,
                  seed: SeedTree, config: RunConfig, on_step: Callable[[StepReport], None] | None,
                  on_turn: Callable[[], None] | None,
                  fatal: tuple[type[BaseException], ...] = ()) -> RoundEngine:
    engine = config.sim.engine
    return RoundEngine(world, agents, model=model, seed=seed, mode=engine.mode,
                       concurrency=engine.concurrency, flows=engine.flows,
                       participation=engine.participation, resolution=engine.resolution,
                       fail_fast=engine.fail_fast, on_step=on_step, on_turn=on_turn,
                       fatal=fatal)


def _shard_model(config: RunConfig, agent_ids: list[str],
                 down: Mapping[str, str] | None = None) -> LanguageModel:
    """A shard's model: the run's provider (guarded) or its endpoints' router, built there."""
    if uses_endpoints(config):
        return build_router(config, agent_ids, {name: ProviderUnavailable(why)
                                                for name, why in (down or {}).items()})
    return ProviderGuard(build_model(config), config.run.max_consecutive_provider_failures)


def _replay_shard_model(path: str, config: RunConfig, agent_ids: list[str]) -> LanguageModel:
    """A shard's model in a replay: the recordings, read-only."""
    from simulacra.llm import RecordingStore, ReplayModel  # noqa: PLC0415  (lazy)

    return ReplayModel(RecordingStore(path, readonly=True), strict=True)


def _sharded_engine(config: RunConfig, world: World, agents: list[Actor], *,
                    model: LanguageModel, given: LanguageModel | None, served: ServedCalls,
                    down: Mapping[str, ProviderUnavailable], reuse: str | None,
                    on_step: Callable[[StepReport], None] | None,
                    on_turn: Callable[[], None] | None,
                    fatal: tuple[type[BaseException], ...]) -> tuple[StepEngine, Any]:
    """The step engine on ``sim.engine.shards`` shards: ``(the engine, what closes its shards)``.

    The round engine (``_sharded.py``) or the event-driven one (``_sharded_events.py``).

    Each shard builds its model: the run's own (as :func:`build_model` or the
    endpoints' router), the replay's recordings, or *given* as it is (a model
    object handed to :func:`run_society`; on process shards it must pickle).

    Raises:
        ConfigError: *given* cannot cross into a shard's process.
    """
    import pickle  # noqa: PLC0415

    from simulacra.llm import ReplayModel  # noqa: PLC0415  (lazy)

    engine = config.sim.engine
    mode = engine.shard_mode
    ids = [str(agent.id) for agent in agents]
    make: Callable[[RunConfig, list[str]], LanguageModel] | None = None
    shared: LanguageModel | None = None
    if given is None:
        make = functools.partial(_shard_model, down={k: str(v) for k, v in down.items()})
    elif isinstance(given, ReplayModel) and mode == "processes":
        make = functools.partial(_replay_shard_model, str(given.store.path))
    else:
        shared = given
        if mode == "processes":
            try:
                pickle.dumps(given)
            except Exception as exc:
                raise ConfigError(
                    f"sim.engine.shard_mode=processes: the model object "
                    f"({type(given).__name__}) cannot be sent to a shard's process "
                    f"({type(exc).__name__}: {exc}); use shard_mode=threads or inline") from None
    check_apart(world, agents)
    specs = [ShardSpec(index, part, (config.data, config.source), _build_frozen, model=make,
                       shared=shared, reuse=reuse,
                       mode="threads" if engine.mode == "threads" else "sequential",
                       concurrency=engine.concurrency, extra={"all": ids})
             for index, part in enumerate(shard_parts(config, ids))]
    seed = as_seed_tree(config.seed).child("engine")
    if engine.step.built_in == "async_event":
        from ._sharded_events import sharded_event_steps  # noqa: PLC0415  (as _step_engine)

        return sharded_event_steps(world, agents, model=model, seed=seed, config=config,
                                   on_step=on_step, on_turn=on_turn, fatal=fatal, specs=specs,
                                   served=served)
    round_engine = ShardedRoundEngine(
        world, agents, specs=specs, shard_mode=mode, served=served, model=model,
        dask=config.run.dask.scheduler_address, seed=seed, mode=engine.mode,
        concurrency=engine.concurrency, flows=engine.flows,
        participation=engine.participation, resolution=engine.resolution,
        fail_fast=engine.fail_fast, on_step=on_step, on_turn=on_turn, fatal=fatal)
    return round_engine, round_engine


_STEP_ENGINES: dict[str, StepEngineFactory] = {"round": _round_engine}


def register_step_engine(name: str, factory: StepEngineFactory) -> None:
    """Make ``sim.engine.step.built_in: <name>`` build engines with *factory*.

    *factory* is called as ``factory(world, agents, model=..., seed=...,
    config=..., on_step=..., on_turn=..., fatal=...)`` (see ``_round_engine``)
    and returns an object whose ``run(steps)`` returns a :class:`RoundResult`.

    Raises:
        ConfigError: *name* is taken.
    """
    if name in _STEP_ENGINES and _STEP_ENGINES[name] is not factory:
        raise ConfigError(f"step engine {name!r} is already registered")
    _STEP_ENGINES[name] = factory


def step_engine_names() -> tuple[str, ...]:
    """The step engines that can be built now, sorted."""
    return tuple(sorted(_STEP_ENGINES))


def _step_engine(name: str) -> StepEngineFactory:
    if name not in _STEP_ENGINES and name == "async_event":
        # The event-driven engine, imported when first asked for (it imports the
        # round engine's result types; this module imports it, not the reverse).
        from ._events import _step_factory  # noqa: PLC0415

        _STEP_ENGINES[name] = _step_factory
    try:
        return _STEP_ENGINES[name]
    except KeyError:
        raise BackendUnavailable(
            f"sim.engine.step.built_in is {name!r}, which is not available here "
            f"(available: {', '.join(step_engine_names())})") from None


# -- the model -------------------------------------------------------------------


def build_model(config: RunConfig) -> LanguageModel:
    """The language model ``sim.llm`` names (without recording).

    Raises:
        ConfigError: ``openai_compatible`` without ``sim.llm.base_url``.
    """
    from simulacra.llm import OpenAICompatible, ScriptedModel  # noqa: PLC0415  (lazy)

    llm = config.sim.llm
    if llm.provider == "scripted":
        seed: int | str = config.seed if llm.seed is None else llm.seed
        return ScriptedModel(seed=seed)
    if not llm.base_url:
        raise ConfigError("sim.llm.base_url is required when sim.llm.provider is "
                          "'openai_compatible' (e.g. http://localhost:8000/v1)")
    return OpenAICompatible(base_url=llm.base_url, model=llm.model, api_key_env=llm.api_key_env,
                            timeout=llm.timeout, max_retries=llm.max_retries,
                            backoff_base=llm.backoff_base, concurrency=llm.concurrency,
                            schema_format=llm.schema_format)


# -- the world -------------------------------------------------------------------


#: How ``sim.world.factory`` is loaded: a file in a package folder as
#: ``package.stem`` (its relative imports work), any other file once per process
#: as ``_simulacra_world_<stem>``. Checkpoints pickle world objects by that module
#: name, so old run directories need it to stay as it is.
_FACTORIES = RefLoader(file_module=lambda path: f"_simulacra_world_{path.stem}",
                       package_files=True)


def load_factory(ref: str | None) -> Callable[..., Any]:
    """The callable ``sim.world.factory`` names: ``path/file.py:func`` or ``module:func``.

    Raises:
        ConfigError: Missing, malformed, or not found.
    """
    if ref is None or ref == "":
        raise ConfigError("sim.world.factory must name the world factory, e.g. 'model.py:build' "
                          "(relative to the config file) or 'package.module:build'")
    factory: Callable[..., Any] = _FACTORIES.resolve(ref, "sim.world.factory")
    return factory


def build_society(config: RunConfig) -> tuple[World, list[Actor]]:
    """Call the world factory: ``factory(agents=..., seed=..., llm=..., **world params)``.

    Raises:
        ConfigError: The factory is missing, takes other parameters (the
            message names ``sim.world.<param>``), or returns something else
            than ``(World, agents)``.
    """
    sim = config.sim
    factory = load_factory(sim.world.factory)
    params = {k: v for k, v in config.data["sim"]["world"].items() if k != "factory"}
    llm = {"model": sim.llm.model, "temperature": sim.llm.temperature,
           "max_tokens": sim.llm.max_tokens}
    if sim.llm.response_schema:  # the factory's agents send their replies' schema
        llm["response_schema"] = True
    kwargs = {"agents": sim.agents, "seed": as_seed_tree(config.seed).child("world"), "llm": llm,
              **params}
    memory = sim.agents_memory
    if memory.max_tokens is not None:
        kwargs["agents_memory"] = {"max_tokens": memory.max_tokens, "policy": memory.policy}
    try:
        inspect.signature(factory).bind(**kwargs)
    except TypeError as exc:
        if memory.max_tokens is not None and "agents_memory" in str(exc):
            raise ConfigError(
                f"sim.agents_memory.max_tokens={memory.max_tokens} is set, but sim.world.factory "
                f"{sim.world.factory!r} takes no agents_memory parameter (the agents' memory "
                "is the factory's to build: see docs/social.md, Bounded memory)") from None
        unknown = [f"sim.world.{k}" for k in params]
        raise ConfigError(f"sim.world.factory {sim.world.factory!r} cannot take "
                          f"{', '.join(unknown) or 'its arguments'}: {exc}") from None
    except ValueError:  # no signature to read
        pass
    try:
        built = factory(**kwargs)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        given = ", ".join(f"sim.world.{k}={v!r}" for k, v in params.items()) or "no parameters"
        raise ConfigError(
            f"sim.world.factory {sim.world.factory!r} raised {type(exc).__name__}: {exc} "
            f"(given {given}: is a value of the wrong type?)") from exc
    if (not isinstance(built, tuple) or len(built) != 2 or not isinstance(built[0], World)):
        raise ConfigError(f"sim.world.factory {sim.world.factory!r} must return "
                          f"(World, agents), got {type(built).__name__}")
    return built[0], list(built[1])


#: From this many agents on, a run estimates its memory before building its world.
MEMORY_CHECK_AGENTS: Final = 100_000
#: Agents built as the sample of the estimate.
_MEMORY_SAMPLE: Final = 2_000
#: The run's memory per byte of the built world: the events, recordings, the
#: digests' and checkpoint's buffers (1.5 measured on the social demo at 1M
#: agents: 1.1 GB built, 1.7 GB peak), with a margin.
_MEMORY_FACTOR: Final = 2.0


def _available_memory() -> int | None:
    """Bytes of memory this machine has available now (MemAvailable), or None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as file:
            for line in file:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None


def memory_preflight(config: RunConfig) -> int | None:
    """Refuse a big society that would not fit in memory, before anything is built or written.

    For ``sim.agents`` of :data:`MEMORY_CHECK_AGENTS` or more, a sample of
    2,000 agents is built under ``tracemalloc`` and the whole run's need
    estimated from it; the limit is ``run.memory_limit_gb``, or the memory
    the machine has available. Returns the estimate in bytes (None when no
    check was made: a small run, or a factory that cannot build the sample).

    Raises:
        ConfigError: The estimate is over the limit (the message says both).
    """
    import tracemalloc  # noqa: PLC0415  (only for big runs)

    agents = config.sim.agents
    if agents < MEMORY_CHECK_AGENTS:
        return None
    sample = parse_config({**config.data, "sim": {**config.data["sim"], "agents": _MEMORY_SAMPLE}})
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        built = build_society(sample)
        size = tracemalloc.get_traced_memory()[0] - before
        del built
    except Exception:
        return None
    finally:
        if started:
            tracemalloc.stop()
    need = int(size / _MEMORY_SAMPLE * agents * _MEMORY_FACTOR)
    limit_gb = config.run.memory_limit_gb
    limit = int(limit_gb * 1e9) if limit_gb is not None else _available_memory()
    if limit is not None and need > limit:
        where = (f"run.memory_limit_gb={limit_gb:g}" if limit_gb is not None
                 else "the memory this machine has available")
        raise ConfigError(
            f"sim.agents={agents} needs about {need / 1e9:.1f} GB ({size / _MEMORY_SAMPLE:,.0f} "
            f"bytes an agent, measured on {_MEMORY_SAMPLE:,} built as a sample, x"
            f"{_MEMORY_FACTOR:g} for the run), more than {where} ({limit / 1e9:.1f} GB): lower "
            "sim.agents, or raise run.memory_limit_gb if you know better")
    return need


def _build_frozen(config: RunConfig) -> tuple[World, list[Actor]]:
    """:func:`build_society` with the cyclic garbage collector paused, then frozen.

    A million agents are millions of objects that live as long as the run:
    each collection of the oldest generation would walk them all (a third of
    the build's time, and as much again in the digests at the end).
    ``gc.freeze()`` moves them out of the collector's sight; what the run
    allocates later is collected as usual.
    """
    with gc_paused():
        built = build_society(config)
    if gc.isenabled():
        gc.freeze()
    return built


# -- running ---------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class SocietyRun:
    """A finished run: its config, result, world and (if written) run directory.

    Attributes:
        config: The resolved config.
        result: The engine's result (``result.digest`` is the run's digest).
        world: The world at the end.
        summary: The world's :meth:`~simulacra.agents.World.summary`.
        run_dir: The run directory, or None.
        llm: Model usage: provider, model, calls, tokens (and what the provider reports).
    """

    config: RunConfig
    result: RoundResult
    world: World
    summary: Mapping[str, Any]
    run_dir: Path | None = None
    llm: Mapping[str, Any] = field(default_factory=dict)
    #: Failed turns: ``turns`` (all turns), ``failed``, ``fraction``, ``by_kind``
    #: (error type -> count) and ``first`` (error type -> the first such event:
    #: agent, step, time, message), over the whole run (resumes included).
    failures: Mapping[str, Any] = field(default_factory=dict)
    #: The run's scenario: ``name``, ``sha256``, ``changes`` and ``applied``
    #: (how many of its changes acted); empty for a run without one.
    scenario: Mapping[str, Any] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        """The run's digest."""
        return self.result.digest

    @property
    def too_many_failures(self) -> bool:
        """Whether more turns failed than ``run.max_failed_fraction`` allows."""
        fraction = float(self.failures.get("fraction", 0.0))
        return fraction > float(self.config.run.max_failed_fraction)


def _failure_summary(events: Iterator[ActionEvent] | list[ActionEvent],
                     turns: int) -> dict[str, Any]:
    """Count the ``turn_failed`` events of a run by error type, keeping the first of each."""
    by_kind: dict[str, int] = {}
    first: dict[str, dict[str, Any]] = {}
    for event in events:
        if event.kind != "turn_failed":
            continue
        kind = str(event.data.get("error", "?"))
        by_kind[kind] = by_kind.get(kind, 0) + 1
        if kind not in first:
            first[kind] = {"agent": event.agent, "step": event.step, "time": event.time,
                           "message": event.data.get("message", "")}
    failed = sum(by_kind.values())
    return {"turns": turns, "failed": failed,
            "fraction": round(failed / turns, 6) if turns else 0.0,
            "by_kind": dict(sorted(by_kind.items())), "first": first}


def _usage(model: object) -> dict[str, Any]:
    usage = getattr(model, "usage", None)
    if usage is not None and dataclasses.is_dataclass(usage) and not isinstance(usage, type):
        return dataclasses.asdict(usage)
    return {}


#: What the event-driven engine's events hold in ``step`` in the run being made: "window",
#: or "turn" while a run directory written before ``ActionEvent.turn`` is replayed or
#: resumed (its manifest does not say; see EventEngine.use_event_step).
_EVENT_STEP: ContextVar[str] = ContextVar("simulacra_event_step", default="window")

#: The model calls a step is expected to make (agents x participation) from which a run's
#: recordings are written by a child process (RecordingStore.hold(offload=True)): it
#: takes 10-20 us a call off the run's thread, and some 0.1 s to start.
OFFLOAD_CALLS = 1000


def _calls_per_step(config: RunConfig) -> float:
    return float(config.sim.agents) * float(config.sim.engine.participation)


def run_society(config: RunConfig | Mapping[str, Any], *,
                out: str | os.PathLike[str] | None = None,
                model: LanguageModel | None = None,
                on_step: Callable[[StepReport], None] | None = None,
                on_turn: Callable[[], None] | None = None,
                fatal: tuple[type[BaseException], ...] = (),
                write: bool = True,
                control: RunControl | None = None,
                completions: str = "live",
                scenario: str | os.PathLike[str] | Mapping[str, Any] | Scenario | None = None
                ) -> SocietyRun:
    """Run the society a config describes, optionally into a run directory.

    With ``run.checkpoint_every: N`` (and a run directory), a checkpoint is
    written every N steps into ``RUN_DIR/checkpoints``; :func:`resume_society`
    continues from the last one.

    Args:
        config: A :class:`RunConfig` or a config mapping (layered on the defaults).
        out: The run directory to write; ``None`` uses ``run.out`` from the
            config, and writes nothing when that is unset too.
        model: A model to use instead of the one ``sim.llm`` names.
        on_step: Also called with each step's report.
        on_turn: Called after each turn (progress bars; thread-safe).
        fatal: Exception types that stop the run instead of failing one turn.
        write: ``False`` writes no run directory, whatever ``run.out`` says.
        control: Lets another thread (a signal handler) stop the run at the
            end of a step, with a checkpoint (see :class:`RunControl`).
        completions: Where ``manifest.json`` says the completions came from
            (``"live"``; a replay writes ``"recordings"``).
        scenario: A scenario to run (a :class:`~simulacra.scenarios.Scenario`,
            its data or its artifact's path), instead of the one the config's
            ``scenario`` names. It is checked against the model's knobs and
            world before anything is written; the run directory keeps a copy
            (``scenario.json``) and ``manifest.json`` its hash.

    Raises:
        ConfigError: A bad config, world factory or run directory; a
            :class:`~simulacra.ScenarioError` for a scenario that does not fit.
        BackendUnavailable: The step engine is not available.
        AgentActionError: A fatal turn failure.
    """
    if not isinstance(config, RunConfig):
        config = parse_config(config)
    _step_engine(config.sim.engine.step.built_in)  # fail before anything is written
    _checkpoint_steps(config)
    step = config.sim.engine.step
    if step.built_in == "round" and step.options:
        first = sorted(step.options)[0]
        raise ConfigError(f"sim.engine.step.options.{first}: the round engine takes no step "
                          "options (they are for sim.engine.step.built_in=async_event)")
    if step.built_in == "async_event":
        from ._events import check_step_options  # noqa: PLC0415  (lazy, as _step_engine)

        check_step_options(step.options)  # before anything is written
    configured = config.data.get("scenario")
    chosen = scenario if scenario is not None else configured
    artifact: Scenario | None = None
    if chosen is not None:
        artifact = load_society_scenario(chosen, "scenario")
    target = out if out is not None else config.run.out if write else None
    if target is not None:
        RunDirectory.check_free(target)  # before the world is built (a big one takes a while)
    if config.run.preflight:
        memory_preflight(config)  # before the world is built: it may not fit
    # The world is built before anything is written: a factory that refuses
    # its config (sim.agents=1 in the social demo) leaves no run directory
    # behind, and a scenario is checked against the knobs and the world.
    world, agents = _build_frozen(config)
    if config.sim.engine.shards > 1:  # before anything is written or any call paid
        shard_parts(config, [agent.id for agent in agents])
        check_apart(world, agents)
    prepared = (world, agents,
                None if artifact is None else _schedule(config, artifact, world, agents))
    check_shards(config)  # before anything is written
    check_tracing(config, has_run_dir=target is not None)
    down = preflight_run(config) if model is None and config.run.preflight else {}
    # Routes are checked against the society (an agent no rule can match) before any call.
    routed = (build_router(config, [agent.id for agent in agents], down)
              if model is None and uses_endpoints(config) else None)
    rundir = RunDirectory.create(target, config.data) if target is not None else None
    if rundir is not None:
        entry = None
        if artifact is not None:
            copy_artifact(artifact, rundir.path)
            source = (str(chosen) if isinstance(chosen, str | Path) else None)
            entry = manifest_entry(artifact, source)
        start_manifest(rundir.file("manifest"), config, completions=completions,
                       scenario=entry, event_step=_EVENT_STEP.get())
    try:
        return _execute(config, rundir, model, on_step, on_turn, fatal=fatal, resume=None,
                        control=control, prepared=prepared, routed=routed)
    except ShardCrashed as exc:
        return _recover(exc, rundir, config.run.recover_shards, model=model, on_step=on_step,
                        on_turn=on_turn, control=control)


def _recover(error: ShardCrashed, rundir: RunDirectory | None, tries: int, *,
             model: LanguageModel | None, on_step: Callable[[StepReport], None] | None,
             on_turn: Callable[[], None] | None, control: RunControl | None,
             overrides: tuple[str, ...] = ()) -> SocietyRun:
    """A shard was lost: resume the run from its last checkpoint, *tries* times at most.

    What a user would do by hand (``simulacra run --resume``), done at once: the
    run directory is cut back to its last checkpoint, the shards are started
    again (on the cluster's workers as they are now), and the result is the
    uncut run's. Without a run directory, a checkpoint or a try left, *error*
    is raised again.
    """
    from ._checkpoint import checkpoint_files  # noqa: PLC0415

    if (tries <= 0 or rundir is None or not checkpoint_files(rundir.checkpoints)
            or (control is not None and control.reason is not None)):
        raise error
    if control is not None:
        control._again()
    print(f"simulacra: {error}; resuming the run from its last checkpoint "
          f"(run.recover_shards: {tries} left)", file=sys.stderr, flush=True)
    try:
        return resume_society(rundir.path, model=model, on_step=on_step, on_turn=on_turn,
                              control=control, overrides=overrides,
                              _recover_tries=tries - 1)
    except ShardCrashed as again:
        raise again from error


def check_tracing(config: RunConfig, *, has_run_dir: bool) -> None:
    """Refuse ``run.trace.otel`` that cannot work, before anything is built, written or spent.

    Raises:
        ConfigError: The ``otel`` extra is not installed (one line, with the
            command that installs it); ``jsonl`` without a run directory to
            write ``otel_spans.jsonl`` into; an engine that takes no tracer.
    """
    mode = config.run.trace.otel
    if mode == "off":
        return
    try:
        import opentelemetry.sdk.trace  # noqa: PLC0415  (the otel extra)

        if mode == "otlp":
            import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401, PLC0415
    except ImportError as exc:
        raise ConfigError(
            f"run.trace.otel={mode} needs the OpenTelemetry SDK"
            f"{' and OTLP exporter' if mode == 'otlp' else ''}, which is not installed "
            f"({exc.name or exc}): {install_hint('otel')}") from None
    if mode == "jsonl" and not has_run_dir:
        raise ConfigError("run.trace.otel=jsonl writes otel_spans.jsonl into the run "
                          "directory, and this run writes none: set run.out (or --out), or "
                          "use run.trace.otel=otlp")
    if config.sim.engine.step.built_in not in _TRACED_ENGINES:
        raise ConfigError(
            f"run.trace.otel={mode}: the step engine {config.sim.engine.step.built_in!r} "
            f"takes no tracer (traced: {', '.join(_TRACED_ENGINES)})")


#: The step engines that take a tracer (``engine.tracer``).
_TRACED_ENGINES: Final = ("round", "async_event")


def _start_tracing(config: RunConfig, rundir: RunDirectory | None) -> RunTracer | None:
    """The run's tracer (``run.trace.otel``), or None when it is off (nothing imported)."""
    mode = config.run.trace.otel
    if mode == "off":
        return None
    from ._otel import start_tracing  # noqa: PLC0415  (the otel extra, only when on)

    event = config.sim.engine.step.built_in == "async_event"
    return start_tracing(mode, path=None if rundir is None else rundir.file("otel"),
                         seed=config.seed, run_name=config.name,
                         provider_name=config.sim.llm.provider,
                         unit="window" if event else "step",
                         resource={"simulacra.engine": config.sim.engine.step.built_in})


def _schedule(config: RunConfig, scenario: Scenario, world: World,
              agents: list[Actor]) -> SocietyScenario:
    """*scenario* checked against the model's knobs and its fresh world, and expanded."""
    from ._rounds import index_agents  # noqa: PLC0415

    knobs = model_knobs(load_factory(config.sim.world.factory), config.sim.world.factory)
    end = scenario_end(config)
    try:
        return SocietyScenario(scenario, knobs, world, index_agents(agents), end=end)
    except ScenarioError as exc:
        if "after the end of the run" not in str(exc):
            raise
        what = ("a time is virtual time, and the run ends at sim.steps x window"
                if config.sim.engine.step.built_in == "async_event" else
                f"on the round engine a time is a step, and the last of sim.steps="
                f"{config.sim.steps} is {end:g}")
        raise ScenarioError(f"{exc}: {what}") from None


#: The overrides a resume takes: how to run, where the turns run, who answers the calls.
RESUMABLE: Final = ("run.", "sim.engine.shards=", "sim.engine.shard_mode=",
                    "sim.engine.partition=", "sim.llm.endpoints.", "sim.llm.routing.")
_RESUMABLE = RESUMABLE


def resume_society(run_dir: str | os.PathLike[str], *,
                   model: LanguageModel | None = None,
                   on_step: Callable[[StepReport], None] | None = None,
                   on_turn: Callable[[], None] | None = None,
                   from_checkpoint: int | None = None,
                   re_record: bool = False,
                   overrides: tuple[str, ...] = (),
                   control: RunControl | None = None,
                   _recover_tries: int | None = None) -> SocietyRun:
    """Continue an unfinished run directory from its last checkpoint.

    The world, the agents and the engine are rebuilt from the stored config
    and restored from the checkpoint (queue and clock, agent and world state,
    draw counters, each agent's position in the LLM recordings); the logs are
    cut back to where the checkpoint was taken; model calls already in the
    recordings are served from them, so the resumed run ends with the digest
    an uninterrupted run would have.

    Args:
        run_dir: The unfinished run directory.
        model: A model to use instead of the one the config names.
        on_step: Also called with each step's report.
        on_turn: Called after each turn.
        from_checkpoint: Resume from the checkpoint of this step rather than
            the newest (newer checkpoints are moved to ``checkpoints/superseded``).
        re_record: Resume even though the recordings are missing or hold
            fewer calls than the checkpoint counted. The steps before the
            checkpoint are not run again (their calls are not made again); the
            steps after it call the model anew and are recorded. The result
            may differ from an uninterrupted run (a real model answers
            differently), and the directory can no longer be replayed
            (``manifest.json``: ``"replayable": false``).
        overrides: Dotted overrides of ``run.*`` settings (budgets, limits);
            the simulation itself cannot change on resume.
        control: Lets another thread stop the run at the end of a step.

    Raises:
        ConfigError: *run_dir* holds no run, or a finished one; an override
            outside ``run.``.
        CheckpointError: It has no checkpoint; the checkpoint is of an unknown
            format version, truncated, corrupted or of another engine (the
            message names the newest valid one, for ``from_checkpoint``); the
            recordings are missing or do not match it. Nothing in the run
            directory is changed then.
    """
    from simulacra.errors import CheckpointError  # noqa: PLC0415

    from ._checkpoint import checkpoint_files  # noqa: PLC0415

    probe = RunDirectory(run_dir)
    data = probe.read_config()
    outside = [item for item in overrides
               if not item.startswith(_RESUMABLE)]
    if outside:
        raise ConfigError(f"a resumed run continues the stored simulation: only run.*, "
                          "sim.engine.shards, shard_mode and partition, and sim.llm.endpoints "
                          f"and routing can be overridden, got {outside[0]!r}")
    config = parse_config(data, str(probe.file("config")), overrides)
    moved = portable_factory(probe.path, config.sim.world.factory)
    if moved is not None:
        config = config.with_overrides([f"sim.world.factory={moved}"])
    if probe.file("digest").exists():
        raise ConfigError(f"run directory {str(probe.path)!r} holds a finished run; "
                          "nothing to resume")
    files = checkpoint_files(probe.checkpoints)
    if not files:
        raise CheckpointError(
            f"{str(probe.path)!r} has no checkpoint to resume from (run with "
            "run.checkpoint_every=N to write them)")
    manifest_path = probe.file("manifest")
    scenario = run_scenario(probe.path, read_manifest(manifest_path) if manifest_path.is_file()
                            else {}, config.data.get("scenario"))
    check_shards(config)
    check_tracing(config, has_run_dir=True)
    down = preflight_run(config) if model is None and config.run.preflight else {}
    # The model's modules first: the checkpoint holds objects of its classes.
    load_factory(config.sim.world.factory)
    engine_name = config.sim.engine.step.built_in
    chosen, state = _pick_checkpoint(probe, files, engine_name, from_checkpoint)
    try:
        step, positions, engine_state = state["step"], state["files"], state["engine"]
    except (KeyError, TypeError):
        raise CheckpointError(f"{chosen}: not a run checkpoint") from None
    complete = True
    if config.run.record:
        try:
            _check_recordings(probe, state.get("llm_position") or {}, step)
        except CheckpointError:
            if not re_record:
                raise
            complete = False  # resumed anyway: this directory can no longer be replayed
    sessions = state.get("accounting") or []
    newer = [f for f in files if f.name > chosen.name]
    if newer:  # resuming from an older checkpoint: keep the newer ones, out of the way
        aside = probe.checkpoints / "superseded"
        aside.mkdir(exist_ok=True)
        for file in newer:
            file.rename(aside / file.name)
    # A run made before ActionEvent.turn goes on as it was made (its events' step).
    meaning = event_step_of(read_manifest(manifest_path) if manifest_path.is_file() else {})
    rundir = RunDirectory.reopen(run_dir, positions)
    start_manifest(rundir.file("manifest"), config, completions="live+recordings",
                   replayable=None if complete else False, event_step=meaning)
    token = _EVENT_STEP.set(meaning)
    try:
        return _execute(config, rundir, model, on_step, on_turn, fatal=(),
                        resume=(step, engine_state, sessions), control=control,
                        scenario=scenario, down=down)
    except ShardCrashed as exc:
        tries = config.run.recover_shards if _recover_tries is None else _recover_tries
        return _recover(exc, rundir, tries, model=model, on_step=on_step, on_turn=on_turn,
                        control=control, overrides=overrides)
    finally:
        _EVENT_STEP.reset(token)


@dataclass(slots=True)
class _Tally:
    """What a run has done and spent, step by step, summed from the steps' reports.

    Counted once per step report, whichever engine made it, so a chunk of
    steps is never added twice; a checkpoint stores it, so that a resumed run
    counts what came before the resume too.
    """

    turns: int = 0
    failed: int = 0
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float = 0.0
    cost: float = 0.0
    #: The most tokens and cost of one step (what the next step may cost).
    max_step_tokens: int = 0
    max_step_cost: float = 0.0
    steps: int = 0
    #: Turns in which the agent asked the model nothing (live or recorded).
    quiet: int = 0

    def add(self, report: StepReport, cost: float, callers: int = 0) -> None:
        self.steps += 1
        self.turns += report.participants
        self.quiet += (max(0, report.participants - callers) if report.quiet is None
                       else report.quiet)
        self.failed += report.failed
        self.calls += report.llm_calls
        self.prompt_tokens += report.prompt_tokens
        self.completion_tokens += report.completion_tokens
        self.wall_s += report.wall_s
        self.cost += cost
        self.max_step_tokens = max(self.max_step_tokens,
                                   report.prompt_tokens + report.completion_tokens)
        self.max_step_cost = max(self.max_step_cost, cost)

    def merge(self, other: _Tally) -> None:
        for name in ("turns", "failed", "calls", "prompt_tokens", "completion_tokens", "wall_s",
                     "cost", "steps", "quiet"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.max_step_tokens = max(self.max_step_tokens, other.max_step_tokens)
        self.max_step_cost = max(self.max_step_cost, other.max_step_cost)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_json(self) -> dict[str, Any]:
        return {"steps": self.steps, "turns": self.turns, "failed": self.failed,
                "calls": self.calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "cost": round(self.cost, 9),
                "max_step_tokens": self.max_step_tokens,
                "max_step_cost": round(self.max_step_cost, 9), "wall_s": round(self.wall_s, 6),
                "quiet": self.quiet}

    @classmethod
    def from_json(cls, data: object) -> _Tally:
        if not isinstance(data, Mapping):
            return cls()
        out = cls()
        for name in ("steps", "turns", "failed", "calls", "prompt_tokens", "completion_tokens",
                     "max_step_tokens", "quiet"):
            setattr(out, name, int(data.get(name, 0)))
        for name in ("cost", "max_step_cost", "wall_s"):
            setattr(out, name, float(data.get(name, 0.0)))
        return out


def _price(config: RunConfig, prompt: int, completion: int) -> float:
    """The cost of *prompt* and *completion* tokens at ``sim.llm.pricing``."""
    pricing = config.sim.llm.pricing
    return float(prompt * pricing.prompt_per_mtok + completion * pricing.completion_per_mtok) / 1e6


class _BudgetReached(RunStopped):
    """A call was about to start with the run's budget already spent (fatal to the step)."""


class _AgentMeter(Metered, ModelWrapper):
    """A model wrapper that counts calls and tokens, in all and per agent (thread-safe).

    *limit*, if given, is asked before every call with this session's totals
    ``(prompt tokens, completion tokens)``; a reason it returns stops the call
    with :class:`_BudgetReached` (so a step cannot overrun the budget by more
    than the calls already in flight). The round engine counts its steps'
    calls with it too (it is a :class:`Metered`): one wrapper, one lock a call.
    """

    __slots__ = ("_counted", "callers", "cost", "limit", "per_agent", "price")

    def __init__(self, inner: LanguageModel,
                 limit: Callable[[int, int], str | None] | None = None, *,
                 price: Callable[[Completion], float | None] | None = None) -> None:
        super().__init__(inner)
        self.limit = limit
        #: ``price(completion)`` of each call (several endpoints, each with its
        #: pricing), or None: the run prices its tokens at ``sim.llm.pricing``.
        self.price = price
        #: This session's cost so far (with *price*), and the part already counted.
        self.cost = 0.0
        self._counted = 0.0
        #: agent -> [calls, prompt tokens, completion tokens] (and cost, with *price*)
        self.per_agent: dict[str, list[Any]] = {}
        #: Agents that asked for a call since the runner last cleared it (a step).
        self.callers: set[str] = set()

    def _check(self, site: CallSite | None) -> None:
        agent = "" if site is None else site.agent
        with self._lock:
            self.callers.add(agent)
        if self.limit is not None:
            why = self.limit(self.prompt_tokens, self.completion_tokens)
            if why is not None:
                raise _BudgetReached(why)

    def _count_at(self, site: CallSite | None, completion: Completion) -> Completion:
        agent = "" if site is None else site.agent
        prompt, done = completion.prompt_tokens, completion.completion_tokens
        price = self.price
        cost = 0.0 if price is None else price(completion) or 0.0
        with self._lock:
            row = self.per_agent.get(agent)
            if row is None:
                row = self.per_agent[agent] = [0, 0, 0] if price is None else [0, 0, 0, 0.0]
            row[0] += 1
            row[1] += prompt
            row[2] += done
            if price is not None:
                row[3] += cost
                self.cost += cost
            self.calls += 1
            self.prompt_tokens += prompt
            self.completion_tokens += done
        return completion

    def step_cost(self) -> float:
        """The cost of the calls since the last call of this (a step's, with *price*)."""
        with self._lock:
            cost, self._counted = self.cost - self._counted, self.cost
        return cost

    def complete(self, request: CompletionRequest, *, site: CallSite | None = None) -> Completion:
        self._check(site)
        return self._count_at(site, self.inner.complete(request, site=site))

    async def acomplete(self, request: CompletionRequest, *,
                        site: CallSite | None = None) -> Completion:
        self._check(site)
        return self._count_at(site, await self.inner.acomplete(request, site=site))


class RunControl:
    """Play, pause, step and stop a running society, from any thread, at its safe points.

    A safe point is the end of a step (of a window, on the event-driven
    engine): nothing is in flight there, so pausing, stepping or stopping
    changes how long the run takes and nothing else. A run paused and stepped
    through writes the events, telemetry counts and digest of the same run
    played straight; the wall-clock time spent paused is in no step's
    ``wall_s`` and does not make an automatic checkpoint due.

    ``simulacra run`` calls :meth:`request_stop` from its SIGINT and SIGTERM
    handlers (which also ends a pause); the live view (``--view``) calls
    :meth:`pause`, :meth:`play`, :meth:`step_once` and :meth:`request_stop`
    from its web server's thread.

    Args:
        paused: Start paused: the run waits before its first step (after
            the checkpoint of step 0) until :meth:`play` or :meth:`step_once`.
    """

    __slots__ = ("_cond", "_credits", "_ended", "_paused", "_waiting", "paused_s", "reason",
                 "settled", "step")

    def __init__(self, *, paused: bool = False) -> None:
        #: Why a stop was asked for ("SIGINT", "SIGTERM", ...), or None.
        self.reason: str | None = None
        #: The steps the run had finished at its last safe point (None before it started).
        self.step: int | None = None
        #: Wall-clock seconds the run has spent waiting while paused.
        self.paused_s = 0.0
        #: True once a requested stop has reached its safe point: the step in progress
        #: has finished and its checkpoint and files are being written. A second
        #: signal then has no step left to cut short (``simulacra run`` ignores it, so
        #: that the checkpoint of the last finished step is kept).
        self.settled = False
        # An RLock: a signal handler may call request_stop in the thread that waits.
        self._cond = threading.Condition(threading.RLock())
        self._paused = bool(paused)
        self._credits = 0
        self._waiting = False
        self._ended = False

    @property
    def paused(self) -> bool:
        """Whether the run stops at its next safe point (until :meth:`play`)."""
        return self._paused

    @property
    def waiting(self) -> bool:
        """Whether the run is waiting at a safe point now (paused there)."""
        return self._waiting

    @property
    def state(self) -> str:
        """What the run does now.

        ``"ended"`` (it returned, finished or stopped), ``"stopping"`` (a stop was
        asked for), ``"paused"`` (or about to be, at the next safe point) or
        ``"playing"``.
        """
        if self._ended:
            return "ended"
        if self.reason is not None:
            return "stopping"
        return "paused" if self._paused else "playing"

    def request_stop(self, reason: str = "stop requested") -> None:
        """Stop after the step in progress: a checkpoint is written, then RunStopped raised.

        A paused run stops at once (it is at a safe point already).
        """
        with self._cond:
            self.reason = reason
            self._cond.notify_all()

    def pause(self) -> None:
        """Wait at the next safe point: the step in progress finishes, the next does not start."""
        with self._cond:
            self._paused = True
            self._credits = 0
            self._cond.notify_all()

    def play(self) -> None:
        """Go on from a pause, step after step."""
        with self._cond:
            self._paused = False
            self._credits = 0
            self._cond.notify_all()

    def step_once(self) -> None:
        """Paused: run exactly one more step (window), then wait again.

        Playing: the same as :meth:`pause` (the step in progress is the one).
        Called n times while paused, it runs n steps.
        """
        with self._cond:
            if self._paused:
                self._credits += 1
            self._paused = True
            self._cond.notify_all()

    def wait_paused(self, timeout: float | None = None) -> bool:
        """Block until the run waits at a safe point, or has ended; False on *timeout*.

        For programs and tests that drive the run from another thread: after
        :meth:`pause` or :meth:`step_once`, this returns once the run has got
        there (a step still owed is run first), and :attr:`step` says where
        that is.
        """
        deadline = None if timeout is None else _time.monotonic() + timeout
        with self._cond:
            while not ((self._waiting and not self._credits) or self._ended):
                left = None if deadline is None else deadline - _time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            return True

    # -- what the run calls --------------------------------------------------------

    def _should_yield(self) -> bool:
        """The engine's ``pause`` callback: return at this safe point (to wait there)."""
        return self._paused or self.reason is not None

    def _wait(self, step: int) -> float:
        """At a safe point after *step* steps: wait while paused; the seconds waited.

        Returns at once when playing, when a :meth:`step_once` is owed (using it
        up) or when a stop is asked for.
        """
        with self._cond:
            self.step = step
            if not self._paused or self.reason is not None:
                return 0.0
            if self._take_credit():
                return 0.0
            start = _time.perf_counter()
            self._waiting = True
            self._cond.notify_all()
            try:
                while self._held():
                    # A timeout, so that a signal's handler always gets to run.
                    self._cond.wait(0.25)
                self._take_credit()
            finally:
                self._waiting = False
                self._cond.notify_all()
            waited = _time.perf_counter() - start
            self.paused_s += waited
            return waited

    def _take_credit(self) -> bool:
        """Use up one owed :meth:`step_once`, if any (while paused and not stopping)."""
        if self._paused and self._credits and self.reason is None:
            self._credits -= 1
            return True
        return False

    def _held(self) -> bool:
        """Whether a waiting run must go on waiting (read afresh: other threads change it)."""
        return self._paused and not self._credits and self.reason is None

    def _again(self) -> None:
        """The run goes on after all (a lost shard's run, resumed at once)."""
        with self._cond:
            self._ended = False

    def _end(self, step: int | None) -> None:
        """The run returned (finished, stopped or failed) after *step* steps."""
        with self._cond:
            if step is not None:
                self.step = step
            self._ended = True
            self._cond.notify_all()


def _pick_checkpoint(probe: RunDirectory, files: list[Path], engine: str,
                     wanted: int | None) -> tuple[Path, Any]:
    """The checkpoint to resume from and its state: the newest, or the one of step *wanted*."""
    from simulacra.errors import CheckpointError  # noqa: PLC0415

    from ._checkpoint import checkpoint_step, read_checkpoint  # noqa: PLC0415

    if wanted is not None:
        match = [f for f in files if checkpoint_step(f) == wanted]
        if not match:
            steps = ", ".join(str(checkpoint_step(f)) for f in files)
            raise CheckpointError(f"{str(probe.path)!r} has no checkpoint of step {wanted} "
                                  f"(it has: {steps})")
        return match[0], read_checkpoint(match[0], engine)
    try:
        return files[-1], read_checkpoint(files[-1], engine)
    except CheckpointError as damaged:
        for older in reversed(files[:-1]):
            try:
                read_checkpoint(older, engine)
            except CheckpointError:
                continue
            step = checkpoint_step(older)
            raise CheckpointError(
                f"{damaged}; the newest valid checkpoint is that of step {step}: "
                f"`simulacra run --resume {probe.path} --from-checkpoint {step}` "
                "continues from it") from None
        raise


#: The engine state of a checkpoint taken before the first step of a fresh run:
#: the state the world factory builds, so nothing to restore.
AS_BUILT: Final = {"scheme": "simulacra.societies.as_built.v1"}


def is_as_built(state: object) -> bool:
    """Whether a checkpoint's engine *state* is :data:`AS_BUILT` (restore nothing)."""
    return isinstance(state, Mapping) and state.get("scheme") == AS_BUILT["scheme"]


def _check_recordings(probe: RunDirectory, position: Mapping[str, int], step: int) -> None:
    """Refuse to resume when the recordings cannot serve the calls made before the checkpoint."""
    from simulacra.errors import CheckpointError, RecordingError  # noqa: PLC0415
    from simulacra.llm import RecordingStore  # noqa: PLC0415  (lazy)

    where = probe.file("recordings")
    made = sum(int(n) for n in position.values())
    hint = ("; `--re-record` resumes anyway: the steps after the checkpoint call the model "
            "anew, and the run directory can no longer be replayed")
    if not where.is_file():
        if made == 0:
            return
        raise CheckpointError(
            f"{where} is missing: the {made} model call{'' if made == 1 else 's'} made before "
            f"the checkpoint of step {step} cannot be served again{hint}")
    try:
        with RecordingStore(where, readonly=True) as store:
            held = store.calls_per_agent()
    except RecordingError as exc:
        raise CheckpointError(f"{exc}{hint}") from None
    short = sorted((agent, held.get(agent, 0), int(n)) for agent, n in position.items()
                   if held.get(agent, 0) < int(n))
    if short:
        agent, have, need = short[0]
        raise CheckpointError(
            f"{where} does not match the checkpoint of step {step}: it holds {have} of the "
            f"{need} call{'' if need == 1 else 's'} agent {agent!r} had made ({len(short)} "
            f"agent{'' if len(short) == 1 else 's'} short){hint}")


def _execute(config: RunConfig, rundir: RunDirectory | None, model: LanguageModel | None,
             on_step: Callable[[StepReport], None] | None, on_turn: Callable[[], None] | None,
             *, fatal: tuple[type[BaseException], ...],
             resume: tuple[int, Any, Any] | None,
             control: RunControl | None = None,
             scenario: Scenario | None = None,
             prepared: tuple[World, list[Actor], SocietyScenario | None] | None = None,
             routed: Router | None = None,
             down: Mapping[str, ProviderUnavailable] | None = None
             ) -> SocietyRun:
    from simulacra.errors import RecordingError  # noqa: PLC0415  (lazy)
    from simulacra.llm import RecordingModel, RecordingStore  # noqa: PLC0415  (lazy)

    factory = _step_engine(config.sim.engine.step.built_in)
    store = None
    calllog: CallLog | None = None
    tracer: RunTracer | None = None
    inner: LanguageModel | None = None
    recording: RecordingModel | None = None
    #: This session's counts, and those of the sessions before the resume.
    tally = _Tally()
    before: list[dict[str, Any]] = [] if resume is None else list(resume[2])
    earlier = _Tally()
    for session in before:
        earlier.merge(_Tally.from_json(session))
    session_events: list[ActionEvent] = []
    # A damaged or unwritable recording store is no agent's failure either: it stops the
    # run (as a turn that failed, a replay went on and blamed a later call's request).
    fatal = (*fatal, ProviderUnavailable, _BudgetReached, RecordingError, UnknownEndpoint)
    first = 0 if resume is None else int(resume[0])
    checkpoint_stats: dict[str, Any] = {"written": 0, "seconds": 0.0}

    built: list[Any] = []  # what holds shards, closed at the end

    def sessions() -> list[dict[str, Any]]:
        meter_rows = {agent: list(row) for agent, row in sorted(meter.per_agent.items())}
        return [*before, {"from_step": first, **tally.to_json(), "per_agent": meter_rows}]

    try:
        if prepared is not None:
            world, agents, schedule = prepared
        else:
            world, agents = _build_frozen(config)
            schedule = None if scenario is None else _schedule(config, scenario, world,
                                                               agents)
        router = routed
        if router is None and model is None and uses_endpoints(config):
            router = build_router(config, [agent.id for agent in agents], down)
        shard_calls: ServedCalls | None = None
        if config.sim.engine.shards > 1:
            # The shards make the calls; the run's stack below passes them through.
            shard_calls = ServedCalls()
            inner = shard_calls
        else:
            inner = (router if router is not None else build_model(config) if model is None
                     else model)
        used: LanguageModel = inner
        guard: ProviderGuard | None = None
        # Each call at its endpoint's pricing (a run over endpoints, its replay too).
        pricer = (router.price if router is not None
                  else endpoint_pricer(config) if uses_endpoints(config) else None)
        if model is None and router is None and shard_calls is None:
            used = guard = ProviderGuard(inner, config.run.max_consecutive_provider_failures)
        if rundir is not None:
            # Inside the recordings: a call a resumed run serves from them is not logged again.
            calllog = CallLog(rundir.file("calls"), session=len(before),
                              price=lambda p, c: _price(config, p, c),
                              priced=pricer)
            used = CallLogModel(used, calllog)
        tracer = _start_tracing(config, rundir)
        if tracer is not None:
            # Where calls.jsonl logs them: a call served from the recordings is no span.
            from ._otel import TracedModel  # noqa: PLC0415  (only when on)

            used = TracedModel(used, tracer)
        if rundir is not None and config.run.record:
            store = RecordingStore(rundir.file("recordings"))
            # One commit per step, in step_done; written by a child process when the steps
            # are large enough to pay for starting it (see RecordingStore.hold).
            store.hold(offload=_calls_per_step(config) >= OFFLOAD_CALLS)
            used = recording = RecordingModel(used, store, reuse=resume is not None)
        def reached(prompt: int, completion: int) -> str | None:
            budget = config.run.budget
            tokens = earlier.tokens + prompt + completion
            cost = earlier.cost + (_price(config, prompt, completion) if pricer is None
                                   else meter.cost)
            if budget.tokens is not None and tokens >= budget.tokens:
                return f"the run's tokens reached run.budget.tokens={budget.tokens}"
            if budget.cost is not None and cost >= budget.cost:
                return f"the run's cost reached run.budget.cost={budget.cost:g}"
            return None

        budget = config.run.budget
        meter = _AgentMeter(used, None if budget.tokens is None and budget.cost is None
                            else reached, price=pricer)

        def step_done(report: StepReport) -> None:
            # The step's calls go to the store's writer thread (SQLite writes them
            # on another core while the step's events are written). They are durable
            # before the next step makes its first call (RecordingModel waits), before
            # any checkpoint (durable(), below) and before the run ends: a crash loses
            # only the calls of the step in flight, which a resume asks again.
            if store is not None:
                store.commit(wait=False)
            if calllog is not None:
                calllog.flush()
            if tracer is not None:
                tracer.flush()
            cost = (_price(config, report.prompt_tokens, report.completion_tokens)
                    if pricer is None else meter.step_cost())
            # The step's turns that asked the model nothing: its turns less the
            # distinct agents that asked (one turn each a step on the round engine).
            callers = len(meter.callers)
            meter.callers.clear()
            tally.add(report, cost, callers)
            if rundir is None:
                session_events.extend(e for e in report.events if e.kind == "turn_failed")
            if rundir is not None:
                rundir.on_step(report, {"cost": round(cost, 9)})
            if on_step is not None:
                on_step(report)

        if shard_calls is not None:
            sharded_engine, closes = _sharded_engine(
                config, world, agents, model=meter, given=model, served=shard_calls,
                down=down or {}, reuse=(str(rundir.file("recordings")) if resume is not None
                                        and rundir is not None and config.run.record
                                        else None),
                on_step=step_done, on_turn=on_turn, fatal=fatal)
            built.append(closes)
            engine: StepEngine = sharded_engine
        else:
            engine = factory(world, agents, model=meter,
                             seed=as_seed_tree(config.seed).child("engine"),
                             config=config, on_step=step_done, on_turn=on_turn, fatal=fatal)
        if schedule is not None:
            use = getattr(engine, "use_scenario", None)
            if not callable(use):
                raise ConfigError(f"the step engine {config.sim.engine.step.built_in!r} "
                                  "cannot take a scenario (it has no use_scenario())")
            use(schedule)
        if resume is not None and not is_as_built(resume[1]):
            engine.restore(resume[1])
        if tracer is not None:
            engine.tracer = tracer  # type: ignore[attr-defined]  # a traced engine (checked)
        use_event_step = getattr(engine, "use_event_step", None)
        if callable(use_event_step):  # the event-driven engine: what its events' step holds
            use_event_step(_EVENT_STEP.get())
        if store is not None and hasattr(engine, "calls_done"):
            # The step's calls are written behind while its events are resolved.
            engine.calls_done = functools.partial(store.commit, wait=False)
        if calllog is not None:
            calllog.context = getattr(engine, "call_context", None) or (
                lambda _agent: (first + tally.steps, first + tally.steps,
                                float(first + tally.steps)))
            calllog.simulated = getattr(engine, "simulated_latency", None)
            if shard_calls is not None:  # a call's wall time is its time in its shard
                walls = shard_calls.walls
                calllog.wall_of = lambda site: walls.get((site.agent, site.n))
        try:
            # A step's objects (events, held recordings, prompts) live long enough to
            # reach the oldest generation; full collections over them were 10% of a run.
            with full_collections_deferred():
                result = _drive(engine, config, rundir, agents, first, accounting=sessions,
                                spent=lambda: _spent(earlier, tally), control=control,
                                checkpoints=checkpoint_stats,
                                healthy=lambda: (guard is None or guard.tripped is None) and (
                                    router is None or router.tripped is None),
                                durable=None if store is None else store.sync)
        except Exception as exc:
            reached_budget = _find(exc, _BudgetReached)
            if reached_budget is not None:
                raise _budget_stop(str(reached_budget), config, rundir, first + tally.steps,
                                   _spent(earlier, tally)) from None
            unrouted = _find(exc, UnknownEndpoint)
            if unrouted is not None:  # a routing function's answer: the config's mistake
                raise UnknownEndpoint(str(unrouted)) from None
            unusable = _find(exc, ProviderUnavailable)
            if unusable is None:
                raise
            raise _stopped(unusable, config, rundir, first + tally.steps) from None
        summary = world.summary()
        scenario_summary: dict[str, Any] = {} if schedule is None else {
            "name": schedule.name, "sha256": schedule.scenario.hash,
            "changes": len(schedule.changes), "applied": schedule.applied}
        whole = _spent(earlier, tally)
        result = dataclasses.replace(result, llm_calls=whole.calls, wall_s=whole.wall_s)
        per_agent: dict[str, list[float]] = {}
        for session in sessions():
            for agent, row in (session.get("per_agent") or {}).items():
                total = per_agent.setdefault(agent, [0, 0, 0, 0.0])
                for i in range(3):
                    total[i] += int(row[i])
                # a priced row (endpoints) carries its cost; others are priced below
                total[3] += float(row[3]) if len(row) > 3 else _price(config, int(row[1]),
                                                                        int(row[2]))
        llm: dict[str, Any] = {
            "provider": config.sim.llm.provider, "model": config.sim.llm.model,
            "calls": whole.calls, "prompt_tokens": whole.prompt_tokens,
            "completion_tokens": whole.completion_tokens, "tokens": whole.tokens,
            "cost": round(whole.cost, 9),
            "pricing": dict(config.data["sim"]["llm"].get("pricing") or {}),
            "per_agent": {agent: {"calls": int(row[0]), "prompt_tokens": int(row[1]),
                                  "completion_tokens": int(row[2]),
                                  "cost": round(float(row[3]), 9)}
                          for agent, row in sorted(per_agent.items())},
            "sessions": [{k: v for k, v in session.items() if k != "per_agent"}
                         for session in sessions()]}
        if uses_endpoints(config):
            llm["provider"] = "endpoints"
            llm["model"] = None
            llm["endpoints"] = endpoints_info(config)
            # The whole run's (every session's), from calls.jsonl; this session's otherwise.
            moved = dict(router.moved) if router is not None else {}
            down_now = set(router.down) if router is not None else set()
            if calllog is not None:
                calllog.flush()
                moved = _fallbacks(rundir.file("calls")) if rundir is not None else moved
            llm["endpoints_down"] = sorted(down_now | {a for a, _b in moved})
            llm["fallbacks"] = [{"from": a, "to": b, "calls": n}
                                for (a, b), n in sorted(moved.items())]
        usage = _usage(inner)
        if usage:
            # What the provider itself counted, this session (HTTP attempts, retries...).
            llm["provider_usage"] = usage
        served = 0
        if recording is not None:
            # This session only: calls that reached the model (and were
            # recorded), and calls a resumed run served from the recordings.
            llm["recorded_this_session"] = recording.recorded
            llm["served_from_recordings"] = served = recording.reused
        replayed = getattr(inner, "calls_served", None)  # a ReplayModel (simulacra replay)
        if isinstance(replayed, int) and not isinstance(replayed, bool):
            llm["served_from_recordings"] = served = served + replayed
        session_calls = tally.calls
        llm["throughput"] = _throughput(whole, session_calls, served)
        early = getattr(getattr(engine, "engine", None), "early_starts", None)
        if isinstance(early, int) and not isinstance(early, bool):
            # The event engine's (this session's): turns begun before the kernel reached
            # them, where the world names who affects whom (World.affected_by).
            llm["throughput"]["turns_started_early"] = early
        ahead = getattr(getattr(engine, "engine", None), "committed_ahead", None)
        if isinstance(ahead, int) and not isinstance(ahead, bool) and ahead:
            # Out of order (this session's): turns resolved in the forward world before
            # the kernel reached them.
            llm["throughput"]["turns_committed_ahead"] = ahead
        carried = getattr(getattr(engine, "engine", None), "carried", None)
        if isinstance(carried, int) and not isinstance(carried, bool):
            # The event engine's (this session's): turns whose calls were still in flight
            # at a window's end and carried on into the next (no barrier a step).
            llm["throughput"]["turns_carried_over"] = carried
        failures = _failure_summary(
            rundir.iter_events("turn_failed") if rundir is not None else session_events,
            whole.turns)
        if store is not None:
            store.sync()  # every call in the file before the run says it finished
        if rundir is not None:
            rundir.finish(result.digest, {
                "name": config.name, "seed": config.seed, "digest": result.digest,
                "steps": result.steps, "agents": len(agents), "events": result.event_count,
                "failed_turns": result.failed, "step_digests": list(result.step_digests),
                "world_digest": result.world_digest, "agents_digest": result.agents_digest,
                "engine": {"step": config.sim.engine.step.built_in,
                           "mode": config.sim.engine.mode,
                           "concurrency": config.sim.engine.concurrency},
                "resumed_from_step": None if resume is None else first,
                "turns": whole.turns, "failures": failures, "llm": llm, "summary": summary,
                "checkpoints": {"written": checkpoint_stats["written"],
                                "seconds": round(checkpoint_stats["seconds"], 6)},
                "wall_s": round(whole.wall_s, 3),
                **({"scenario": scenario_summary} if scenario_summary else {})})
            if store is not None:
                store.close()  # committed, so that its hash is the file's final one
            finish_manifest(rundir.file("manifest"), rundir.file("recordings"))
    finally:
        for sharded in built:
            sharded.close()
        if calllog is not None:
            calllog.close()
        if tracer is not None:
            tracer.close()
        if rundir is not None:
            rundir.close()
        if store is not None:
            store.close()
        if model is None and inner is not None:
            close = getattr(inner, "close", None)
            if callable(close):
                close()
        if control is not None:
            control._end(first + tally.steps)
    return SocietyRun(config, result, world, summary, None if rundir is None else rundir.path,
                      llm, failures, scenario_summary)


def _fallbacks(calls: Path) -> dict[tuple[str, str], int]:
    """``(from, to) -> calls`` moved to a fallback, in ``calls.jsonl`` (every session)."""
    import json  # noqa: PLC0415

    moved: dict[tuple[str, str], int] = {}
    try:
        with calls.open(encoding="utf-8") as lines:
            for line in lines:
                if '"fallback_from"' not in line:
                    continue
                try:
                    record = json.loads(line)
                except ValueError:  # a line a kill cut short
                    continue
                if record.get("ok") and record.get("endpoint"):
                    pair = (str(record["fallback_from"]), str(record["endpoint"]))
                    moved[pair] = moved.get(pair, 0) + 1
    except FileNotFoundError:
        pass
    return moved


def _throughput(whole: _Tally, session_calls: int, served: int) -> dict[str, Any]:
    """The run's speed and how much of it needed the model (summary.json ``llm.throughput``).

    ``agent_steps`` are turns taken (over every session); ``per_s`` and
    ``us_per_agent_step`` are over the engine's wall clock (the steps
    themselves: not the world's build, nor the files written at the end);
    ``calls_made`` are this session's calls that reached a model,
    ``served_from_recordings`` those a resume or a replay served from the
    recordings; ``no_call_share`` the share of agent-steps that asked the model
    nothing at all.
    """
    turns, wall = whole.turns, whole.wall_s
    return {"agent_steps": turns,
            "per_s": round(turns / wall, 1) if wall > 0 else None,
            "us_per_agent_step": round(wall / turns * 1e6, 2) if turns else None,
            "calls_made": max(0, session_calls - served),
            "served_from_recordings": served,
            "no_call_agent_steps": whole.quiet,
            "no_call_share": round(whole.quiet / turns, 6) if turns else 0.0}


def _spent(earlier: _Tally, session: _Tally) -> _Tally:
    whole = _Tally()
    whole.merge(earlier)
    whole.merge(session)
    return whole


def _find(error: BaseException, kind: type[E]) -> E | None:
    """*error* itself or the first of its causes that is a *kind*."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, kind):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _budget_stop(why: str, config: RunConfig, rundir: RunDirectory | None, steps: int,
                 spent: _Tally) -> RunStopped:
    """The stop of a run whose budget ran out inside a step: resume from the last checkpoint."""
    last = None if rundir is None else rundir.last_checkpoint()
    where = ("" if last is None else f" (from its checkpoint of step {last}; the calls made "
             "since are served from the recordings)")
    message = _stop_message("budget", f"{why}, in the step after them", config, rundir,
                            step=steps, spent=spent)
    return _run_stopped("budget", message + where, steps, rundir)


def _run_stopped(kind: str, message: str, step: int, rundir: RunDirectory | None) -> RunStopped:
    error = RunStopped(message)
    error.reason, error.step = kind, step
    error.run_dir = None if rundir is None else str(rundir.path)
    return error


def _stopped(error: ProviderUnavailable, config: RunConfig, rundir: RunDirectory | None,
             steps: int) -> ProviderUnavailable:
    """The error that stops a run whose provider became unusable: what, and how to go on."""
    message = (f"the run stopped after {steps} of {config.sim.steps} "
               f"step{'' if config.sim.steps == 1 else 's'}: {error}")
    if rundir is not None:
        step = rundir.last_checkpoint()
        if step is not None:
            message += (f"; `simulacra run --resume {rundir.path}` continues it from its "
                        f"checkpoint of step {step}")
        else:
            message += ("; no checkpoint was written yet (run.checkpoint_every), so it "
                        "cannot be resumed")
    return ProviderUnavailable(message)


def _checkpoint_steps(config: RunConfig) -> int | None:
    """Steps between checkpoints, from ``run.checkpoint_every`` or ``checkpoint_every_time``.

    A time is divided by the virtual time of one step: 1.0 for rounds, the
    window of the event-driven engine.

    Raises:
        ConfigError: Both are set, or the time is not a whole number of steps.
    """
    run = config.run
    every: int | None = run.checkpoint_every
    period: float | None = run.checkpoint_every_time
    if period is None:
        return every
    if every is not None:
        raise ConfigError("run.checkpoint_every and run.checkpoint_every_time are both set; "
                          "set one")
    step = config.sim.engine.step
    width = float(step.options.get("window", 1.0)) if step.built_in == "async_event" else 1.0
    steps = period / width
    if steps < 1 or abs(steps - round(steps)) > 1e-9:
        raise ConfigError(
            f"run.checkpoint_every_time must be a whole number of steps of {width} units of "
            f"virtual time, got {period}")
    return round(steps)


#: The share of run time that checkpoints may take when ``run.checkpoint_every`` is unset.
CHECKPOINT_SHARE = 0.04
#: No automatic checkpoint before a run has taken this many wall-clock seconds.
CHECKPOINT_FIRST_S = 2.0


def _over_budget(config: RunConfig, spent: _Tally) -> str | None:
    """Why the next step would exceed ``run.budget``, or None."""
    budget = config.run.budget
    if budget.tokens is not None and spent.tokens + spent.max_step_tokens > budget.tokens:
        return (f"the next step would exceed run.budget.tokens={budget.tokens}: "
                f"{spent.tokens} tokens spent, a step takes up to {spent.max_step_tokens}")
    if budget.cost is not None and spent.cost + spent.max_step_cost > budget.cost:
        return (f"the next step would exceed run.budget.cost={budget.cost:g}: "
                f"{spent.cost:.6g} spent, a step costs up to {spent.max_step_cost:.6g}")
    return None


def _drive(engine: StepEngine, config: RunConfig, rundir: RunDirectory | None,
           agents: list[Actor], first: int, *,
           accounting: Callable[[], list[dict[str, Any]]],
           spent: Callable[[], _Tally],
           control: RunControl | None,
           checkpoints: dict[str, Any],
           healthy: Callable[[], bool] = lambda: True,
           durable: Callable[[], None] | None = None) -> RoundResult:
    """Run steps *first* .. ``sim.steps``, with checkpoints, budgets and stop requests.

    A checkpoint of the state before step 0 is always written; later ones
    every ``run.checkpoint_every`` steps when that is set, else automatically:
    once ``CHECKPOINT_FIRST_S`` seconds have passed since the last one and
    checkpoints would take at most ``CHECKPOINT_SHARE`` of the run (a
    checkpoint's cost includes the event engine's wait for its calls in flight,
    ``drain_s``). At
    the end of every step (a safe point) the run stops, with a checkpoint,
    when *control* asks it to or the next step would exceed ``run.budget``:
    :class:`~simulacra.RunStopped`. *accounting* gives the counts of every
    session so far (stored in the checkpoint, so a resumed run counts them);
    *spent* the whole run's. *checkpoints* counts in ``written`` and
    ``seconds`` the checkpoints written and the wall time they took (engine
    state included). No checkpoint is written while *healthy* says False: once
    the provider guard has tripped, agents hold calls it refused, which no
    recording serves, and the run is about to stop at an earlier checkpoint.
    *durable* makes the calls recorded so far durable; it is called before
    every checkpoint is written (the recordings' write-behind).
    """
    from ._checkpoint import write_checkpoint  # noqa: PLC0415

    total = config.sim.steps
    every = _checkpoint_steps(config) if rundir is not None else None
    automatic = rundir is not None and every is None
    engine_name = config.sim.engine.step.built_in
    clock = _time.perf_counter
    since = clock()
    cost = 0.0  # of the last checkpoint

    def checkpoint(step: int) -> None:
        nonlocal since, cost
        if rundir is None or step >= total:
            return
        if (rundir.checkpoints / f"checkpoint-{step:06d}.ckpt").exists():
            return  # written already, or the one this run resumed from: never twice
        if not healthy():
            return  # the provider is unusable: the stop names the last good checkpoint
        start = clock()
        if durable is not None:
            durable()  # the calls before the checkpoint are in the file when it is
        # Before the first step of a fresh run the state is the factory's: a
        # resume builds it again (as a replay does), so the checkpoint holds a
        # marker, not a million agents. The calls made so far, per agent, for
        # the agents that made any (a resume checks the recordings hold them).
        fresh = step == 0 and first == 0
        write_checkpoint(rundir.checkpoints, step, engine_name, {
            "step": step, "files": rundir.positions(),
            "engine": dict(AS_BUILT) if fresh else engine.state(),
            "accounting": accounting(),
            "llm_position": {str(a.id): calls for a in agents
                             if (calls := getattr(a, "calls", 0))}})
        # The event engine waited for its calls in flight before it (no wait at a step's
        # end otherwise): that is this checkpoint's price too.
        cost = clock() - start + float(getattr(engine, "drain_s", 0.0) or 0.0)
        since = clock()
        checkpoints["written"] += 1
        checkpoints["seconds"] += cost

    def stop_reason() -> tuple[str, str] | None:
        if control is not None and control.reason is not None:
            return "signal", control.reason
        over = _over_budget(config, spent())
        return None if over is None else ("budget", over)

    def due() -> bool:
        if not automatic:
            return False
        waited = clock() - since
        return waited >= CHECKPOINT_FIRST_S and waited * CHECKPOINT_SHARE >= cost

    def should_pause() -> bool:
        """At the end of a step: whether the engine returns here (a stop, a checkpoint...)."""
        if stop_reason() is not None:
            if control is not None:
                control.settled = True  # the step is done: its checkpoint comes next
            return True
        return due() or (control is not None and control._should_yield())

    step = first
    # The chunks' results carry no digests (a walk over every agent each); the
    # final one, below, does.
    deferring = hasattr(engine, "defer_digests")
    if deferring:
        engine.defer_digests = True  # type: ignore[attr-defined]
    result = engine.run(0)
    if first == 0 and total > 0:
        # The state before step 0: cheap, and it means that a run stopped for
        # any reason (a dead provider included) can always be resumed, serving
        # the calls it already made from the recordings.
        checkpoint(0)
    stop = stop_reason()
    while step < total and stop is None:
        if control is not None:
            # The safe point where play / pause / step act; the pause is no run time.
            since += control._wait(step)
            stop = stop_reason()
            if stop is not None:
                control.settled = True
                checkpoint(step)
                break
        chunk = total - step if every is None else min(every - step % every, total - step)
        result = engine.run(chunk, pause=should_pause)
        step = result.steps
        stop = stop_reason() if step < total else None
        if stop is not None or (every is not None and step % every == 0) or due():
            checkpoint(step)
    if stop is not None:
        kind, why = stop
        said = spent()
        # The event engine's calls that returned after the last step's report (a stop
        # asked for during it): the resumed run's first step counts them; say them here.
        late = getattr(engine, "unreported", None)
        if callable(late):
            calls, prompt, completion = late()
            said.calls += calls
            said.prompt_tokens += prompt
            said.completion_tokens += completion
        raise _run_stopped(kind, _stop_message(kind, why, config, rundir, step=step,
                                               spent=said), step, rundir)
    if deferring:
        engine.defer_digests = False  # type: ignore[attr-defined]
        result = dataclasses.replace(engine.run(0), llm_calls=result.llm_calls,
                                     wall_s=result.wall_s)
    return result


def _stop_message(kind: str, why: str, config: RunConfig, rundir: RunDirectory | None, *,
                  step: int, spent: _Tally) -> str:
    what = (f"{spent.calls} model call{'' if spent.calls == 1 else 's'}, {spent.tokens} "
            f"token{'' if spent.tokens == 1 else 's'}")
    if spent.cost:
        what += f", cost {spent.cost:.6g}"
    # Steps are counted as the checkpoints count them: checkpoint-000033 holds the run
    # after 33 steps (steps 0-32), the state step 33 starts from.
    done = f"{step} of {config.sim.steps} step{'' if config.sim.steps == 1 else 's'}"
    head = f"stopped after {done} ({why}); spent so far: {what}"
    if rundir is None:
        return head + "; no run directory, so it cannot be resumed"
    more = ""
    if kind == "budget":
        budget = config.run.budget
        more = (f" run.budget.cost={max(budget.cost or 0.0, spent.cost) * 2:.6g}"
                if budget.cost is not None else
                f" run.budget.tokens={max(budget.tokens or 0, spent.tokens) * 2}")
    return head + f"; `simulacra run --resume {rundir.path}{more}` continues it"


# -- replaying -------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class ReplayReport:
    """What a replay found.

    Attributes:
        run_dir: The run directory replayed.
        expected: The digest the run ended with.
        digest: The replay's digest.
        calls_served: Completions served from the recordings.
        model_calls: Calls that reached a model (always 0: replays call none).
        divergence: Where the replay's events first differ from the run's, or None.
        run: The replay itself.
    """

    run_dir: Path
    expected: str
    digest: str
    calls_served: int
    model_calls: int
    divergence: str | None
    run: SocietyRun

    @property
    def event_count(self) -> int:
        """How many events the replay made (and compared with the log)."""
        return self.run.result.event_count

    @property
    def events(self) -> int:
        """Deprecated: the count :attr:`event_count` gives."""
        return _deprecated_count(self, self.event_count)

    @property
    def matches(self) -> bool:
        """Whether the replay is the run: the same digest, and every event of the log."""
        return self.digest == self.expected and self.divergence is None


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def _divergence(recorded: list[str], replayed: list[str]) -> str | None:
    """Where the replayed events first differ from the lines of ``action_events.jsonl``."""
    for i, (a, b) in enumerate(zip(recorded, replayed, strict=False)):
        if a != b:
            at = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                      min(len(a), len(b)))
            if max(len(a), len(b)) > 240 and at > 80:  # show where they part
                a, b = "..." + a[at - 60:], "..." + b[at - 60:]
            return (f"event {i} (line {i + 1} of action_events.jsonl): the log has "
                    f"{_clip(a)} but the replay made {_clip(b)}")
    if len(recorded) != len(replayed):
        shorter = "log" if len(recorded) < len(replayed) else "replay"
        return (f"the log has {len(recorded)} event{'' if len(recorded) == 1 else 's'}, "
                f"the replay {len(replayed)} (the "
                f"{shorter} ends early; equal up to event {min(len(recorded), len(replayed))})")
    return None


def replay_run(run_dir: str | os.PathLike[str], *, overrides: tuple[str, ...] = (),
               out: str | os.PathLike[str] | None = None,
               on_step: Callable[[StepReport], None] | None = None,
               on_turn: Callable[[], None] | None = None,
               check: bool = True) -> ReplayReport:
    """Re-run a run directory from its recordings (no model calls); compare digests and events.

    Args:
        run_dir: A finished run directory.
        overrides: Dotted overrides of how to run (``sim.engine.mode=sequential``).
        out: Also write the replay as a run directory there.
        on_step: Called with each step's report.
        on_turn: Called after each turn.
        check: Raise :class:`~simulacra.DeterminismError` when the digests differ
            or an event of ``action_events.jsonl`` differs from the replay's.

    Raises:
        ConfigError: *run_dir* is not a finished run directory.
        AgentActionError: A call was not in the recordings (strict replay); the
            chained ``ReplayMiss`` names the call site.
        DeterminismError: With *check*, the replay's digest differs; the
            message names the first event that differs.
    """
    from simulacra.errors import ReplayMiss  # type: ignore[attr-defined,unused-ignore]  # noqa: PLC0415
    from simulacra.llm import RecordingStore, ReplayModel  # noqa: PLC0415  (lazy)

    rundir = RunDirectory(run_dir)
    data = rundir.read_config()
    expected = rundir.read_digest()
    allowed = ("sim.engine.mode=", "sim.engine.concurrency=", "sim.engine.shards=",
               "sim.engine.shard_mode=", "sim.engine.partition=")
    other = [item for item in overrides if not item.startswith(allowed)]
    if other:
        raise ConfigError(f"a replay runs the recorded simulation: only sim.engine.mode, "
                          "concurrency, shards and shard_mode can be overridden, got "
                          f"{other[0]!r}")
    # A replay spends nothing: budgets, failure limits and checkpoints do not bind it.
    config = parse_config(data, str(rundir.file("config")),
                          (*overrides, "run.budget.cost=null", "run.budget.tokens=null",
                           "run.max_failed_fraction=1.0", "run.preflight=false",
                           *(() if out is not None else ("run.trace.otel=off",))))
    moved = portable_factory(rundir.path, config.sim.world.factory)
    if moved is not None:
        config = config.with_overrides([f"sim.world.factory={moved}"])
    manifest = rundir.file("manifest")
    stated = read_manifest(manifest) if manifest.is_file() else {}
    simulated = stated.get("simulation_sha256")  # manifests written before it have none
    if isinstance(simulated, str) and simulation_sha256(data) != simulated:
        raise ConfigError(
            f"{rundir.file('config')}: it was changed after the run (manifest.json has the "
            f"SHA-256 of what the run simulated, {simulated[:12]}...): a replay re-runs the "
            "run as it was made; restore the file, or run the changed config as a new run")
    scenario = run_scenario(rundir.path, stated, data.get("scenario"))
    if stated.get("replayable") is False:
        raise ConfigError(
            f"{str(rundir.path)!r} was resumed with --re-record after its recordings were "
            "lost: the calls made before that resume are not recorded, so it cannot be "
            "replayed")
    if not rundir.file("recordings").is_file():
        why = ("the run was made with run.record=false" if data.get("run", {}).get("record") is
               False else "it was deleted or never written")
        raise ConfigError(f"{str(rundir.path)!r} has no {rundir.file('recordings').name} "
                          f"({why}), so it cannot be replayed")
    replayed: list[ActionEvent] = []

    def collect(report: StepReport) -> None:
        replayed.extend(report.events)
        if on_step is not None:
            on_step(report)

    with RecordingStore(rundir.file("recordings"), readonly=True) as store:
        store.preload()  # every call is asked once: one query for them all
        model = ReplayModel(store, strict=True)
        token = _EVENT_STEP.set(event_step_of(stated))  # as the run was made
        try:
            run = run_society(config, out=out, model=model, on_step=collect,
                              on_turn=on_turn, fatal=(ReplayMiss,), write=out is not None,
                              completions="recordings", scenario=scenario)
        finally:
            _EVENT_STEP.reset(token)
        served = int(model.calls_served)
    # Every event, not only the digest: the log is what users read and analyse,
    # and a log that was cut short or edited must not pass as the run's.
    divergence = _divergence(rundir.read_event_lines(), [event_line(e) for e in replayed])
    if divergence is None and run.digest != expected:
        recorded = rundir.read_summary().get("digest")
        if recorded == run.digest:  # the events and summary.json agree with the replay
            divergence = ("digest.txt itself: it was changed after the run (summary.json "
                          "and every event agree with the replay)")
    report = ReplayReport(rundir.path, expected, run.digest, served, 0, divergence, run)
    if check and not report.matches:
        raise DeterminismError(
            f"replay of {str(rundir.path)!r} does not match: {_mismatch(report)}")
    return report


def _mismatch(report: ReplayReport) -> str:
    """What differs between a run and its replay, in one sentence."""
    if report.digest != report.expected:
        return (f"the run's digest is {report.expected}, the replay's {report.digest}; first "
                f"difference: {report.divergence or 'in the final state'}")
    return (f"the digests match ({report.digest}) but action_events.jsonl does not: "
            f"{report.divergence}")
