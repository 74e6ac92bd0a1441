"""Scenarios on society runs: interventions as events, at a step or a virtual time.

A society's model declares its knobs like a kernel model does (``KNOBS``, a
:class:`~simulacra.scenarios.Knobs`, in the module of ``sim.world.factory``),
and its world turns a knob's change into what happens::

    def change(self, knob, value, *, step, time):
        # -> a list of (agent, kind, data, triggers) events, or Interview objects;
        #    changes nothing (like decide()): the engine numbers and applies them

The engines apply each change at the start of the step whose number is its
time (rounds: before anyone observes; ``at: 2.5`` acts before step 3) or, on
the event-driven engine, at its virtual time, before any wake-up or
resolution at that time. A change's events are ordinary world events
(``world.apply``), in ``action_events.jsonl`` and the digest, with a
``"scenario"`` field naming the scenario and the intervention.

An :class:`Interview` asks agents a question: each named agent's model is
called (at call site ``interview:<agent>/<n>``, never the agent's own
sequence) with the agent's :meth:`interview_prompt`, and each answer is an
``"interview"`` record of the log, numbered ``-1`` because it is not a world
event: the world, the agents and every other event are exactly what they
would be without it. The answers are recorded with the other calls, so a
replay and a resume serve them from the recordings.

A scenario is expanded once, before the run, into a list of changes
(:class:`Change`) in the order they apply: by time, then intervention, then
the step of a ramp or the end of a duration; the changes applied so far are
one number in every checkpoint, so a resumed run applies nothing twice and
loses nothing.
"""

from __future__ import annotations

import heapq
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

from simulacra._util import plural
from simulacra.agents import ActionEvent, AgentId, World
from simulacra.errors import ConfigError, ScenarioError, SimError
from simulacra.scenarios import Knobs, KnobValue, Scenario, load_scenario

if TYPE_CHECKING:
    from simulacra.llm import CallSite, Completion, CompletionRequest

__all__ = ["SCENARIO_FILE", "Change", "Interview", "SocietyScenario", "load_society_scenario",
           "model_knobs", "scenario_end"]

#: The copy of the run's scenario artifact in its run directory.
SCENARIO_FILE: Final = "scenario.json"
#: The ``i`` of a log record that is not a world event (an interview's answer).
NOT_A_WORLD_EVENT: Final = -1


@final
@dataclass(frozen=True, slots=True)
class Interview:
    """What a world's ``change()`` returns to have agents asked a question.

    Attributes:
        agents: The ids (as str) of the agents to ask, in the order their
            answers are recorded.
        question: The question.
    """

    agents: tuple[str, ...]
    question: str


@final
@dataclass(frozen=True, slots=True)
class Change:
    """One change a scenario makes: knob *knob* takes *value* at virtual time *time*.

    Attributes:
        time: When (rounds: the step).
        intervention: The index of its intervention in the scenario.
        knob: The knob.
        value: Its new value.
        source: ``"<scenario>#<intervention>"``, with `` ends`` for the end of
            a duration and `` ramp k/n`` for a step of a ramp.
    """

    time: float
    intervention: int
    knob: str
    value: KnobValue
    source: str


def model_knobs(factory: Callable[..., Any], ref: str | None) -> Knobs:
    """The ``KNOBS`` of the module that holds the world factory.

    Raises:
        ScenarioError: The module declares none.
    """
    module = sys.modules.get(getattr(factory, "__module__", "") or "")
    knobs = getattr(module, "KNOBS", None) if module is not None else None
    if not isinstance(knobs, Knobs):
        raise ScenarioError(
            f"sim.world.factory {ref!r} declares no knobs (a KNOBS = Knobs(...) in its module), "
            "so a run of it cannot take a scenario")
    return knobs


def scenario_end(config: Any) -> float:
    """The last time a change can act: the last step (rounds) or the end of the last window."""
    sim = config.sim
    if sim.engine.step.built_in == "async_event":
        return float(sim.steps) * float(sim.engine.step.options.get("window", 1.0))
    return float(max(sim.steps - 1, 0))


