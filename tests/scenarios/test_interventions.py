"""What what-if users ask for: capacity knobs, stochastic interventions, triggers.

Each runs a small queueing model on the real kernel (a Resource whose capacity a
knob drives, customers drawn from named streams) under a real Scenario.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from simulacra import Experiment, PriorityResource, Resource, SeedTree, Sim, Store
from simulacra.errors import ScenarioError
from simulacra.scenarios import (
    Distribution,
    Knob,
    KnobBoard,
    Knobs,
    Scenario,
    apply_scenario,
    load_scenario,
)

KNOBS = Knobs(
    Knob("servers", "int", 1, low=1, high=10, unit="servers", doc="servers at work"),
    Knob("demand", "float", 1.0, low=0.1, high=10.0, doc="multiplier on the arrival rate"),
)


# --------------------------------------------------------------------------- capacity knobs


def _fixed_queue(scenario: Scenario | None) -> tuple[dict[str, float], list[Any], Sim]:
    """Six customers at 0, 1, ..., 5, each served for 10, by `servers` (a knob) servers."""
    sim = Sim(seed=0, trace=True)
    board = KnobBoard(KNOBS, sim)
    res = Resource(sim, capacity=5)  # the knob overrides it: 1 from the start
    board.bind_capacity("servers", res)
    apply_scenario(sim, board, scenario, end=200)
    granted: dict[str, float] = {}

    def customer(sim: Sim, name: str, arrival: float) -> Any:
        yield sim.delay(arrival)
        with res.request() as req:
            yield req
            granted[name] = sim.now
            yield sim.delay(10)

    for i in range(6):
        sim.spawn(customer, f"c{i}", float(i))
    sim.run()
    return granted, board.changes, sim


def test_a_capacity_knob_opens_slots_for_a_window() -> None:
    window = Scenario(name="extra-servers", interventions=[
        {"knob": "servers", "at": 2.5, "value": 3, "duration": 8},
    ])

    base, _, _ = _fixed_queue(None)
    granted, changes, _ = _fixed_queue(window)

    # One server: every customer waits for the one before.
    assert base == {"c0": 0, "c1": 10, "c2": 20, "c3": 30, "c4": 40, "c5": 50}
    # Three from 2.5 to 10.5: c1 and c2 (waiting) at once, c3 at 10 (c0 leaves); at 10.5
    # back to one: c1, c2, c3 keep their slots and finish (12.5, 12.5, 20) before c4.
    assert granted == {"c0": 0, "c1": 2.5, "c2": 2.5, "c3": 10, "c4": 20, "c5": 30}
    assert [(t, k, old, new) for t, k, old, new, _ in changes] == [
        (2.5, "servers", 1, 3), (10.5, "servers", 3, 1)]


def test_a_capacity_knob_checks_what_it_binds() -> None:
    sim = Sim(seed=0)
    board = KnobBoard(KNOBS, sim)
    with pytest.raises(ScenarioError, match=r"knob 'demand' must be an int knob with low >= 1 "
                                            r"to be a capacity, got type 'float'"):
        board.bind_capacity("demand", Resource(sim))
    with pytest.raises(ScenarioError, match=r"expected a Resource .*got Store"):
        board.bind_capacity("servers", Store(sim))
    with pytest.raises(ScenarioError, match="belongs to another Sim"):
        board.bind_capacity("servers", PriorityResource(Sim(seed=0)))
    with pytest.raises(ScenarioError, match="the model has no knob 'serverz'"):
        board.bind_capacity("serverz", Resource(sim))
    zero = Knobs(Knob("n", "int", 1, low=0))
    with pytest.raises(ScenarioError, match="with low 0"):
        KnobBoard(zero, sim).bind_capacity("n", Resource(sim))


# --------------------------------------------------------------------------- drawn times

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # worker processes import the models by this name
    sys.path.insert(0, str(HERE))

import _intervention_models as models  # noqa: E402

MODEL = f"{models.__name__}:run"


def _drawn(seed: Any, **config: Any) -> tuple[float, float]:
    """The drawn start and end of the DRAWN scenario's window in one run."""
    [(start, _, three), (end, _, one)] = json.loads(models.run(seed, models.DRAWN,
                                                               **config)["changes"])
    assert (three, one) == (3, 1)
    return start, end


