"""Sharded societies (``sim.engine.shards``): the unsharded run's digest and events at any count.

The reference is always the same society run in one process. Generated
societies (agents, steps, participation, flows, resolution, seed) run on
1 to 8 shards, inline and on threads; a few run in shard processes, with
checkpoints, a killed shard, a resume at another shard count, a replay, and
real loopback model servers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from _killing import killing_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simulacra
from simulacra.cli import main
from simulacra.llm import ScriptedServer

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "social" / "config.yaml"

pytestmark = pytest.mark.timeout(300)


def _run(overrides: list[str], out: Path | None = None) -> simulacra.SocietyRun:
    return simulacra.run_society(simulacra.load_config(CONFIG, overrides), out=out)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(agents=st.integers(2, 14), steps=st.integers(1, 4), shards=st.integers(1, 8),
       shard_mode=st.sampled_from(["inline", "threads"]),
       mode=st.sampled_from(["sequential", "threads"]),
       participation=st.sampled_from([1.0, 0.6]), flows=st.integers(1, 3),
       resolution=st.sampled_from(["seeded", "id"]), seed=st.integers(0, 5))
def test_generated_societies_give_the_unsharded_digest_on_any_shard_count(  # noqa: PLR0917
        agents: int, steps: int, shards: int, shard_mode: str, mode: str,
        participation: float, flows: int, resolution: str, seed: int) -> None:
    base = [f"seed={seed}", f"sim.agents={max(agents, 2)}", f"sim.steps={steps}",
            f"sim.engine.mode={mode}", f"sim.engine.participation={participation}",
            f"sim.engine.flows={flows}", f"sim.engine.resolution={resolution}"]
    one = _run(base)
    many = _run([*base, f"sim.engine.shards={shards}", f"sim.engine.shard_mode={shard_mode}"])
    assert many.result.digest == one.result.digest
    assert many.result.step_digests == one.result.step_digests
    assert many.result.agents_digest == one.result.agents_digest
    assert many.llm["calls"] == one.llm["calls"]


@pytest.mark.parametrize("shards", [2, 4, 8])
def test_process_shards_write_the_unsharded_run_directory(tmp_path: Path, shards: int) -> None:
    base = ["sim.agents=16", "sim.steps=3", "run.checkpoint_every=1"]
    one = _run(base, tmp_path / "one")
    many = _run([*base, f"sim.engine.shards={shards}"], tmp_path / "many")
    assert many.result.digest == one.result.digest
    for name in ("action_events.jsonl", "digest.txt"):
        assert (tmp_path / "many" / name).read_bytes() == (tmp_path / "one" / name).read_bytes()
    calls = (tmp_path / "many" / "calls.jsonl").read_text().splitlines()
    assert len(calls) == many.llm["calls"] == one.llm["calls"]
    # the recordings serve a replay at another shard count, and in one process
    assert simulacra.replay_run(tmp_path / "many").matches
    assert simulacra.replay_run(tmp_path / "many", overrides=("sim.engine.shards=1",)).matches
    assert simulacra.replay_run(tmp_path / "one",
                                overrides=("sim.engine.shards=3",)).matches


def _write_config(folder: Path, factory: str, *extra: str) -> Path:
    config = folder / "config.yaml"
    config.write_text(textwrap.dedent(f"""\
        name: sharded
        seed: 4
        sim:
          agents: 10
          steps: 5
          world: {{factory: {factory}}}
          engine: {{shards: 3, shard_mode: processes, mode: threads, concurrency: 4}}
        run: {{checkpoint_every: 1}}
        """) + "".join(f"{line}\n" for line in extra))
    return config


def _simulacra(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "simulacra", *args], capture_output=True,
                          text=True, timeout=240, check=False, env=env, cwd=cwd)


def test_a_killed_shard_stops_the_run_and_it_resumes_at_another_shard_count(
        tmp_path: Path) -> None:
    """A shard process SIGKILLed in step 3: the run stops loudly; its last checkpoint
    resumes on 2 shards, then on 1, to the digest and events of the uncut run."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "killing.py").write_text(killing_model("SIMULACRA_TEST_SHARD"))
    config = _write_config(folder, "killing.py:build")
    whole = _simulacra("run", str(config), "--out", str(tmp_path / "whole"), "--no-progress")
    assert whole.returncode == 0, whole.stderr
    os.environ["SIMULACRA_TEST_SHARD"] = "1"
    try:
        cut = _simulacra("run", str(config), "sim.world.kill_at=3", "--out",
                         str(tmp_path / "cut"), "--no-progress", "run.recover_shards=0")
    finally:
        del os.environ["SIMULACRA_TEST_SHARD"]
    assert cut.returncode == 1, cut.stderr
    assert "shard 0" in cut.stderr
    assert "died" in cut.stderr
    assert "Traceback" not in cut.stderr
    assert not (tmp_path / "cut" / "digest.txt").exists()
    (tmp_path / "cut" / "config.yaml").write_text(
        (tmp_path / "cut" / "config.yaml").read_text().replace("kill_at: 3", "kill_at: null"))
    resumed = _simulacra("run", "--resume", str(tmp_path / "cut"), "--no-progress",
                         "sim.engine.shards=2")
    assert resumed.returncode == 0, resumed.stderr
    for name in ("digest.txt", "action_events.jsonl"):
        assert ((tmp_path / "cut" / name).read_bytes()
                == (tmp_path / "whole" / name).read_bytes()), name
    replayed = _simulacra("replay", str(tmp_path / "cut"), "sim.engine.shards=1")
    assert replayed.returncode == 0, replayed.stderr + replayed.stdout