def _expand(scenario: Scenario, knobs: Knobs, start: Mapping[str, KnobValue]) -> list[Change]:
    """Every change of *scenario*, in the order they apply (values of ramps and ends resolved)."""
    values: dict[str, KnobValue] = {name: knob.default for name, knob in knobs.items()}
    values.update({k: v for k, v in start.items() if k in values})
    # (time, intervention, sub, kind, payload): kind 0 starts an intervention, 1 sets a value.
    heap: list[tuple[float, int, int, int, Any]] = [
        (item.at, index, 0, 0, None) for index, item in enumerate(scenario.interventions)]
    heapq.heapify(heap)
    out: list[Change] = []
    name = scenario.name
    while heap:
        when, index, _, kind, payload = heapq.heappop(heap)
        item = scenario.interventions[index]
        source = f"{name}#{index}"
        if kind == 1:
            value, label = payload
            values[item.knob] = value
            out.append(Change(when, index, item.knob, value, source + label))
            continue
        before = values[item.knob]
        if item.ramp is not None:
            first, target = float(before), float(item.value)
            integer = knobs[item.knob].type == "int"
            steps = item.ramp_steps
            for k in range(1, steps + 1):
                step_value = first + (target - first) * k / steps
                heapq.heappush(heap, (item.at + item.ramp * k / steps, index, k, 1, (
                    round(step_value) if integer else step_value, f" ramp {k}/{steps}")))
            continue
        value = knobs[item.knob].check(item.value, source)
        if not knobs[item.knob].action:
            values[item.knob] = value
        out.append(Change(when, index, item.knob, value, source))
        if item.duration is not None:
            heapq.heappush(heap, (when + item.duration, index, 1, 1, (before, " ends")))
    return out


