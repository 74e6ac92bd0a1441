"""LLM agents as kernel processes (``LLMRuntime``): one clock for queues and models.

The reference is the sequential run: every mode (threads, asyncio) and every
concurrency must give its trace, record for record, on generated models that
mix SimPy-style processes, resources, stores, conditions and model calls.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulacra import ConfigError, Resource, Sim, Store
from simulacra.errors import ForeignEvent, NotAnEvent, ProviderError, ReplayMiss
from simulacra.llm import (
    Completion,
    CompletionRequest,
    LatencyModel,
    OpenAICompatible,
    RecordingModel,
    RecordingStore,
    ReplayModel,
    ScriptedModel,
    ScriptedServer,
)
from simulacra.societies import LLMRuntime
from simulacra.trace import digest, first_divergence

ROOT = Path(__file__).resolve().parents[2]
CLINIC = ROOT / "examples" / "clinic"
MODES = [("sequential", 1), ("threads", 1), ("threads", 3), ("threads", 16), ("asyncio", 2),
         ("asyncio", 16)]

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def clinic(load_module: Callable[[str, Path], ModuleType]) -> ModuleType:
    return load_module("_example_clinic_model", CLINIC / "model.py")


# -- generated models: SimPy-style processes and LLM agents in one Sim -------------------

_OPS = st.one_of(
    st.tuples(st.just("ask"), st.integers(0, 3)),
    st.tuples(st.just("delay"), st.sampled_from([0.0, 0.05, 0.1, 0.25, 1.0])),
    st.tuples(st.just("queue"), st.sampled_from([0.05, 0.1, 0.5, 2.0])),  # patience
    st.tuples(st.just("put"), st.integers(0, 9)),
    st.tuples(st.just("get"), st.sampled_from([0.1, 1.0])),
)
_MODELS = st.fixed_dictionaries({
    "agents": st.lists(st.lists(_OPS, min_size=1, max_size=6), min_size=1, max_size=8),
    "servers": st.integers(1, 3),
    "plain": st.integers(0, 3),
    "seed": st.integers(0, 2**16),
    "min_duration": st.sampled_from([0.05, 0.1, 0.5]),
})


def _model(spec: dict[str, Any], mode: str, concurrency: int,
           model: Any = None) -> tuple[list[Any], LLMRuntime]:
    sim = Sim(seed=spec["seed"], ordering="keyed", trace=True)
    desk = Resource(sim, capacity=spec["servers"])
    mailbox: Store[int] = Store(sim)
    latency = LatencyModel(min_duration=spec["min_duration"], noise_sigma=0.3)
    llm = LLMRuntime(sim, model if model is not None else ScriptedModel(seed=spec["seed"]),
                     latency=latency, mode=mode, concurrency=concurrency)

    def agent(sim: Sim, ctx: Any, ops: list[tuple[str, Any]]) -> Any:
        for op, arg in ops:
            if op == "ask":
                reply = yield ctx.complete(CompletionRequest.chat(
                    f"{ctx.agent} asks question {arg} at {sim.now:.3f}", max_tokens=8 + arg))
                ctx.record("heard", reply.text[:16])
            elif op == "delay":
                yield sim.delay(arg)
            elif op == "queue":
                with desk.request() as req:
                    got = yield req | sim.delay(arg)
                    if req in got:
                        reply = yield ctx.complete(CompletionRequest.chat(f"served {ctx.agent}"))
                        ctx.record("served", len(reply.text))
                    else:
                        req.cancel()
                        ctx.record("reneged", None)
            elif op == "put":
                yield mailbox.put(arg)
            else:
                got = yield mailbox.get() | sim.delay(arg)
                ctx.record("got", sorted(v for v in got.values() if v is not None))

    def clerk(sim: Sim, index: int) -> Any:  # a SimPy-style process beside the agents
        for _ in range(3):
            with desk.request() as req:
                yield req
                yield sim.delay(0.1 * (index + 1))
            yield mailbox.put(100 + index)

    for index in range(spec["plain"]):
        sim.spawn(clerk, index, name=f"clerk{index}")
    for index, ops in enumerate(spec["agents"]):
        llm.spawn(agent, ops, agent=f"a{index}")
    try:
        sim.run(until=200.0)
    finally:
        llm.close()
    records = sim.trace_records
    assert records is not None
    return records, llm


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=_MODELS)
def test_generated_models_give_the_sequential_trace_in_every_mode(spec: dict[str, Any]) -> None:
    reference, runtime = _model(spec, "sequential", 1)
    assert any(kind == "llm" for _, kind, _, _ in reference) == (runtime.calls > 0)
    for mode, concurrency in MODES[1:]:
        records, other = _model(spec, mode, concurrency)
        assert first_divergence(reference, records) is None, (mode, concurrency)
        assert digest(records) == digest(reference)
        assert other.calls == runtime.calls


def test_a_call_takes_the_key_and_time_a_delay_of_its_latency_would() -> None:
    """Sequentially, ctx.complete is sim.delay(d, completion): the same trace, bar 'llm' records."""
    latency = LatencyModel(min_duration=0.2, noise_sigma=0.5)
    model = ScriptedModel(seed=4)

    def agent(sim: Sim, ask: Any, name: str) -> Any:
        for turn in range(3):
            reply = yield ask(CompletionRequest.chat(f"{name} {turn}"), name, turn)
            sim.record("said", name, reply.text)
            yield sim.delay(0.1 * turn)

    def with_runtime() -> list[Any]:
        sim = Sim(seed=1, ordering="keyed", trace=True)
        llm = LLMRuntime(sim, model, latency=latency)
        for name in ("x", "y", "z"):
            llm.spawn(lambda sim, ctx, name=name: agent(
                sim, lambda request, *_: ctx.complete(request), name), agent=name)
        sim.run()
        assert sim.trace_records is not None
        return [r for r in sim.trace_records if r[1] != "llm"]

    def with_delays() -> list[Any]:
        from simulacra.llm import CallSite

        sim = Sim(seed=1, ordering="keyed", trace=True)
        draws = LLMRuntime(sim, model, latency=latency)._latency_rng  # the same noise

        def ask(request: CompletionRequest, name: str, turn: int) -> Any:
            completion = model.complete(request, site=CallSite(name, turn))
            rng = draws(name, turn)
            return sim.delay(latency.duration(request, completion, rng), completion)

        for name in ("x", "y", "z"):
            sim.spawn(agent, ask, name, name=name)
        sim.run()
        assert sim.trace_records is not None
        return list(sim.trace_records)

    ours, oracle = with_runtime(), with_delays()
    assert first_divergence(ours, oracle) is None
    assert len(ours) > 20


# -- the clinic example ------------------------------------------------------------------

@settings(max_examples=12, deadline=None)
@given(patients=st.integers(1, 30), doctors=st.integers(1, 3), seed=st.integers(0, 999),
       check_every=st.sampled_from([1.0, 5.0, 12.5]))
def test_the_clinic_is_the_same_at_every_mode_and_concurrency(
        clinic: ModuleType, patients: int, doctors: int, seed: int, check_every: float) -> None:
    params = clinic.params_from(patients=patients, doctors=doctors, seed=seed,
                                check_every=check_every)
    reference = clinic.run(params)
    assert reference["served"] + reference["reneged"] == patients
    for mode, concurrency in MODES[1:]:
        assert clinic.run(params, mode=mode, concurrency=concurrency) == reference


def test_clinic_patients_renege_and_talk(clinic: ModuleType) -> None:
    result = clinic.run(clinic.params_from(patients=60, doctors=2, seed=3))
    assert result["reneged"] > 0
    assert result["served"] > 0
    assert result["remarks"] > 0
    assert result["model_calls"] >= result["reneged"]


def test_recorded_then_replayed_with_no_call(clinic: ModuleType, tmp_path: Path) -> None:
    params = clinic.params_from(patients=25, seed=7)
    store = RecordingStore(tmp_path / "clinic.sqlite")
    recording = RecordingModel(clinic.scripted_model(params.seed), store)
    first = clinic.run(params, model=recording, mode="threads", concurrency=8)
    store.close()
    assert recording.recorded == first["model_calls"] > 0

    readonly = RecordingStore(tmp_path / "clinic.sqlite", readonly=True)
    replay = ReplayModel(readonly)
    again = clinic.run(params, model=replay, mode="sequential")
    readonly.close()
    assert again == first
    assert replay.calls_served == first["model_calls"]
    # Another seed asks other questions: the replay refuses instead of inventing.
    readonly = RecordingStore(tmp_path / "clinic.sqlite", readonly=True)
    with pytest.raises(ReplayMiss):
        clinic.run(clinic.params_from(patients=25, seed=8), model=ReplayModel(readonly))
    readonly.close()


def test_the_clinic_against_a_real_openai_compatible_server(clinic: ModuleType) -> None:
    """Over HTTP on 127.0.0.1: the server's own scripted model answers the JSON schema."""
    params = clinic.params_from(patients=12, seed=2)
    with ScriptedServer(clinic.scripted_model(params.seed), latency=(0.0, 0.01)) as server:
        results = []
        for mode in ("sequential", "threads", "asyncio"):
            model = OpenAICompatible(server.base_url, "scripted", max_retries=0)
            try:
                results.append(clinic.run(params, model=model, mode=mode, concurrency=8))
            finally:
                model.close()
    assert results[0] == results[1] == results[2]
    # The server's replies are the scripted model's: the same decisions as in process (the
    # trace differs in what HTTP adds to a completion: its id and metadata).
    local = clinic.run(params)
    assert {key: results[0][key] for key in ("served", "reneged", "remarks", "board")} == {
        key: local[key] for key in ("served", "reneged", "remarks", "board")}


