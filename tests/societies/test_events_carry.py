"""Calls in flight carry on past a window's end: the same run, and every call counted once.

The event engine's windows (``sim.engine.step.options.window``) are steps of a
run config: each is reported, and a checkpoint may follow any. A window's end
used to wait for every call in flight (a barrier a window); now the calls of
turns that resolve later carry on into the next window, and only a window
after which the run returns (the last of a ``run()`` call, a checkpoint, a
stop, a pause) waits for them. ``barrier: true`` asks for the old barrier.
Nothing but the wall clock may differ: the digests, the events and each
window's digest equal the barrier's and the sequential run's (Hypothesis
draws the world, the windows and the calls' wall-clock lengths), and the
calls the steps report add up to the calls made.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulacra import (
    AgentActionError,
    EventEngine,
    LatencyModel,
    RunControl,
    RunStopped,
    World,
    load_config,
    resume_society,
    run_society,
)
from simulacra.agents import ActionSpec, AgentId
from simulacra.societies._events import EventSteps

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "social" / "config.yaml"

pytestmark = pytest.mark.timeout(300)


class Pinboard(World):
    """Notes on a pinboard; each agent reads the last notes of those it follows."""

    PLAIN_STATE = True

    def __init__(self, follows: Mapping[str, Sequence[str]]) -> None:
        super().__init__()
        self.follows = {k: sorted(v) for k, v in follows.items()}
        self.notes: list[list[str]] = []

    def affected_by(self, agent_id: AgentId) -> Sequence[str]:
        # X sees and is poked by those it follows: turns may start early (threads, asyncio).
        return self.follows[str(agent_id)]

    def observation_for(self, agent_id: AgentId, snapshot: Any = None) -> tuple[Any, ...]:
        followed = set(self.follows[str(agent_id)])
        return tuple((i, a, t) for i, (a, t) in enumerate(self.notes) if a in followed)[-3:]

    def decide(self, agent_id: AgentId, action: Any, step: int,
               time: float) -> list[tuple[str, dict[str, Any], tuple[str, ...]]]:
        text, poke = action
        return [("note", {"text": text}, tuple(poke))]

    def apply(self, event: Any) -> None:
        super().apply(event)
        if event.kind == "note":
            self.notes.append([event.agent, event.data["text"]])


class Writer:
    """Writes a digest of what it read; pokes (wakes) a reader now and then; sleeps (wall)."""

    def __init__(self, name: str, readers: Sequence[str], sleeps: Sequence[float],
                 pauses: Sequence[float], fail_at: int | None = None) -> None:
        self.id = name
        self.readers = list(readers)
        self.sleeps = list(sleeps)
        self.pauses = list(pauses)
        self.fail_at = fail_at
        self.seen: Any = None
        self.turns = 0

    def observe(self, observation: Any) -> None:
        self.seen = observation

    def act(self, spec: ActionSpec) -> Any:
        time.sleep(self.sleeps[spec.step % len(self.sleeps)])
        if spec.step == self.fail_at:
            raise RuntimeError(f"{self.id} gives up")
        self.turns += 1
        text = hashlib.sha256(repr((self.id, spec.step, self.seen)).encode()).hexdigest()[:8]
        poke = self.readers[:1] if self.readers and spec.step % 2 else []
        return text, poke

    def next_wake(self, now: float, rng: Any) -> float:
        return now + self.pauses[self.turns % len(self.pauses)]

    def get_state(self) -> dict[str, Any]:
        return {"turns": self.turns}

    def set_state(self, state: Mapping[str, Any]) -> None:
        self.turns = state["turns"]


NAMES = ("ada", "ben", "cat", "dov", "eli")
#: Each turn takes 0.4 to 1.6 of virtual time (its noise is drawn per call site).
LATENCY = LatencyModel(base=0.4, min_duration=0.4)


@st.composite
def boards(draw: st.DrawFn) -> dict[str, Any]:
    names = NAMES[:draw(st.integers(2, len(NAMES)))]
    follows = {n: draw(st.lists(st.sampled_from([o for o in names if o != n]), unique=True,
                                max_size=2)) for n in names}
    return {
        "follows": follows,
        "sleeps": {n: draw(st.lists(st.sampled_from([0.0, 0.0, 0.002, 0.01]), min_size=1,
                                    max_size=3)) for n in names},
        "pauses": {n: draw(st.lists(st.sampled_from([0.05, 0.3, 0.7, 1.5, 3.0]), min_size=1,
                                    max_size=3)) for n in names},
    }


def society(board: dict[str, Any], fail_at: int | None = None
            ) -> tuple[Pinboard, list[Writer]]:
    follows = board["follows"]
    readers = {n: sorted(o for o, f in follows.items() if n in f) for n in follows}
    return Pinboard(follows), [Writer(n, readers[n], board["sleeps"][n], board["pauses"][n],
                                      fail_at if n == NAMES[0] else None)
                               for n in sorted(follows)]


def windows(board: dict[str, Any], *, mode: str, width: float, barrier: bool,
            chunks: Sequence[int], reaction: float = 0.0, stops: frozenset[int] = frozenset()
            ) -> tuple[Any, EventEngine, list[str]]:
    """Run the board in *chunks* of windows (each chunk one EventSteps.run call).

    A chunk returns early after a window in *stops* (its ``pause`` says so), and the
    engine's state is taken there and restored into a fresh engine (a checkpoint
    and its resume); the windows it did not run are run by the next call.
    """
    world, agents = society(board)
    engine = EventEngine(world, agents, latency=LATENCY, mode=mode, concurrency=3, seed=5,
                         reaction_delay=reaction, window=width)
    seen: list[str] = []
    # A window's telemetry but its deepest count of turns in flight, which is the engine's
    # concurrency (turns carried over count there; the sequential mode has one at most).
    steps = EventSteps(engine, width=width, max_turns=4, barrier=barrier,
                       on_step=lambda r: seen.append(
                           f"{r.step} {r.participants} {r.failed} {r.digest} "
                           f"{[e.index for e in r.events]} "
                           f"{ {k: v for k, v in r.window.items() if k != 'in_flight_max'} }"))
    result = None
    total, done = sum(chunks), 0
    for chunk in chunks:
        left = chunk
        while left > 0 and done < total:
            before = steps.step
            result = steps.run(left, pause=lambda s=steps: s.step - 1 in stops)
            ran = steps.step - before
            done, left = done + ran, left - ran
            if left > 0:  # returned early: checkpoint, and resume in a fresh engine
                state = steps.state()
                world, agents = society(board)
                engine = EventEngine(world, agents, latency=LATENCY, mode=mode,
                                     concurrency=3, seed=5, reaction_delay=reaction,
                                     window=width)
                on_step = steps.on_step
                steps = EventSteps(engine, width=width, max_turns=4, barrier=barrier,
                                   on_step=on_step)
                steps.restore(state)
    return result, engine, seen


@settings(max_examples=40, deadline=None)
@given(board=boards(), mode=st.sampled_from(["threads", "asyncio"]),
       width=st.sampled_from([0.1, 0.35, 1.0, 2.5]),
       chunks=st.lists(st.integers(1, 6), min_size=1, max_size=4),
       reaction=st.sampled_from([0.0, 0.2]),
       stops=st.frozensets(st.integers(0, 20), max_size=3))
def test_carried_calls_change_nothing_but_the_wall_clock(
        *, board: dict[str, Any], mode: str, width: float, chunks: list[int],
        reaction: float, stops: frozenset[int]) -> None:
    carried, engine, reports = windows(board, mode=mode, width=width, barrier=False,
                                       chunks=chunks, reaction=reaction, stops=stops)
    walled, _, walled_reports = windows(board, mode=mode, width=width, barrier=True,
                                        chunks=chunks, reaction=reaction)
    straight, _, straight_reports = windows(board, mode="sequential", width=width,
                                            barrier=False, chunks=[sum(chunks)],
                                            reaction=reaction)
    assert carried.digest == walled.digest == straight.digest
    assert carried.step_digests == walled.step_digests == straight.step_digests
    assert reports == walled_reports == straight_reports
    assert engine._runner is None  # each run() call ends with its calls


def test_a_window_shorter_than_a_turn_carries_its_calls() -> None:
    board = {"follows": {"ada": ["ben"], "ben": []},
             "sleeps": {"ada": [0.01], "ben": [0.01]}, "pauses": {"ada": [0.3], "ben": [0.3]}}
    carried, engine, _ = windows(board, mode="threads", width=0.1, barrier=False, chunks=[40])
    assert engine.carried > 0
    walled, wall_engine, _ = windows(board, mode="threads", width=0.1, barrier=True,
                                     chunks=[40])
    assert wall_engine.carried == 0
    assert carried.digest == walled.digest


def test_a_failed_turn_in_a_carried_window_leaves_no_thread_behind() -> None:
    board = {"follows": {"ada": [], "ben": ["ada"]},
             "sleeps": {"ada": [0.02], "ben": [0.05]}, "pauses": {"ada": [0.2], "ben": [0.2]}}
    world, agents = society(board, fail_at=2)
    engine = EventEngine(world, agents, latency=LATENCY, mode="threads", concurrency=3,
                         fail_fast=True, window=0.1)
    steps = EventSteps(engine, width=0.1, max_turns=5, on_step=None)
    before = threading.active_count()
    with pytest.raises(AgentActionError, match="ada gives up"):
        steps.run(60)
    assert engine._runner is None
    deadline = time.monotonic() + 10
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= before


# -- the run-config path: barrier, telemetry, checkpoints, a stop and its resume ------------


def _config(*extra: str) -> Any:
    return load_config(str(CONFIG), [
        "sim.agents=12", "sim.steps=16", "sim.engine.concurrency=6",
        "sim.engine.step.built_in=async_event", "sim.engine.mode=threads",
        "sim.engine.step.options.window=0.25", *extra])


def _reported_calls(out: Path) -> tuple[int, int, int]:
    """(calls the steps reported, calls in summary.json, lines of calls.jsonl)."""
    rows = [json.loads(line) for line in (out / "telemetry.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    lines = (out / "calls.jsonl").read_text().splitlines()
    return sum(row["llm_calls"] for row in rows), summary["llm"]["calls"], len(lines)


@pytest.mark.parametrize("extra", [(), ("run.checkpoint_every=3",), ("sim.engine.mode=asyncio",)])
def test_a_run_carried_or_walled_is_one_run_and_counts_every_call(
        tmp_path: Path, extra: tuple[str, ...]) -> None:
    carried = run_society(_config(*extra), out=tmp_path / "carried")
    walled = run_society(_config(*extra, "sim.engine.step.options.barrier=true"),
                         out=tmp_path / "walled")
    assert carried.result.digest == walled.result.digest
    assert ((tmp_path / "carried" / "action_events.jsonl").read_bytes()
            == (tmp_path / "walled" / "action_events.jsonl").read_bytes())
    for out in ("carried", "walled"):
        reported, summed, lines = _reported_calls(tmp_path / out)
        assert reported == summed == lines > 0, (out, reported, summed, lines)
    speed = {out: json.loads((tmp_path / out / "summary.json").read_text())["llm"]["throughput"]
             for out in ("carried", "walled")}
    assert speed["carried"]["turns_carried_over"] > 0
    assert speed["walled"]["turns_carried_over"] == 0


def test_a_stop_between_windows_resumes_to_the_same_run(tmp_path: Path) -> None:
    straight = run_society(_config(), out=tmp_path / "straight")
    control = RunControl()
    stops: list[int] = []

    def stop_after_five(report: Any) -> None:
        if report.step == 5:
            stops.append(report.step)
            control.request_stop("the test stops it")

    with pytest.raises(RunStopped) as stopped:
        run_society(_config(), out=tmp_path / "cut", control=control, on_step=stop_after_five)
    assert stops == [5]
    # The stop's line counts every call made, those that returned after step 5's report
    # (the stop came in it) too.
    said = re.search(r"(\d+) model calls?", str(stopped.value))
    assert said is not None, str(stopped.value)
    made = sum(1 for line in (tmp_path / "cut" / "calls.jsonl").read_text().splitlines()
               if json.loads(line).get("ok", True))
    assert int(said.group(1)) == made
    resumed = resume_society(tmp_path / "cut")
    assert resumed.result.digest == straight.result.digest
    assert ((tmp_path / "cut" / "action_events.jsonl").read_bytes()
            == (tmp_path / "straight" / "action_events.jsonl").read_bytes())
    # The calls that returned after step 5's report (the stop came in it) are counted
    # once, in the resumed run's first report: the steps add up to every call made.
    reported, summed, lines = _reported_calls(tmp_path / "cut")
    assert reported == summed == lines > 0, (reported, summed, lines)


def test_barrier_must_be_true_or_false() -> None:
    from simulacra import ConfigError

    with pytest.raises(ConfigError, match=r"sim\.engine\.step\.options\.barrier must be true "
                                          r"or false, got int 2"):
        run_society(_config("sim.engine.step.options.barrier=2"))


class _Sleepy:
    """The scripted model behind a loopback server, each call a few wall-clock ms (by site)."""

    def __init__(self, *, jitter: bool = False) -> None:
        from simulacra.llm import ScriptedModel

        self.inner = ScriptedModel(seed=0)
        self.jitter = jitter
        self.wall = random.Random()  # wall-clock jitter, unseeded: nothing may depend on it

    def complete(self, request: Any, *, site: Any = None) -> Any:
        completion = self.inner.complete(request, site=site)
        if self.jitter:  # 20-80 ms in any order: no result may depend on it
            time.sleep(self.wall.uniform(0.02, 0.08))
            return completion
        n = 0 if site is None else int(hashlib.sha256(f"{site.agent}/{site.n}".encode())
                                        .hexdigest()[:4], 16)
        time.sleep(0.005 + (n % 7) * 0.006)
        return completion

    async def acomplete(self, request: Any, *, site: Any = None) -> Any:
        import asyncio

        return await asyncio.to_thread(self.complete, request, site=site)


@pytest.mark.parametrize("out_of_order", ["false", "true"])
def test_turns_started_early_past_a_stop_are_kept_and_adopted(tmp_path: Path,
                                                              out_of_order: str) -> None:
    """A stop returns mid-run: turns started early beyond it go into the checkpoint, done.

    Out of order too (``out_of_order``): an agent may then hold several.
    """
    from simulacra.llm import ScriptedServer
    from simulacra.societies._checkpoint import checkpoint_files, read_checkpoint

    with ScriptedServer(_Sleepy()) as server:
        def config() -> Any:
            return _config("sim.agents=32", "sim.world.local=true", "sim.world.follows=2",
                           "sim.llm.provider=openai_compatible",
                           f"sim.llm.base_url={server.base_url}",
                           f"sim.engine.step.options.out_of_order={out_of_order}")

        straight = run_society(config(), out=tmp_path / "straight")
        kept = 0
        for stop_at in (2, 3, 5, 7, 9):
            control = RunControl()

            def stop(report: Any, at: int = stop_at, control: RunControl = control) -> None:
                if report.step == at:
                    control.request_stop("the test stops it")

            out = tmp_path / f"cut{stop_at}"
            with pytest.raises(RunStopped):
                run_society(config(), out=out, control=control, on_step=stop)
            newest = checkpoint_files(out / "checkpoints")[-1]
            kept += len(read_checkpoint(newest)["engine"]["engine"]["early"])
            resumed = resume_society(out)
            assert resumed.result.digest == straight.result.digest, stop_at
            assert ((out / "action_events.jsonl").read_bytes()
                    == (tmp_path / "straight" / "action_events.jsonl").read_bytes())
    assert kept > 0  # some stop came while turns beyond it had started early


class _Watchful(Writer):
    """A writer whose state must not be read while it acts (as an agent's memory dict)."""

    def act(self, spec: ActionSpec) -> Any:
        self.acting = True
        try:
            return super().act(spec)
        finally:
            self.acting = False

    def get_state(self) -> dict[str, Any]:
        assert not getattr(self, "acting", False), f"{self.id}'s state read mid-turn"
        return super().get_state()


def test_no_agent_state_is_read_while_its_turn_is_carried() -> None:
    """A window's end with turns in flight takes no digest of the agents (they are acting)."""
    follows = {"ada": ["ben"], "ben": ["ada"], "cat": []}
    readers = {n: sorted(o for o, f in follows.items() if n in f) for n in follows}
    agents = [_Watchful(n, readers[n], [0.02, 0.005], [0.1, 0.3]) for n in sorted(follows)]
    engine = EventEngine(Pinboard(follows), agents, latency=LATENCY, mode="threads",
                         concurrency=3, window=0.1)
    steps = EventSteps(engine, width=0.1, max_turns=6, on_step=None)
    result = steps.run(80)
    assert engine.carried > 0
    assert result.agents_digest  # taken once every turn had returned


@pytest.mark.slow
def test_a_budget_stop_never_checkpoints_a_refused_turn(tmp_path: Path) -> None:
    """A helper's find: a budget stop with turns started early or carried could write a
    checkpoint holding a turn the budget refused, which no resume could serve."""
    from simulacra.llm import ScriptedServer

    with ScriptedServer(_Sleepy(jitter=True)) as server:
        def config(*extra: str) -> Any:
            return _config("sim.agents=30", "sim.steps=20", "sim.world.local=true",
                           "sim.llm.provider=openai_compatible",
                           f"sim.llm.base_url={server.base_url}", *extra)

        straight = run_society(config(), out=tmp_path / "straight")
        for i, tokens in enumerate((14000, 16000, 16000, 18000)):
            out = tmp_path / f"budget{i}-{tokens}"
            with pytest.raises(RunStopped, match="budget"):
                run_society(config(f"run.budget.tokens={tokens}"), out=out)
            resumed = resume_society(out, overrides=("run.budget.tokens=10000000",))
            assert resumed.result.digest == straight.result.digest, tokens
            reported, summed, lines = _reported_calls(out)
            assert reported == summed, (tokens, reported, summed, lines)


def test_a_stop_asked_for_during_a_step_counts_its_calls_in_its_line(tmp_path: Path) -> None:
    """A stop that comes while a step runs: the step's end waits for its calls before its
    report, so the stop's line counts every call made (calls.jsonl)."""
    from simulacra.llm import ScriptedServer

    with ScriptedServer(_Sleepy()) as server:
        control = RunControl()
        turns = [0]

        def on_turn() -> None:
            turns[0] += 1
            if turns[0] == 15:
                control.request_stop("the test stops it")

        out = tmp_path / "cut"
        with pytest.raises(RunStopped) as stopped:
            run_society(_config("sim.llm.provider=openai_compatible",
                                f"sim.llm.base_url={server.base_url}"),
                        out=out, control=control, on_turn=on_turn)
    said = re.search(r"(\d+) model calls?", str(stopped.value))
    assert said is not None, str(stopped.value)
    made = sum(1 for line in (out / "calls.jsonl").read_text().splitlines()
               if json.loads(line).get("ok", True))
    assert int(said.group(1)) == made


def test_run_arguments_are_checked() -> None:
    from simulacra import ConfigError

    board = {"follows": {"ada": [], "ben": []}, "sleeps": {"ada": [0.0], "ben": [0.0]},
             "pauses": {"ada": [0.3], "ben": [0.3]}}
    engine = EventEngine(*society(board), latency=LATENCY)
    with pytest.raises(ConfigError, match=r"drain must be true or false, got str 'no'"):
        engine.run(until=1.0, drain="no")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"early_until must be a finite number >= 0, got nan"):
        engine.run(until=1.0, early_until=float("nan"))