def test_a_drawn_window_is_the_same_for_the_same_seed() -> None:
    first = models.run(7, models.DRAWN)
    again = models.run(7, models.DRAWN)

    assert first == again  # the draws, the changes, the whole trace
    [draw] = json.loads(first["draws"])
    start, end = _drawn(7)
    assert start == 20 + draw["delay"] == draw["start"]
    assert end == start + draw["duration"]
    assert 0 <= draw["delay"] <= 100
    assert 10 <= draw["duration"] <= 40


def test_each_replication_draws_its_own_window() -> None:
    tree = SeedTree(2025)
    windows = [_drawn(tree.child("rep", r)) for r in range(8)]

    assert len(set(windows)) == len(windows)


def test_the_draws_come_from_the_interventions_own_stream() -> None:
    # Twice the demand makes the model draw far more arrivals from its own streams;
    # the intervention's stream is its own, so its window does not move.
    assert _drawn(11) == _drawn(11, rate=2.4)
    # And the stream is named by the scenario: another name, other draws.
    renamed = {**models.DRAWN, "name": "another-name"}
    assert json.loads(models.run(11, renamed)["draws"]) != json.loads(
        models.run(11, models.DRAWN)["draws"])


@pytest.mark.slow
def test_an_experiment_on_processes_equals_the_sequential_one() -> None:
    data = json.loads(Scenario(**models.DRAWN).artifact())
    study = Experiment.from_run(MODEL, [{"scenario": data}, {"scenario": data, "rate": 2.0}],
                                master_seed=99, common_random_numbers=True)

    sequential = study.run(4, "sequential")
    processes = study.run(4, "processes", 2)

    assert processes.backend == "processes"
    assert [r.kpis for r in processes] == [r.kpis for r in sequential]
    starts = [r.kpis["first_change"] for r in sequential]
    assert len(set(starts[:4])) == 4  # replications differ...
    # ...and with common random numbers a config that only changes the rate keeps them.
    assert starts[:4] == starts[4:]


def test_a_study_with_scenarios_runs_drawn_and_triggered_ones() -> None:
    # The study checks its scenarios against the model's KNOBS before any run, as
    # interventions a run applies (apply_scenario draws and triggers).
    study = Experiment.from_run(MODEL, [{}], master_seed=5, scenarios=[
        Scenario(**models.DRAWN), Scenario(**models.TRIGGERED)])
    results = study.run(2, "sequential")

    kpis = [r.kpis for r in results]  # configs (baseline, then each scenario) x replications
    baseline, drawn, triggered = kpis[0:2], kpis[2:4], kpis[4:6]
    assert all(k["first_change"] == -1.0 for k in baseline)
    assert all(json.loads(k["draws"]) for k in drawn)
    assert all(json.loads(k["triggers"]) for k in triggered)


@pytest.mark.parametrize(("dist", "low", "high"), [
    ({"dist": "exponential", "mean": 30}, 0, math.inf),
    ({"dist": "exponential", "mean": 30, "high": 5}, 0, 5),
    ({"dist": "uniform", "low": 10, "high": 20}, 10, 20),
    ({"dist": "normal", "mean": 60, "sd": 10, "low": 55, "high": 58}, 55, 58),
    ({"dist": "normal", "mean": 0, "sd": 1, "low": 3}, 3, math.inf),
    ({"dist": "triangular", "low": 0, "mode": 5, "high": 20}, 0, 20),
])
def test_samples_stay_in_the_support_and_take_one_draw_each(dist: dict[str, Any], low: float,
                                                            high: float) -> None:
    distribution = Distribution(**dist)
    stream, twin = random.Random(5), random.Random(5)
    samples = [distribution.sample(stream) for _ in range(2000)]

    assert all(low <= x <= high for x in samples)
    assert distribution.support() == (low, high)
    for _ in range(2000):
        twin.random()
    assert stream.random() == twin.random()  # one draw per sample, whatever the distribution


def test_sample_means_are_the_distributions() -> None:
    stream = random.Random(3)
    n = 20000
    for dist, mean in (({"dist": "exponential", "mean": 30}, 30.0),
                       ({"dist": "uniform", "low": 10, "high": 20}, 15.0),
                       ({"dist": "normal", "mean": 60, "sd": 10}, 60.0),
                       ({"dist": "triangular", "low": 0, "mode": 6, "high": 12}, 6.0)):
        distribution = Distribution(**dist)
        got = sum(distribution.sample(stream) for _ in range(n)) / n
        assert abs(got - mean) < 0.03 * mean, dist


