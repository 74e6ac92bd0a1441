"""Applying a scenario: its interventions scheduled in virtual time on a Sim.

Each intervention becomes one named process (``scenario:<name>/<index>``,
the index zero-padded so that names sort in intervention order)
that waits until its time and sets its knob on the run's
:class:`~simulacra.scenarios.KnobBoard`, which records the change in the
trace. Nothing reads the wall clock, and nothing is random: the same scenario
gives the same changes at the same virtual times on every run.
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


def _run(sim: Sim, board: KnobBoard, scenario: Scenario, index: int,
         item: Intervention) -> Generator[Any, Any, None]:
    source = f"scenario {scenario.name} ({scenario.hash[:12]}), intervention {index}"
    if item.at > sim.now:
        yield sim.delay(item.at - sim.now)
    before = board[item.knob]
    if item.ramp is not None:
        start = float(before)  # checked numeric by Scenario.check
        target = float(item.value)
        integer = board.knobs[item.knob].type == "int"
        steps = item.ramp_steps
        for k in range(1, steps + 1):
            when = item.at + item.ramp * k / steps
            if when > sim.now:
                yield sim.delay(when - sim.now)
            value = start + (target - start) * k / steps
            board.set(item.knob, round(value) if integer else value, source=source)
        return
    board.set(item.knob, item.value, source=source)
    if item.duration is not None:
        yield sim.delay(item.duration)
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
        end: The run's end time, if known: an intervention after it is an error.

    Returns:
        The processes applying the interventions, in intervention order.

    Raises:
        ScenarioError: The scenario does not fit the knobs (see
            :meth:`Scenario.check`), or the board belongs to another Sim.
    """
    if scenario is None:
        return []
    if not isinstance(scenario, Scenario):
        raise ScenarioError(f"scenario must be a Scenario (see load_scenario), got "
                            f"{type(scenario).__name__}")
    if board.sim is not sim:
        raise ScenarioError(f"scenario {scenario.name!r}: the KnobBoard was made for another "
                            "Sim; make it with KnobBoard(knobs, sim)")
    scenario.check(board.knobs, start=sim.now, end=end)
    sim.record("scenario", scenario.name, {"hash": scenario.hash})
    return [sim.spawn(_run, board, scenario, index, item,
                      name=f"scenario:{scenario.name}/{index:04d}")
            for index, item in enumerate(scenario.interventions)]