def test_llm_calls_of_held_runs_add_up_to_the_calls_made() -> None:
    """Calls that return between two run(drain=False) calls are counted by the next one."""
    from simulacra.agents import LLMAgent
    from simulacra.llm import ChatMessage, CompletionRequest, ScriptedModel

    class Asker(LLMAgent):
        def prompt(self, spec: ActionSpec) -> CompletionRequest:
            return CompletionRequest((ChatMessage(
                "user", f"{self.id} turn {spec.step}: {self.observation}"),))

        def parse(self, completion: Any, spec: ActionSpec) -> Any:
            time.sleep(0.01)
            return completion.text[:8], []

    follows = {"ada": ["ben"], "ben": [], "cat": ["ada"]}
    askers = [Asker(name) for name in sorted(follows)]
    engine = EventEngine(Pinboard(follows), askers, model=ScriptedModel(seed=0),
                         latency=LATENCY, mode="threads", concurrency=3)
    total = 0
    for until in (0.5, 1.0, 1.5, 2.0, 2.5):
        total += engine.run(until=until, drain=False).llm_calls
        time.sleep(0.03)  # calls return between the runs
    engine.state()  # waits for the rest
    total += engine.run(until=2.5).llm_calls
    assert total == sum(a.calls for a in askers) > 0


