"""Applying a scenario: its interventions scheduled in virtual time on a Sim.

Each intervention becomes one named process (``scenario:<name>/<index>``,
the index zero-padded so that names sort in intervention order)
that waits until its time and sets its knob on the run's
:class:`~simulacra.scenarios.KnobBoard`, which records the change in the
trace. Nothing reads the wall clock. A fixed scenario gives the same changes
at the same virtual times on every run.

An intervention with a ``draw`` samples its delay and its duration when its
process starts (at apply time), in that order, from its own stream of the
run's Sim, ``sim.rng("scenario:<name>/<index>")``: the draws depend on the
Sim's seed (the replication's), the scenario's name and the intervention's
index, never on the worker that runs it or on the model's other streams.
They are recorded in the trace (kind ``"draw"``). An intervention with a
``when`` polls its trigger every ``every`` time units from its start, each
poll an ordinary event, and records the firing (kind ``"trigger"``).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from simulacra.errors import ScenarioError

from ._knobs import KnobBoard
from ._schema import Intervention, Scenario

if TYPE_CHECKING:
    from simulacra.core import Process, Sim

__all__ = ["apply_scenario"]


def _draws(sim: Sim, scenario: Scenario, index: int, item: Intervention,
           who: str) -> tuple[float, float | None]:
    """The intervention's start and duration, drawn where it says so."""
    start, duration = item.at, item.duration
    if item.draw is None:
        return start, duration
    stream = sim.rng(f"scenario:{scenario.name}/{index:04d}")
    drawn: dict[str, float] = {}
    if item.draw.delay is not None:
        drawn["delay"] = item.draw.delay.sample(stream)
        start = item.at + drawn["delay"]
    if item.draw.duration is not None:
        duration = drawn["duration"] = item.draw.duration.sample(stream)
    sim.record("draw", who, {**drawn, "start": start})
    return start, duration


def _run(sim: Sim, board: KnobBoard, scenario: Scenario, index: int,
         item: Intervention, *, watch_end: float | None) -> Generator[Any, Any, None]:
    source = f"scenario {scenario.name} ({scenario.hash[:12]}), intervention {index}"
    who = f"scenario:{scenario.name}/{index:04d}"
    start, duration = _draws(sim, scenario, index, item, who)
    if start > sim.now:
        yield sim.delay(start - sim.now)
    trigger = item.when
    if trigger is not None:
        polls = 0
        while True:
            value = board.read(trigger.probe)
            if trigger.holds(value):
                break
            polls += 1
            when = start + trigger.every * polls  # not a running sum: no drift
            if watch_end is not None and when > watch_end:
                return  # the watch ended; the intervention never fires
            yield sim.delay(when - sim.now)
        sim.record("trigger", who, {"probe": trigger.probe, "value": value})
    fired = sim.now
    before = board[item.knob]
    if item.ramp is not None:
        first = float(before)  # checked numeric by Scenario.check
        target = float(item.value)
        integer = board.knobs[item.knob].type == "int"
        steps = item.ramp_steps
        for k in range(1, steps + 1):
            when = fired + item.ramp * k / steps
            if when > sim.now:
                yield sim.delay(when - sim.now)
            value_k = first + (target - first) * k / steps
            board.set(item.knob, round(value_k) if integer else value_k, source=source)
        return
    board.set(item.knob, item.value, source=source)
    if duration is not None:
        yield sim.delay(duration)
        board.set(item.knob, before, source=source + " ends")


def apply_scenario(sim: Sim, board: KnobBoard, scenario: Scenario | None, *,
                   end: float | None = None) -> list[Process[None]]:
    """Check *scenario* against the board's knobs and schedule its interventions on *sim*.

    Call it while building the model, before ``sim.run``. ``None`` (the
    baseline) schedules nothing. The scenario is also recorded in the trace
    (kind ``"scenario"``, with its name and hash), so a trace says which
    scenario made it.

    Args:
        sim: The simulation.
        board: The run's knob values, made with the same *sim*.
        scenario: The scenario, or None.
        end: The run's end time, if known: an intervention after it is an error,
            and a trigger without ``until`` stops watching there. A trigger
            needs one or the other.

    Returns:
        The processes applying the interventions, in intervention order.

    Raises:
        ScenarioError: The scenario does not fit the knobs or the board's
            probes (see :meth:`Scenario.check`), a trigger has no end, or the
            board belongs to another Sim.
    """
    if scenario is None:
        return []
    if not isinstance(scenario, Scenario):
        raise ScenarioError(f"scenario must be a Scenario (see load_scenario), got "
                            f"{type(scenario).__name__}")
    if board.sim is not sim:
        raise ScenarioError(f"scenario {scenario.name!r}: the KnobBoard was made for another "
                            "Sim; make it with KnobBoard(knobs, sim)")
    scenario.check(board.knobs, start=sim.now, end=end, dynamic=True, probes=board.probes)
    watch_ends: list[float | None] = []
    for index, item in enumerate(scenario.interventions):
        watch_end = None
        if item.when is not None:
            watch_end = item.when.until if item.when.until is not None else end
            if watch_end is None:
                raise ScenarioError(
                    f"scenario {scenario.name!r}, intervention {index} (knob {item.knob!r}): "
                    "its trigger has no end, so an unmet condition would be polled forever; "
                    "give when.until, or apply_scenario(..., end=T)")
        watch_ends.append(watch_end)
    sim.record("scenario", scenario.name, {"hash": scenario.hash})
    return [sim.spawn(_run, board, scenario, index, item, watch_end=watch_ends[index],
                      name=f"scenario:{scenario.name}/{index:04d}")
            for index, item in enumerate(scenario.interventions)]