@final
class SocietyScenario:
    """A scenario scheduled on one society run: its changes, and how many are applied.

    Args:
        scenario: The validated scenario.
        knobs: The model's knobs (the scenario is checked against them).
        world: The run's world, fresh (before any step): its ``knob_values()``
            are the start values; each change is tried on it (``change()``
            changes nothing), so a value the world refuses is an error now.
        end: The last time a change can act (see :func:`scenario_end`).

    Raises:
        ScenarioError: The scenario does not fit the knobs or the world; the
            message names the scenario, the intervention and the knob.
    """

    __slots__ = ("applied", "changes", "knobs", "scenario")

    def __init__(self, scenario: Scenario, knobs: Knobs, world: World,
                 agents: Mapping[AgentId, Any], *, end: float) -> None:
        scenario.check(knobs, start=0.0, end=end)
        if not callable(getattr(world, "change", None)):
            raise ScenarioError(f"scenario {scenario.name!r}: the world "
                                f"{type(world).__qualname__} has no change(knob, value, step=, "
                                "time=) method, so it cannot take a scenario")
        self.scenario = scenario
        self.knobs = knobs
        values = getattr(world, "knob_values", None)
        start: Mapping[str, KnobValue] = values() if callable(values) else {}
        self.changes: list[Change] = _expand(scenario, knobs, start)
        #: How many of :attr:`changes` have been applied.
        self.applied = 0
        by_key = {str(agent_id): agent_id for agent_id in agents}
        for change in self.changes:
            for item in self._items(world, change, step=0, time=change.time):
                if isinstance(item, Interview):
                    for name in item.agents:
                        self._interviewee(agents, by_key, str(name), change)

    def _interviewee(self, agents: Mapping[AgentId, Any], by_key: Mapping[str, AgentId],
                     name: str, change: Change) -> AgentId:
        agent_id = by_key.get(name)
        if agent_id is None:
            raise ScenarioError(f"{self.where(change)}: there is no agent {name!r} to "
                                "interview")
        agent = agents[agent_id]
        if not callable(getattr(agent, "interview_prompt", None)):
            raise ScenarioError(f"{self.where(change)}: agent {name!r} "
                                f"({type(agent).__qualname__}) has no interview_prompt("
                                "question, observation), so it cannot be interviewed")
        return agent_id

    @property
    def name(self) -> str:
        """The scenario's name."""
        return self.scenario.name

    def where(self, change: Change) -> str:
        """``scenario 'NAME', intervention I (knob 'K')``: how errors name *change*."""
        return (f"scenario {self.scenario.name!r}, intervention {change.intervention} "
                f"(knob {change.knob!r})")

    def next_time(self) -> float:
        """The time of the next change to apply (infinity when none is left)."""
        if self.applied < len(self.changes):
            return self.changes[self.applied].time
        return float("inf")

    def _items(self, world: World, change: Change, *, step: int,
               time: float) -> list[tuple[str, str, dict[str, Any], tuple[str, ...]] | Interview]:
        try:
            items = list(world.change(change.knob, change.value,  # type: ignore[attr-defined]
                                      step=step, time=time))
        except (SimError, ValueError, TypeError, KeyError) as exc:
            raise ScenarioError(f"{self.where(change)}: {exc}") from None
        for item in items:
            if isinstance(item, Interview):
                continue
            if not (isinstance(item, tuple) and len(item) == 4):
                raise ScenarioError(
                    f"{self.where(change)}: {type(world).__qualname__}.change() must return "
                    "(agent, kind, data, triggers) tuples or Interview objects, got "
                    f"{item!r}")
        return items

    def apply_due(self, world: World, agents: Mapping[AgentId, Any], until: float, *,
                  step: int, time: Callable[[Change], float],
                  call: Callable[[list[tuple[Any, CompletionRequest, CallSite]]],
                                 list[Completion | BaseException]],
                  fatal: tuple[type[BaseException], ...] = ()) -> list[ActionEvent]:
        """Apply every change due at or before *until*; return their events, in order.

        *time(change)* is the time the events are stamped with; *call* makes
        the interviews' model calls: ``[(agent, request, site)]`` -> a
        completion or the exception of each, in order (a *fatal* exception is
        raised; any other is recorded as the answer's error).
        """
        out: list[ActionEvent] = []
        while self.applied < len(self.changes) and self.changes[self.applied].time <= until:
            ordinal = self.applied
            change = self.changes[ordinal]
            stamp = time(change)
            with world.lock:
                items = self._items(world, change, step=step, time=stamp)
                interviews: list[Interview] = []
                for item in items:
                    if isinstance(item, Interview):
                        interviews.append(item)
                        continue
                    agent, kind, data, triggers = item
                    event = ActionEvent(world.events, step, stamp, str(agent or "scenario"),
                                        str(kind), {**data, "scenario": change.source},
                                        tuple(str(t) for t in triggers))
                    world.apply(event)
                    world.events = event.index + 1  # counted whatever apply() does
                    out.append(event)
            for interview in interviews:
                out.extend(self._interview(world, agents, interview, change, ordinal,
                                           step=step, time=stamp, call=call, fatal=fatal))
            self.applied = ordinal + 1
        return out

    def _interview(self, world: World, agents: Mapping[AgentId, Any], interview: Interview,
                   change: Change, ordinal: int, *, step: int, time: float,
                   call: Callable[[list[tuple[Any, CompletionRequest, CallSite]]],
                                  list[Completion | BaseException]],
                   fatal: tuple[type[BaseException], ...]) -> list[ActionEvent]:
        from simulacra.llm import CallSite  # noqa: PLC0415  (lazy: layer-1 import)

        by_key = {str(agent_id): agent_id for agent_id in agents}
        requests: list[tuple[Any, CompletionRequest, CallSite]] = []
        for name in interview.agents:
            agent_id = self._interviewee(agents, by_key, str(name), change)
            seen = world.observation_for(agent_id, None)
            request = agents[agent_id].interview_prompt(interview.question, seen)
            requests.append((agent_id, request, CallSite(f"interview:{name}", ordinal)))
        answers = call(requests)
        records: list[ActionEvent] = []
        for (agent_id, _, site), answer in zip(requests, answers, strict=True):
            data: dict[str, Any] = {"question": interview.question, "scenario": change.source,
                                    "site": f"{site.agent}/{site.n}"}
            if isinstance(answer, BaseException):
                if isinstance(answer, fatal):
                    raise answer
                message = str(answer)
                data["error"] = type(answer).__name__
                data["message"] = message if len(message) <= 200 else message[:197] + "..."
            else:
                data["answer"] = answer.text
            records.append(ActionEvent(NOT_A_WORLD_EVENT, step, time, str(agent_id),
                                       "interview", data))
        return records

    def state(self) -> int:
        """What a checkpoint keeps: how many changes were applied."""
        return self.applied

    def restore(self, applied: object) -> None:
        """Continue after *applied* changes (from :meth:`state`)."""
        if not isinstance(applied, int) or not 0 <= applied <= len(self.changes):
            raise ConfigError(f"scenario {self.scenario.name!r}: the checkpoint says "
                              f"{applied!r} of its {plural(len(self.changes), 'change')} applied")
        self.applied = applied