# -- from an adversarial helper's fuzzing -----------------------------------------------------


class _Diary(World):
    """Each agent sees its own id and its own posts: nobody affects anybody (true)."""

    PLAIN_STATE = True

    def __init__(self) -> None:
        super().__init__()
        self.posts: list[list[str]] = []

    def affected_by(self, agent_id: AgentId) -> Sequence[str]:
        return []

    def observation_for(self, agent_id: AgentId, snapshot: Any = None) -> Any:
        return agent_id, tuple((a, t) for a, t in self.posts if a == agent_id)[-2:]

    def decide(self, agent_id: AgentId, action: Any, step: int,
               time: float) -> list[tuple[str, dict[str, Any], tuple[str, ...]]]:
        return [("post", {"text": action}, ())]

    def apply(self, event: Any) -> None:
        super().apply(event)
        if event.kind == "post":
            self.posts.append([event.agent, event.data["text"]])


class _Keeper:
    """Writes; one slow call holds the kernel back while the others start early."""

    def __init__(self, name: str, *, fails_at: float | None = None) -> None:
        self.id = name
        self.n = 0
        self.fails_at = fails_at
        self.seen: Any = None

    def observe(self, observation: Any) -> None:
        self.seen = observation

    def act(self, spec: ActionSpec) -> Any:
        if self.id == "ann" and spec.step == 1:
            time.sleep(0.1)
        if self.fails_at is not None and self.fails_at <= spec.time < self.fails_at + 0.4:
            raise _Stop(f"{self.id} stops the run at t={spec.time:.3f}")
        self.n += 1
        return f"{self.id}-{spec.step}-{len(self.seen[1])}"

    def next_wake(self, now: float, rng: Any) -> float:
        return now + (2.5 if self.id == "ann" else 0.3)

    def get_state(self) -> dict[str, Any]:
        return {"n": self.n}

    def set_state(self, state: Mapping[str, Any]) -> None:
        self.n = state["n"]