@pytest.mark.parametrize(("draw", "message"), [
    ({"delay": {"dist": "exponential"}},
     "interventions.0.draw.delay an exponential distribution takes mean (and optionally "
     "high); got none"),
    ({"delay": {"dist": "uniform", "low": 5, "high": 1}},
     "interventions.0.draw.delay low must be < high, got low 5.0 and high 1.0"),
    ({"delay": {"dist": "normal", "mean": 1, "sd": 1}},
     "interventions.0.draw delay: a normal(mean=1, sd=1) can be negative, and a delay "
     "cannot; give low >= 0"),
    ({"duration": {"dist": "gamma", "mean": 1}},
     "interventions.0.draw.duration.dist should be 'exponential', 'uniform', 'normal' or "
     "'triangular'"),
    ({"delay": {"dist": "exponential", "mean": 30, "sd": 2}},
     "an exponential distribution takes mean (and optionally high); got mean, sd"),
    ({}, "interventions.0.draw a draw gives delay, duration or both"),
])
def test_a_bad_draw_is_one_line_naming_the_field(draw: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError) as info:
        Scenario(name="bad", interventions=[{"knob": "servers", "at": 0, "value": 2,
                                             "draw": draw}])
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith("scenario 'bad': not a valid scenario: ")
    assert message in text


def test_a_drawn_duration_replaces_duration_and_ramp() -> None:
    for fixed in ({"duration": 5}, {"ramp": 5}):
        scenario = Scenario(name="both", interventions=[
            {"knob": "servers", "at": 0, "value": 2, **fixed,
             "draw": {"duration": {"dist": "uniform", "low": 1, "high": 2}}}])
        with pytest.raises(ScenarioError, match=r"^scenario 'both', intervention 0 \(knob "
                                                r"'servers'\): draw.duration replaces duration"):
            scenario.check(KNOBS, dynamic=True)


def test_runs_that_expand_a_scenario_beforehand_refuse_draws_and_triggers() -> None:
    # A society run expands its scenario into fixed changes (Scenario.check without
    # dynamic=True): a draw or a trigger is refused in one line, not silently ignored.
    for extra in ({"draw": {"delay": {"dist": "uniform", "low": 0, "high": 1}}},
                  {"when": {"probe": "queue_0", "above": 1, "every": 1}}):
        scenario = Scenario(name="dyn", interventions=[
            {"knob": "servers", "at": 0, "value": 2, **extra}])
        with pytest.raises(ScenarioError) as info:
            scenario.check(KNOBS, start=0.0, end=10.0)
        assert str(info.value).startswith("scenario 'dyn', intervention 0 (knob 'servers'): it ")
        assert "which only apply_scenario runs" in str(info.value)


def test_fixed_scenarios_keep_their_content_and_hashes() -> None:
    # No draw and no trigger: the content is what it was before they existed (the shipped
    # artifacts of tests/scenarios/data still load with their hashes: test_generate.py).
    scenario = Scenario(name="fixed", interventions=[
        {"knob": "servers", "at": 1, "value": 2, "duration": 3}])
    assert sorted(scenario.content()["interventions"][0]) == [
        "at", "duration", "knob", "note", "ramp", "ramp_steps", "value"]
    drawn = Scenario(name="drawn", interventions=[
        {"knob": "servers", "at": 1, "value": 2,
         "draw": {"delay": {"dist": "exponential", "mean": 30}}}])
    assert drawn.content()["interventions"][0]["draw"] == {
        "delay": {"dist": "exponential", "mean": 30.0}}
    assert load_scenario(json.loads(drawn.artifact())) == drawn


# --------------------------------------------------------------------------- triggers


def _steady(trigger: dict[str, Any], *, gap: float = 1.0,
            at: float = 0.0) -> tuple[list[tuple[float, str, Any, Any]], list[float]]:
    """One server; a customer every *gap* from gap/2, each served for 100; a trigger.

    At time t (between arrivals) floor(t/gap + 1/2) customers have come and one
    is served, so the queue holds one fewer.
    """
    sim = Sim(seed=0, trace=True)
    board = KnobBoard(KNOBS, sim)
    desk = Resource(sim, capacity=1)
    board.bind_capacity("servers", desk)
    board.probe("queue_0", lambda: len(desk.queue))
    apply_scenario(sim, board, Scenario(name="on-queue", interventions=[
        {"knob": "servers", "at": at, "value": 4, "duration": 10, "when": trigger}]), end=60)
    granted: list[float] = []

    def customer(sim: Sim) -> Any:
        with desk.request() as req:
            yield req
            granted.append(sim.now)
            yield sim.delay(100)

    def source(sim: Sim) -> Any:
        yield sim.delay(gap / 2)
        while True:
            sim.spawn(customer)
            yield sim.delay(gap)

    sim.spawn(source)
    sim.run(until=60)
    return [(t, k, old, new) for t, k, old, new, _ in board.changes], granted