def _script(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "80"}
    return subprocess.run([sys.executable, str(CLINIC), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_clinic_script_prints_the_same_digest_in_every_mode(tmp_path: Path) -> None:
    digests = set()
    for mode in ("sequential", "threads", "asyncio"):
        done = _script("--mode", mode, "--concurrency", "4", "--patients", "30")
        assert done.returncode == 0, done.stderr
        assert max(len(line) for line in done.stdout.splitlines()) <= 80
        digests.update(line.split()[-1] for line in done.stdout.splitlines()
                       if line.strip().startswith("digest"))
    assert len(digests) == 1
    record = tmp_path / "rec.sqlite"
    assert _script("--record", str(record), "--patients", "30").returncode == 0
    replayed = _script("--replay", str(record), "--patients", "30")
    assert replayed.returncode == 0, replayed.stderr
    assert digests == {line.split()[-1] for line in replayed.stdout.splitlines()
                       if line.strip().startswith("digest")}


@pytest.mark.parametrize(("args", "message"), [
    (["--patients", "0"], "patients must be an int >= 1, got 0"),
    (["--replay", "/nonexistent/rec.sqlite"], "no such recordings file"),
    (["--base-url", "http://127.0.0.1:9/v1"], "--base-url needs --model"),
])
def test_the_clinic_script_refuses_bad_input_in_one_line(args: list[str], message: str) -> None:
    done = _script(*args)
    assert done.returncode == 2
    assert message in done.stderr
    assert done.stderr.strip().count("\n") == 0, done.stderr


def test_a_closed_port_fails_the_clinic_in_one_line() -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = _script("--base-url", f"http://127.0.0.1:{port}/v1", "--model", "m",
                   "--patients", "3")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("error: ")
    assert done.stderr.strip().count("\n") == 0, done.stderr


# -- what an agent may yield, and bad input -----------------------------------------------

def _one(body: Any, mode: str = "sequential") -> Sim:
    sim = Sim(seed=0, ordering="keyed")
    with LLMRuntime(sim, ScriptedModel(), mode=mode) as llm:
        llm.spawn(body, agent="ann")
        sim.run()
    return sim


@pytest.mark.parametrize("mode", ["sequential", "threads"])
def test_yielding_a_non_event_names_the_agent_the_step_and_the_value(mode: str) -> None:
    def body(sim: Sim, ctx: Any) -> Any:
        yield ctx.complete(CompletionRequest.chat("hi"))
        yield ctx.complete(CompletionRequest.chat("again"))
        yield 5

    with pytest.raises(NotAnEvent) as caught:
        _one(body, mode)
    text = str(caught.value)
    assert "agent 'ann'" in text
    assert "after 2 model calls" in text
    assert "yielded 5 (a int)" in text


def test_yielding_a_generator_suggests_yield_from() -> None:
    def helper(sim: Sim) -> Any:
        yield sim.delay(1)

    def body(sim: Sim, ctx: Any) -> Any:
        yield helper(sim)

    with pytest.raises(NotAnEvent, match="yield from"):
        _one(body)


def test_yielding_an_event_of_another_sim_is_refused() -> None:
    other = Sim(ordering="keyed")

    def body(sim: Sim, ctx: Any) -> Any:
        yield sim.delay(1.5)
        yield other.delay(1)

    with pytest.raises(ForeignEvent, match=r"agent 'ann' at t=1.5 .*another Sim"):
        _one(body)


def test_bad_arguments_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="ordering='keyed'"):
        LLMRuntime(Sim(), ScriptedModel())
    keyed = Sim(ordering="keyed")
    with pytest.raises(ConfigError, match="mode"):
        LLMRuntime(keyed, ScriptedModel(), mode="processes")
    with pytest.raises(ConfigError, match="concurrency"):
        LLMRuntime(keyed, ScriptedModel(), concurrency=0)
    with pytest.raises(ConfigError, match="min_duration"):
        LLMRuntime(keyed, ScriptedModel(), latency=SimpleNamespace(
            min_duration=0.0, duration=lambda *_: 1.0))
    with pytest.raises(ConfigError, match="language model"):
        LLMRuntime(keyed, object())  # type: ignore[arg-type]
    llm = LLMRuntime(keyed, ScriptedModel())
    with pytest.raises(ConfigError, match="expected a generator"):
        llm.spawn(lambda sim, ctx: 3, agent="bob")
    with pytest.raises(ConfigError, match="non-empty str"):
        llm.spawn(lambda sim, ctx: iter(()), agent="")

    def asks_a_string(sim: Sim, ctx: Any) -> Any:
        yield ctx.complete("hello")

    llm.spawn(asks_a_string, agent="cat")
    with pytest.raises(ConfigError, match=r"agent 'cat'.*CompletionRequest"):
        keyed.run()


class _Flaky:
    """A model that fails every third call with a provider error (deterministically, by site)."""

    def __init__(self) -> None:
        self.inner = ScriptedModel(seed=1)

    def complete(self, request: CompletionRequest, *, site: Any = None) -> Completion:
        if site is not None and site.n % 3 == 2:
            raise ProviderError(f"overloaded at {site}")
        return self.inner.complete(request, site=site)


@pytest.mark.parametrize(("mode", "concurrency"), MODES)
def test_a_failed_call_is_thrown_into_the_agent_at_the_same_point_in_every_mode(
        mode: str, concurrency: int) -> None:
    def body(sim: Sim, ctx: Any) -> Any:
        for turn in range(5):
            try:
                yield ctx.complete(CompletionRequest.chat(f"{ctx.agent} {turn}"))
            except ProviderError:
                ctx.record("gave up", turn)

    def run() -> list[Any]:
        sim = Sim(seed=0, ordering="keyed", trace=True)
        with LLMRuntime(sim, _Flaky(), mode=mode, concurrency=concurrency) as llm:
            for name in ("a", "b", "c"):
                llm.spawn(body, agent=name)
            sim.run()
        assert sim.trace_records is not None
        return list(sim.trace_records)

    records = run()
    assert sum(1 for r in records if r[1] == "gave up") == 3
    sim = Sim(seed=0, ordering="keyed", trace=True)
    with LLMRuntime(sim, _Flaky()) as llm:
        for name in ("a", "b", "c"):
            llm.spawn(body, agent=name)
        sim.run()
    assert first_divergence(records, sim.trace_records) is None


def test_a_study_of_llm_agents_is_the_same_inline_on_threads_and_in_processes() -> None:
    """LLM agents on the kernel are a model like any other: Experiment runs them anywhere."""
    from simulacra import Experiment, config_grid

    study = Experiment.from_run(f"{CLINIC / 'model.py'}:study",
                                config_grid(doctors=[1, 3], mode=["sequential", "threads"],
                                            patients=[15]),
                                master_seed=11, common_random_numbers=True)
    inline = study.run(replications=2, backend="inline", progress=False)
    for backend in ("threaded", "process"):
        other = study.run(replications=2, backend=backend, max_workers=2, progress=False)
        assert [(r.config_index, r.replication, dict(r.kpis)) for r in other.records] == [
            (r.config_index, r.replication, dict(r.kpis)) for r in inline.records]
    # With common random numbers, configs that differ only in mode give the same run.
    for doctors in (0, 2):
        assert {key: inline[doctors, 0][key] for key in ("served", "reneged", "digest")} == {
            key: inline[doctors + 1, 0][key] for key in ("served", "reneged", "digest")}


def test_the_docs_example_runs_and_agents_leave_or_are_seen() -> None:
    """docs/kernel-agents.md's Python block, run as written."""
    import re

    text = (ROOT / "docs" / "kernel-agents.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(.*?)```", text, re.DOTALL)
    assert block is not None
    scope: dict[str, Any] = {}
    exec(compile(block.group(1), "docs/kernel-agents.md", "exec"), scope)  # noqa: S102
    sim, llm = scope["sim"], scope["llm"]
    assert llm.calls > 0
    kinds = {kind for _, kind, _, _ in sim.trace_records}
    assert {"llm", "resume", "spawn"} <= kinds


def test_ctrl_c_stops_the_clinic_in_one_line_and_keeps_the_recordings(tmp_path: Path) -> None:
    import signal
    import sqlite3
    import time

    record = tmp_path / "rec.sqlite"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(
        [sys.executable, str(CLINIC), "--patients", "400000", "--record", str(record)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (record.exists() and record.stat().st_size > 0):
        time.sleep(0.1)
    time.sleep(1.0)  # well into the run
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert err.strip().count("\n") == 0, err
    assert "interrupted (Ctrl-C)" in err
    with sqlite3.connect(record) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("SELECT COUNT(*) FROM completions").fetchone()[0] > 0


@given(state=st.integers(0, 2**64 - 1))
@settings(max_examples=50, deadline=None)
def test_latency_streams_are_pure_functions_of_their_state(state: int) -> None:
    from simulacra.societies._kernel_agents import _Draws

    one, two = _Draws(state), _Draws(state)
    first = [one.random() for _ in range(20)] + [one.lognormvariate(0.0, 0.5), one.randrange(7)]
    assert first == [two.random() for _ in range(20)] + [
        two.lognormvariate(0.0, 0.5), two.randrange(7)]
    assert all(0.0 <= x < 1.0 for x in first[:20])
    with pytest.raises(TypeError, match="seeded by the runtime"):
        one.seed(1)


def test_latency_draws_are_uniform_enough() -> None:
    from simulacra.societies._kernel_agents import _Draws

    draws = _Draws(12345)
    values = [draws.random() for _ in range(20_000)]
    assert abs(sum(values) / len(values) - 0.5) < 0.01
    buckets = [0] * 10
    for value in values:
        buckets[int(value * 10)] += 1
    assert min(buckets) > 1_800
    assert max(buckets) < 2_200


# -- found by a stranger ------------------------------------------------------------------

def test_an_agent_may_have_several_processes_spawned_at_once() -> None:
    def visit(sim: Sim, ctx: Any, room: str) -> Any:
        reply = yield ctx.complete(CompletionRequest.chat(f"{ctx.agent} in {room}"))
        ctx.record("visited", [room, reply.text[:8]])

    traces = []
    for mode, concurrency in MODES:
        sim = Sim(seed=2, ordering="keyed", trace=True)
        with LLMRuntime(sim, ScriptedModel(seed=2), mode=mode, concurrency=concurrency) as llm:
            names = [llm.spawn(visit, room, agent="ann").who for room in ("a", "b", "c")]
            sim.run()
        assert names == ["ann", "ann#2", "ann#3"]
        assert llm.context("ann").calls == 3
        traces.append(sim.trace_records)
    assert all(first_divergence(traces[0], other) is None for other in traces[1:])
    sim = Sim(ordering="keyed")
    llm = LLMRuntime(sim, ScriptedModel())
    llm.spawn(visit, "a", agent="bob")
    llm.spawn(visit, "b", agent="bob")
    with pytest.raises(ConfigError, match="'bob#2' exists already"):
        llm.spawn(visit, "c", agent="bob#2")


@pytest.mark.parametrize("mode", ["sequential", "threads", "asyncio"])
def test_a_closed_runtime_stops_a_run_with_one_error_in_every_mode(mode: str) -> None:
    def asker(sim: Sim, ctx: Any) -> Any:
        for turn in range(5):
            yield sim.delay(1.0)
            yield ctx.complete(CompletionRequest.chat(f"turn {turn}"))

    sim = Sim(seed=0, ordering="keyed")
    with LLMRuntime(sim, ScriptedModel(), mode=mode) as llm:
        llm.spawn(asker, agent="ann")
        sim.run(until=1.05)  # the first call is in flight (or scheduled) now
    with pytest.raises(ConfigError, match="LLMRuntime was closed"):
        sim.run(until=20)


def test_closing_an_asyncio_runtime_leaves_no_pending_task() -> None:
    script = """
import time
from simulacra import Sim
from simulacra.llm import CompletionRequest, ScriptedModel
from simulacra.societies import LLMRuntime

class Slow:
    inner = ScriptedModel()
    def complete(self, request, *, site=None):
        return self.inner.complete(request, site=site)
    async def acomplete(self, request, *, site=None):
        import asyncio
        await asyncio.sleep(5)
        return self.inner.complete(request, site=site)

def asker(sim, ctx):
    yield ctx.complete(CompletionRequest.chat(ctx.agent))

sim = Sim(ordering="keyed")
with LLMRuntime(sim, Slow(), mode="asyncio", concurrency=4) as llm:
    for i in range(20):
        llm.spawn(asker, agent=f"a{i}")
    sim.run(until=0.01)
print("closed")
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", script],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "closed"
    assert "Task was destroyed" not in done.stderr
    assert "never awaited" not in done.stderr


@pytest.mark.parametrize("mode", ["sequential", "threads"])
def test_a_model_that_returns_no_completion_is_named(mode: str) -> None:
    class Words:
        def complete(self, request: CompletionRequest, *, site: Any = None) -> str:
            return "leave"

    def asker(sim: Sim, ctx: Any) -> Any:
        yield ctx.complete(CompletionRequest.chat("stay?"))

    sim = Sim(ordering="keyed")
    with LLMRuntime(sim, Words(), mode=mode) as llm:  # type: ignore[arg-type]
        llm.spawn(asker, agent="ann")
        with pytest.raises(ConfigError, match=r"agent 'ann', call 0: the model Words returned "
                                              r"'leave' \(a str\)"):
            sim.run()
    with pytest.raises(ConfigError, match="got the class ScriptedModel; pass an instance"):
        LLMRuntime(Sim(ordering="keyed"), ScriptedModel)  # type: ignore[arg-type]


def test_calls_read_the_same_in_every_mode_at_any_cut() -> None:
    def asker(sim: Sim, ctx: Any) -> Any:
        for turn in range(4):
            yield ctx.complete(CompletionRequest.chat(f"{ctx.agent} {turn}"))
            yield sim.delay(0.05)

    counts = set()
    for mode, concurrency in MODES:
        sim = Sim(seed=5, ordering="keyed")
        seen = []
        with LLMRuntime(sim, ScriptedModel(seed=5), mode=mode, concurrency=concurrency) as llm:
            for index in range(6):
                llm.spawn(asker, agent=f"a{index}")
            for cut in (0.05, 0.3, 0.7, 1.5, 100.0):
                sim.run(until=cut)
                seen.append((llm.calls, llm.tokens))
        counts.add(tuple(seen))
    assert len(counts) == 1
    assert next(iter(counts))[-1][0] == 24


def test_the_clinic_refuses_a_server_that_is_not_openai_compatible(tmp_path: Path) -> None:
    import http.server
    import threading

    (tmp_path / "index.html").write_text("<html><body>hello</body></html>\n")
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(  # noqa: E731
        *a, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        done = _script("--base-url", f"http://127.0.0.1:{server.server_port}/v1",
                       "--model", "m", "--patients", "3")
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert "without an OpenAI-style model list" in done.stderr


def test_the_clinic_refuses_a_model_name_without_a_server_and_damaged_recordings(
        tmp_path: Path) -> None:
    done = _script("--model", "foo")
    assert done.returncode == 2
    assert "--model names a server's model" in done.stderr
    record = tmp_path / "rec.sqlite"
    assert _script("--record", str(record), "--patients", "60").returncode == 0
    data = bytearray(record.read_bytes())
    for offset in range(4096, len(data), 4096):  # every page but the header: garbage
        data[offset:offset + 64] = os.urandom(64)
    record.write_bytes(bytes(data))
    done = _script("--replay", str(record), "--patients", "60")
    assert done.returncode in (0, 2), done.stderr
    if done.returncode == 2:
        assert done.stderr.startswith("error: ")
        assert done.stderr.strip().count("\n") == 0, done.stderr
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    done = _script("--replay", str(empty))
    assert done.returncode == 2
    assert "the file is empty" in done.stderr
    done = _script("--replay", str(tmp_path))
    assert "a directory, not a recordings file" in done.stderr