class _Stop(Exception):
    """A fatal error of the tests below (as a budget's refusal is for a run)."""


def _diary(seed: int, mode: str = "threads", **kwargs: Any) -> EventSteps:
    agents = [_Keeper(n, **kwargs) for n in ("ann", "bob", "cy", "dee")]
    engine = EventEngine(_Diary(), agents, latency=LatencyModel(base=0.2, min_duration=0.2),
                         mode=mode, concurrency=4, seed=seed, fatal=(_Stop,))
    return EventSteps(engine, width=1.0, max_turns=None, on_step=None)


def test_a_kept_early_turn_is_checked_by_value_not_by_object_sharing() -> None:
    """Pickle's memo made equal observations pickle apart once a checkpoint's unpickling
    had made an agent's id and its posts' author two objects: a false ConfigError."""
    import pickle

    for seed in range(40):
        steps = _diary(seed)
        steps.run(6, pause=lambda steps=steps: steps.step == 2)
        if steps.engine._stashed:
            break
    else:
        pytest.fail("no seed kept a turn started early")
    fresh = _diary(seed)
    fresh.restore(pickle.loads(pickle.dumps(steps.state())))  # noqa: S301  (our own bytes)
    resumed = fresh.run(4)
    uncut = _diary(seed, mode="sequential").run(6)
    assert resumed.digest == uncut.digest


def test_no_state_is_taken_after_a_run_stopped_on_an_error() -> None:
    """A fatal turn stops the run; a state taken after it held the turn as an ordinary
    failure (a restored run then went on without the error)."""
    from simulacra import CheckpointError

    stopped = 0
    for seed in range(30):
        steps = _diary(seed, fails_at=0.6)
        try:
            steps.run(3)
        except _Stop:
            stopped += 1
            with pytest.raises(CheckpointError, match=r"no state of a run that stopped on an "
                                                      r"error \(_Stop: "):
                steps.state()
    assert stopped > 0


def test_a_later_run_cannot_lower_max_turns_below_a_turn_started_early() -> None:
    from simulacra import ConfigError

    for seed in range(60):
        engine = _diary(seed).engine
        engine.run(max_turns=3, until=1.5, early_until=6.0)
        pending = [*engine._stashed.values(),
                   *(() if engine._runner is None else engine._runner.early.values())]
        if any(e.spec.step >= 2 for e in pending):
            with pytest.raises(ConfigError, match=r"run\(max_turns=2\): turn 2 of agent "
                                                  r"'\w+' started early under an earlier run"):
                engine.run(max_turns=2, until=6.0)
            return
    pytest.fail("no seed started a third turn early")