def call_in_order(model_of: Callable[[Any], Any]) -> Callable[
        [list[tuple[Any, CompletionRequest, CallSite]]], list[Completion | BaseException]]:
    """Interview calls one after the other, with *model_of(agent id)*'s model."""

    def call(requests: list[tuple[Any, CompletionRequest, CallSite]]
             ) -> list[Completion | BaseException]:
        out: list[Completion | BaseException] = []
        for agent_id, request, site in requests:
            out.append(_one(model_of(agent_id), request, site))
        return out

    return call


def call_on_pool(pool: Any, model_of: Callable[[Any], Any]) -> Callable[
        [list[tuple[Any, CompletionRequest, CallSite]]], list[Completion | BaseException]]:
    """Interview calls on a thread pool, all at once; the results in request order."""

    def call(requests: list[tuple[Any, CompletionRequest, CallSite]]
             ) -> list[Completion | BaseException]:
        futures = [pool.submit(_one, model_of(agent_id), request, site)
                   for agent_id, request, site in requests]
        return [future.result() for future in futures]

    return call


def _one(model: Any, request: CompletionRequest, site: CallSite) -> Completion | BaseException:
    if model is None:
        return ConfigError(f"{site.agent}: the agent has no language model")
    try:
        completion: Completion = model.complete(request, site=site)
    except Exception as exc:  # recorded as the answer's error (or raised, if fatal)
        return exc
    return completion


# -- artifacts in run directories ------------------------------------------------------------


def load_society_scenario(source: str | os.PathLike[str] | Mapping[str, Any] | Scenario,
                          where: str = "scenario") -> Scenario:
    """A scenario from an artifact's path, its data or itself.

    A file written by hand may leave out the ``hash`` (the run computes it and
    keeps a hashed copy); a file with a hash must match it.

    Raises:
        ScenarioError: It cannot be read, does not fit the schema, or its hash
            does not match its content.
    """
    if isinstance(source, Scenario):
        return source
    if isinstance(source, Mapping):
        return load_scenario(dict(source))
    path = Path(source)
    if not path.is_file():
        raise ScenarioError(f"{where}: no scenario artifact at {str(path)!r}")
    return load_scenario(path, require_hash=False)


def copy_artifact(scenario: Scenario, run_dir: Path) -> Path:
    """Write the run's copy of the artifact (``scenario.json``) into *run_dir*."""
    target = run_dir / SCENARIO_FILE
    partial = target.with_name(target.name + ".partial")
    partial.write_text(scenario.artifact(), encoding="utf-8")
    os.replace(partial, target)
    return target


def manifest_entry(scenario: Scenario, source: str | None) -> dict[str, Any]:
    """What ``manifest.json`` says of the run's scenario."""
    return {"name": scenario.name, "sha256": scenario.hash, "file": SCENARIO_FILE,
            "source": source, "interventions": len(scenario.interventions)}


def run_scenario(run_dir: Path, manifest: Mapping[str, Any],
                 configured: str | None) -> Scenario | None:
    """The scenario of an existing run directory, checked against its manifest.

    The run's copy (``scenario.json``) is the scenario; it must have the hash
    the manifest recorded when the run started, and so must the artifact the
    config names, if it is still there.

    Raises:
        ScenarioError: The copy is missing, edited, or either file's hash is
            not the one the run started with.
    """
    entry = manifest.get("scenario")
    if not isinstance(entry, Mapping):
        if configured:
            raise ScenarioError(f"{str(run_dir)!r}: config.yaml names the scenario "
                                f"{configured!r}, but manifest.json records none")
        return None
    expected = str(entry.get("sha256"))
    copy = run_dir / SCENARIO_FILE
    if not copy.is_file():
        raise ScenarioError(f"{str(run_dir)!r}: its scenario {entry.get('name')!r} "
                            f"({expected[:12]}...) has no copy {SCENARIO_FILE} in the run "
                            "directory; it was deleted")
    scenario = load_scenario(copy)
    if scenario.hash != expected:
        raise ScenarioError(f"{copy}: its hash {scenario.hash[:12]}... is not the "
                            f"{expected[:12]}... the run started with; the scenario was "
                            "replaced, so the run cannot continue with it")
    if configured and Path(configured).is_file():
        try:
            original = load_society_scenario(configured)
        except ScenarioError as exc:
            raise ScenarioError(f"the run's scenario artifact changed since the run started: "
                                f"{exc}") from None
        if original.hash != expected:
            raise ScenarioError(
                f"{configured}: the scenario artifact changed since the run started (its hash "
                f"was {expected[:12]}..., is now {original.hash[:12]}...); restore it, or start "
                "a new run with the new scenario")
    return scenario