def test_a_shard_killed_once_is_recovered_within_the_run(tmp_path: Path) -> None:
    """run.recover_shards (2 by default): the run resumes itself from its last checkpoint,
    says so in a line, and ends with the uncut run's files, exit 0."""
    folder = tmp_path / "model"
    folder.mkdir()
    once = tmp_path / "killed-once"
    (folder / "killing.py").write_text(killing_model("SIMULACRA_TEST_SHARD", once))
    config = _write_config(folder, "killing.py:build")
    whole = _simulacra("run", str(config), "--out", str(tmp_path / "whole"), "--no-progress")
    assert whole.returncode == 0, whole.stderr
    os.environ["SIMULACRA_TEST_SHARD"] = "1"
    try:
        run = _simulacra("run", str(config), "sim.world.kill_at=3", "--out",
                         str(tmp_path / "run"), "--no-progress")
    finally:
        del os.environ["SIMULACRA_TEST_SHARD"]
    assert run.returncode == 0, run.stderr
    assert once.exists()  # it was killed
    assert "resuming the run from its last checkpoint" in run.stderr
    for name in ("digest.txt", "action_events.jsonl"):
        assert (tmp_path / "run" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()


def test_a_crashed_coordinator_resumes_on_shards_to_the_uncut_digest(tmp_path: Path) -> None:
    factory = f"{ROOT / 'tests' / 'societies' / '_crashing.py'}:build"
    config = _write_config(tmp_path, factory)
    whole = _simulacra("run", str(config), "--out", str(tmp_path / "whole"), "--no-progress",
                       "sim.engine.shards=1")
    assert whole.returncode == 0, whole.stderr
    crashed = _simulacra("run", str(config), "sim.world.crash_at=2", "--out",
                         str(tmp_path / "cut"), "--no-progress")
    assert crashed.returncode == 9, crashed.stderr
    (tmp_path / "cut" / "config.yaml").write_text(
        (tmp_path / "cut" / "config.yaml").read_text().replace("crash_at: 2", "crash_at: null"))
    resumed = _simulacra("run", "--resume", str(tmp_path / "cut"), "--no-progress",
                         "sim.engine.shards=4", "sim.engine.shard_mode=threads")
    assert resumed.returncode == 0, resumed.stderr
    assert ((tmp_path / "cut" / "digest.txt").read_text()
            == (tmp_path / "whole" / "digest.txt").read_text())


def test_shards_calling_a_real_server_give_the_digest_of_one_process(tmp_path: Path) -> None:
    with ScriptedServer(seed=0, latency=0.02) as server:
        served = ["sim.llm.provider=openai_compatible", f"sim.llm.base_url={server.base_url}",
                  "sim.llm.model=scripted", "sim.agents=9", "sim.steps=3"]
        one = _run(served, tmp_path / "one")
        before = server.calls
        many = _run([*served, "sim.engine.shards=3"], tmp_path / "many")
        made = server.calls - before
    assert many.result.digest == one.result.digest
    assert made == one.llm["calls"]  # every call made once, in a shard
    assert json.loads((tmp_path / "many" / "summary.json").read_text())["llm"]["calls"] == made
    # a call's latency in calls.jsonl is its time in its shard (the server sleeps 20 ms)
    lines = [json.loads(line)
             for line in (tmp_path / "many" / "calls.jsonl").read_text().splitlines()]
    assert len(lines) == made
    assert min(line["latency_s"] for line in lines) >= 0.02


def test_shards_route_over_endpoints(tmp_path: Path) -> None:
    with ScriptedServer(seed=0) as left, ScriptedServer(seed=0) as right:
        routed = ["sim.agents=8", "sim.steps=2",
                  *(f"sim.llm.endpoints.{name}.{key}" for name, url in
                    (("left", left.base_url), ("right", right.base_url))
                    for key in ("provider=openai_compatible", f"base_url={url}",
                                "model=scripted")),
                  "sim.llm.routing.default=left",
                  "sim.llm.routing.rules=[{agents: '[a-d]*', endpoint: right}]"]
        one = _run(routed, tmp_path / "one")
        many = _run([*routed, "sim.engine.shards=2"], tmp_path / "many")
    assert many.result.digest == one.result.digest
    lines = [json.loads(line)
             for line in (tmp_path / "many" / "calls.jsonl").read_text().splitlines()]
    assert {line["endpoint"] for line in lines} == {"left", "right"}
    for line in lines:
        assert line["endpoint"] == ("right" if line["agent"][0] in "abcd" else "left")


BAD = {
    "tracing": (["run.trace.otel=jsonl"], "run.trace.otel does not follow turns into shards"),
    "a budget": (["run.budget.tokens=1000"], "run.budget cannot be held on shards"),
    "asyncio in a shard": (["sim.engine.mode=asyncio"], "asyncio inside a shard"),
    "no shards": (["sim.engine.shards=0"], "sim.engine.shards"),
    "a shard mode typo": (["sim.engine.shard_mode=forks"], "sim.engine.shard_mode"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_what_shards_do_not_take_is_one_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    overrides, expected = BAD[case]
    shards = [] if any(o.startswith("sim.engine.shards") for o in overrides) else [
        "sim.engine.shards=2"]
    args = ["run", str(CONFIG), "--out", str(tmp_path / "run"), "--no-progress",
            "sim.agents=4", "sim.steps=1", *shards, *overrides]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert expected in err
    assert not (tmp_path / "run").exists()


def test_a_model_object_that_cannot_cross_into_a_process_is_refused() -> None:
    import threading

    class Local(simulacra.ScriptedModel):
        def __init__(self) -> None:
            super().__init__(seed=0)
            self.lock = threading.Lock()  # unpicklable, and a local class besides

    config = simulacra.load_config(CONFIG, ["sim.agents=4", "sim.steps=1",
                                            "sim.engine.shards=2"])
    with pytest.raises(simulacra.ConfigError, match="cannot be sent to a shard's process"):
        simulacra.run_society(config, model=Local())
    threads = config.with_overrides(["sim.engine.shard_mode=threads"])
    assert simulacra.run_society(threads, model=Local()).result.digest == (
        simulacra.run_society(config.with_overrides(["sim.engine.shards=1"]),
                              model=Local()).result.digest)


def test_ctrl_c_on_the_whole_group_stops_at_a_step_and_resumes_on_other_shards(
        tmp_path: Path) -> None:
    """A terminal's Ctrl-C reaches the shard processes too: the run still stops at the end
    of its step (exit 130), and resumes on 3 shards to the one-process run's files, with no
    completed call asked for twice."""
    def command(url: str, out: Path, *extra: str) -> list[str]:
        return [sys.executable, "-m", "simulacra", "run", str(CONFIG), "--out", str(out),
                "--no-progress", "sim.agents=8", "sim.steps=12", "sim.engine.concurrency=2",
                "sim.llm.provider=openai_compatible", f"sim.llm.base_url={url}",
                "sim.llm.model=scripted", *extra]

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with ScriptedServer(latency=0.02) as server:
        whole = subprocess.run(command(server.base_url, tmp_path / "whole"), capture_output=True,
                               text=True, env=env, timeout=240, check=False)
        assert whole.returncode == 0, whole.stderr
        server.reset()
        cut = tmp_path / "cut"
        process = subprocess.Popen(command(server.base_url, cut, "sim.engine.shards=2"),
                                   text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   env=env, start_new_session=True)
        telemetry = cut / "telemetry.jsonl"
        deadline = time.monotonic() + 120
        while not (telemetry.is_file() and len(telemetry.read_text().splitlines()) >= 2):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the run made no progress"
            time.sleep(0.02)
        os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=120)
        assert process.returncode == 130, err
        assert "Traceback" not in err
        assert f"simulacra run --resume {cut}" in err
        resumed = subprocess.run([sys.executable, "-m", "simulacra", "run", "--resume", str(cut),
                                  "--no-progress", "sim.engine.shards=3"], capture_output=True,
                                 text=True, env=env, timeout=240, check=False)
        assert resumed.returncode == 0, resumed.stderr
        sites = [(r.get("site"), json.dumps(r.get("body", {}).get("messages"), sort_keys=True))
                 for r in server.requests if r.get("status") == 200]
    assert len(sites) == len(set(sites))
    for name in ("digest.txt", "action_events.jsonl"):
        assert (cut / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


def test_a_partition_function_in_a_loose_folder_places_the_agents(tmp_path: Path) -> None:
    (tmp_path / "parts.py").write_text(textwrap.dedent("""\
        def by_initial(agent_ids, shards):
            # agents whose handle starts early in the alphabet on shard 0, the rest spread
            parts = [[] for _ in range(shards)]
            for i, agent in enumerate(agent_ids):
                parts[0 if agent < "f" else 1 + i % (shards - 1)].append(agent)
            return parts
        """))
    base = ["sim.agents=12", "sim.steps=3"]
    one = _run(base)
    many = _run([*base, "sim.engine.shards=3", "sim.engine.shard_mode=inline",
                 f"sim.engine.partition={tmp_path / 'parts.py'}:by_initial"])
    assert many.result.digest == one.result.digest


BAD_PARTITIONS = {
    "unknown": ("return [list(ids) + ['zed99'], []]", "names agent 'zed99'"),
    "twice": ("return [list(ids), [ids[0]]]", "is on shards 0 and 1"),
    "missing": ("return [list(ids[1:]), []]", "is on no shard"),
    "count": ("return [list(ids)]", "must return a list of 2 lists"),
}


@pytest.mark.parametrize("case", sorted(BAD_PARTITIONS))
def test_a_bad_partition_is_one_line_and_exit_2_before_any_call(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    body, expected = BAD_PARTITIONS[case]
    (tmp_path / "parts.py").write_text(f"def cut(ids, shards):\n    {body}\n")
    args = ["run", str(CONFIG), "--out", str(tmp_path / "run"), "--no-progress",
            "sim.agents=4", "sim.steps=1", "sim.engine.shards=2",
            f"sim.engine.partition={tmp_path / 'parts.py'}:cut"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert expected in err
    assert not (tmp_path / "run").exists()


def test_an_agent_that_shares_state_with_the_world_is_refused_on_shards(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The agent keeps a reference to the world's follows: on one process it sees them
    change, on shards it would keep a stale copy. The partition check refuses it."""
    (tmp_path / "sharing.py").write_text(textwrap.dedent(f"""\
        import sys
        sys.path.insert(0, {str(ROOT / 'examples' / 'social')!r})
        import model as social

        def build(**kwargs):
            world, agents = social.build(**kwargs)
            agents[1].following = world.follows  # the same dict the world changes
            return world, agents
        """))
    args = ["run", str(CONFIG), "--out", str(tmp_path / "run"), "--no-progress",
            "sim.agents=4", "sim.steps=1", "sim.engine.shards=2",
            f"sim.world.factory={tmp_path / 'sharing.py'}:build"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "holds a dict the world's state holds too in its state ('following')" in err
    assert not (tmp_path / "run").exists()
    # one process is fine with it
    assert main([*args[:-2], f"sim.world.factory={tmp_path / 'sharing.py'}:build",
                 "sim.engine.shards=1"]) == 0


EVENT = ["sim.engine.step.built_in=async_event"]


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(agents=st.integers(2, 12), steps=st.integers(1, 6), shards=st.integers(1, 8),
       shard_mode=st.sampled_from(["inline", "threads"]),
       mode=st.sampled_from(["sequential", "threads", "asyncio"]),
       window=st.sampled_from([0.5, 1.0, 2.0]), max_turns=st.sampled_from([None, 2]),
       seed=st.integers(0, 5))
def test_generated_event_driven_societies_give_the_unsharded_digest(  # noqa: PLR0917
        agents: int, steps: int, shards: int, shard_mode: str, mode: str, window: float,
        max_turns: int | None, seed: int) -> None:
    options = f"{{window: {window}" + (f", max_turns: {max_turns}}}" if max_turns else "}")
    base = [*EVENT, f"seed={seed}", f"sim.agents={agents}", f"sim.steps={steps}",
            f"sim.engine.mode={mode}", f"sim.engine.step.options={options}"]
    one = _run(base)
    many = _run([*base, f"sim.engine.shards={shards}", f"sim.engine.shard_mode={shard_mode}"])
    assert many.result.digest == one.result.digest
    assert many.result.step_digests == one.result.step_digests
    assert many.llm["calls"] == one.llm["calls"]


@pytest.mark.parametrize("mode", ["threads", "asyncio"])
def test_event_driven_process_shards_resume_and_replay_at_other_counts(
        tmp_path: Path, mode: str) -> None:
    base = [*EVENT, "sim.agents=10", "sim.steps=6", f"sim.engine.mode={mode}",
            "run.checkpoint_every=2"]
    one = _run(base, tmp_path / "one")
    many = _run([*base, "sim.engine.shards=3"], tmp_path / "many")
    assert many.result.digest == one.result.digest
    for name in ("action_events.jsonl", "digest.txt"):
        assert (tmp_path / "many" / name).read_bytes() == (tmp_path / "one" / name).read_bytes()
    assert simulacra.replay_run(tmp_path / "many", overrides=("sim.engine.shards=1",)).matches
    assert simulacra.replay_run(tmp_path / "one", overrides=("sim.engine.shards=2",)).matches
    # cut after the checkpoint of window 2, resumed on 2 shards
    cut = tmp_path / "cut"
    control = simulacra.RunControl()

    def stop_after_three(report: object) -> None:
        if getattr(report, "step", 0) >= 2:
            control.request_stop("test")

    with pytest.raises(simulacra.RunStopped):
        simulacra.run_society(simulacra.load_config(CONFIG, [*base, "sim.engine.shards=3"]),
                              out=cut, on_step=stop_after_three, control=control)
    resumed = simulacra.resume_society(cut, overrides=("sim.engine.shards=2",))
    assert resumed.result.digest == one.result.digest
    assert (cut / "action_events.jsonl").read_bytes() == (
        tmp_path / "one" / "action_events.jsonl").read_bytes()