def test_a_trigger_fires_at_the_first_poll_where_its_condition_holds() -> None:
    changes, granted = _steady({"probe": "queue_0", "above": 3, "every": 1})

    # Polls at 0, 1, 2...: at 5 the queue holds 4 > 3. Three more servers at once (the
    # three longest waiting), for 10.
    assert changes == [(5.0, "servers", 1, 4), (15.0, "servers", 4, 1)]
    assert granted[:4] == [0.5, 5.0, 5.0, 5.0]


@pytest.mark.parametrize(("trigger", "gap", "at", "fired"), [
    ({"probe": "queue_0", "above": 5, "every": 1}, 1.0, 0.0, 7.0),  # a higher threshold
    ({"probe": "queue_0", "above": 3, "every": 1}, 0.5, 0.0, 3.0),  # arrivals twice as fast
    ({"probe": "queue_0", "above": 3, "every": 2.5}, 1.0, 0.0, 5.0),  # polls 0, 2.5, 5
    ({"probe": "queue_0", "above": 3, "every": 3}, 1.0, 0.0, 6.0),  # polls 0, 3, 6
    ({"probe": "queue_0", "above": 3, "every": 1}, 1.0, 9.25, 9.25),  # holds at its start
    ({"probe": "queue_0", "below": 1, "every": 1}, 1.0, 0.0, 0.0),  # empty at 0
    ({"probe": "queue_0", "above": 2, "below": 4, "every": 2}, 1.0, 0.0, 4.0),  # 3 at 4
])
def test_the_firing_time_follows_the_state(trigger: dict[str, Any], gap: float, at: float,
                                           fired: float) -> None:
    changes, _ = _steady(trigger, gap=gap, at=at)
    assert changes[0][:2] == (fired, "servers")


def test_an_unmet_condition_never_fires_and_the_watch_ends() -> None:
    changes, granted = _steady({"probe": "queue_0", "above": 1000, "every": 1, "until": 30})
    assert changes == []
    assert granted == [0.5]


def test_a_trigger_fires_at_the_same_time_for_the_same_seed_and_moves_with_the_state() -> None:
    runs = [models.run(seed, models.TRIGGERED) for seed in (1, 1, 2, 3, 4, 5)]
    fired = [json.loads(r["triggers"])[0][0] if json.loads(r["triggers"]) else None
             for r in runs]

    assert runs[0] == runs[1]  # same seed: same firing time, same trace
    assert fired[0] == fired[1]
    assert len(set(fired[1:])) > 1  # other seeds, other queues, other times
    for t in fired:  # polls at whole times from 0
        assert t is None or t == int(t)
    # Busier arrivals (the model's state, not the trigger) fire it no later.
    busy = json.loads(models.run(1, models.TRIGGERED, rate=3.0)["triggers"])[0][0]
    assert busy <= fired[0]


def test_triggers_and_draws_are_the_same_under_both_kernels() -> None:
    if importlib.util.find_spec("simulacra.core._ckernel") is None:
        pytest.skip("the compiled kernel is not built")
    src = HERE.parents[1] / "src"
    outs = {}
    for kernel in ("python", "compiled"):
        env = {**os.environ, "SIMULACRA_KERNEL": kernel,
               "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run([sys.executable, str(HERE / "_intervention_models.py"), "3"],
                              capture_output=True, text=True, env=env, timeout=120,
                              check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        outs[kernel] = json.loads(done.stdout)
    assert outs["python"] == outs["compiled"]
    assert json.loads(outs["python"]["triggered"]["triggers"])  # it fired


@pytest.mark.parametrize(("when", "message"), [
    ({"probe": "queue_0", "every": 1},
     "interventions.0.when a trigger needs a condition: above, below or both"),
    ({"probe": "queue_0", "above": 1, "every": 0},
     "interventions.0.when.every should be greater than 0"),
    ({"probe": "queue 0", "above": 1, "every": 1},
     "interventions.0.when.probe must be a probe's name (a Python identifier), got 'queue 0'"),
    ({"probe": "queue_0", "above": 1}, "interventions.0.when.every Field required"),
    ({"probe": "queue_0", "above": 1, "every": 1, "after": 3},
     "interventions.0.when.after is not a known setting"),
])
def test_a_bad_trigger_is_one_line_naming_the_field(when: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError) as info:
        Scenario(name="bad", interventions=[{"knob": "servers", "at": 0, "value": 2,
                                             "when": when}])
    text = str(info.value)
    assert "\n" not in text
    assert message in text, text


def test_a_trigger_must_watch_a_registered_probe_and_have_an_end() -> None:
    sim = Sim(seed=0)
    board = KnobBoard(KNOBS, sim)
    board.probe("queue_0", lambda: 0)
    board.probe("busy", lambda: 0)
    unknown = Scenario(name="unknown", interventions=[
        {"knob": "servers", "at": 0, "value": 2,
         "when": {"probe": "queue_1", "above": 1, "every": 1}}])
    with pytest.raises(ScenarioError, match=r"^scenario 'unknown', intervention 0 \(knob "
                                            r"'servers'\): when.probe 'queue_1' is not a probe "
                                            r"of the model \(its probes: busy, queue_0\)$"):
        apply_scenario(sim, board, unknown, end=10)
    endless = Scenario(name="endless", interventions=[
        {"knob": "servers", "at": 0, "value": 2,
         "when": {"probe": "queue_0", "above": 1, "every": 1}}])
    with pytest.raises(ScenarioError, match="its trigger has no end, so an unmet condition "
                                            r"would be polled forever; give when.until, or "
                                            r"apply_scenario\(..., end=T\)"):
        apply_scenario(sim, board, endless)
    assert sim.peek() == math.inf  # nothing was scheduled


def test_a_watch_that_ends_before_it_starts_is_refused() -> None:
    scenario = Scenario(name="late", interventions=[
        {"knob": "servers", "at": 10, "value": 2,
         "when": {"probe": "queue_0", "above": 1, "every": 1, "until": 5}}])
    with pytest.raises(ScenarioError, match=r"^scenario 'late', intervention 0 \(knob "
                                            r"'servers'\): when.until=5.0 is before at=10.0"):
        scenario.check(KNOBS, dynamic=True)


def test_probes_are_checked() -> None:
    sim = Sim(seed=0)
    board = KnobBoard(KNOBS, sim)
    board.probe("queue_0", lambda: "long")
    with pytest.raises(ScenarioError, match="a probe 'queue_0' is registered already"):
        board.probe("queue_0", lambda: 1)
    with pytest.raises(ScenarioError, match="name must be a Python identifier"):
        board.probe("queue-0", lambda: 1)
    with pytest.raises(ScenarioError, match="read must be a function"):
        board.probe("q", 3)  # type: ignore[arg-type]
    with pytest.raises(ScenarioError, match=r"no probe 'nope' \(the probes: queue_0\)"):
        board.read("nope")
    apply_scenario(sim, board, Scenario(name="t", interventions=[
        {"knob": "servers", "at": 0, "value": 2,
         "when": {"probe": "queue_0", "above": 1, "every": 1}}]), end=5)
    with pytest.raises(ScenarioError, match="probe 'queue_0' gave str 'long'; expected a "
                                            "finite number"):
        sim.run()


@pytest.mark.parametrize("extra", [
    {"draw": {"delay": {"dist": "uniform", "low": 0, "high": 1}}},
    {"when": {"probe": "posts", "above": 1, "every": 1}},
])
def test_a_society_run_refuses_draws_and_triggers_before_anything_is_written(
        tmp_path: Path, extra: dict[str, Any]) -> None:
    from simulacra.societies import load_config, run_society

    config = load_config(HERE.parents[1] / "examples" / "social" / "config.yaml",
                         ["sim.agents=4", "sim.steps=3", "seed=1"])
    scenario = Scenario(name="dyn", interventions=[
        {"knob": "feed_size", "at": 1, "value": 2, **extra}])
    with pytest.raises(ScenarioError) as info:
        run_society(config, out=tmp_path / "run", scenario=scenario)
    assert str(info.value).startswith("scenario 'dyn', intervention 0 (knob 'feed_size'): it ")
    assert "which only apply_scenario runs" in str(info.value)
    assert not (tmp_path / "run").exists()
