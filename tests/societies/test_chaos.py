"""A society against the real HTTP test server, with injected faults: 429s (Retry-After),
5xx, hangs past the timeout, dropped connections and malformed replies. It is killed with
SIGKILL at a random point, or stopped by a budget, and resumed; its final digest and
action_events.jsonl are byte-identical to an uninterrupted run with no faults, and the server
is never asked again for a call the run had recorded. On both engines, for the social example
and a society of our own (the loose-folder bazaar)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulacra.llm import CompletionRequest, ScriptedModel, ScriptedServer, default_rules

ROOT = Path(__file__).resolve().parents[2]
SOCIETIES = {
    "social": f"{ROOT / 'examples' / 'social' / 'model.py'}:build",
    "bazaar": f"{Path(__file__).resolve().parent / 'loose' / 'bazaar.py'}:build",
}

pytestmark = pytest.mark.timeout(300)


def _malformed(request: CompletionRequest) -> bool:
    """Some replies are malformed, decided by the request alone (the same in every run)."""
    return sum(map(ord, request.messages[-1].content)) % 7 == 0


def _server() -> ScriptedServer:
    rules = [("malformed", _malformed, lambda r, rng: "I'd rather not {say"),
             *default_rules()]
    return ScriptedServer(ScriptedModel(seed=0, rules=rules), latency=0.02)


def _config(tmp_path: Path, society: str, engine: str, base_url: str) -> Path:
    path = tmp_path / f"{society}-{engine}.yaml"
    path.write_text(f"""
name: chaos-{society}
seed: 5
sim:
  steps: 6
  agents: 6
  world:
    factory: {SOCIETIES[society]}
  engine:
    step:
      built_in: {engine}
    concurrency: 4
  llm:
    provider: openai_compatible
    base_url: {base_url}
    model: scripted
    timeout: 0.3
    max_retries: 6
    backoff_base: 0.01
    pricing:
      prompt_per_mtok: 3
      completion_per_mtok: 15
run:
  max_consecutive_provider_failures: 50
""", encoding="utf-8")
    return path


def _simulacra(*args: str,
               wait: bool = True) -> subprocess.CompletedProcess[str] | subprocess.Popen[str]:
    command = [sys.executable, "-m", "simulacra", *args, "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    if not wait:
        return subprocess.Popen(command, text=True, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, env=env)
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=240,
                          check=False)


def _inject(server: ScriptedServer) -> None:
    """Transient faults: each call recovers within its retries."""
    server.fail_next(2, 429, retry_after=0)
    server.fail_next(1, 503)
    server.delay_next(1, 0.6)  # past the 0.3 s timeout: retried
    server.fail_next(1, 500)
    server.disconnect_next(1)


def _recorded_sites(run_dir: Path) -> set[str]:
    import sqlite3

    with sqlite3.connect(run_dir / "llm_recordings.sqlite") as db:
        return {f"{agent}/{n}" for agent, n in db.execute("SELECT agent, n FROM completions")}


def _asked_sites(server: ScriptedServer) -> set[str]:
    return {str(r["site"]) for r in server.requests if r.get("site")}


def _kill_after_steps(process: subprocess.Popen[str], run_dir: Path,
                      rng: random.Random) -> None:
    """SIGKILL the run once it has finished 1 to 3 steps (a random one), at a random moment."""
    telemetry = run_dir / "telemetry.jsonl"
    deadline = time.monotonic() + 120
    target = rng.randint(1, 3)
    while not (telemetry.is_file() and len(telemetry.read_text().splitlines()) >= target):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(rng.random() * 0.05)
    assert process.poll() is None, "the run finished before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)


@pytest.mark.parametrize("engine", ["round", "async_event"])
@pytest.mark.parametrize("society", ["social", "bazaar"])
def test_killed_or_stopped_and_resumed_under_faults_equals_the_clean_run(
        tmp_path: Path, society: str, engine: str) -> None:
    rng = random.Random(f"{society}/{engine}")
    with _server() as server:
        config = _config(tmp_path, society, engine, server.base_url)
        clean = _simulacra("run", str(config), "--out", str(tmp_path / "clean"))
        assert clean.returncode == 0, clean.stderr
        summary = json.loads((tmp_path / "clean" / "summary.json").read_text())
        if society == "social":  # the malformed replies did happen, as failed turns
            assert summary["failures"]["by_kind"].get("InvalidAction", 0) > 0
        cost = summary["llm"]["cost"]

        # SIGKILL at a random point, under faults; then resume, under faults again.
        server.reset()
        _inject(server)
        killed = tmp_path / "killed"
        process = _simulacra("run", str(config), "--out", str(killed), wait=False)
        assert isinstance(process, subprocess.Popen)
        _kill_after_steps(process, killed, rng)
        paid = _recorded_sites(killed)
        assert paid
        server.reset()
        _inject(server)
        resumed = _simulacra("run", "--resume", str(killed))
        assert resumed.returncode == 0, resumed.stderr
        # No completed (recorded) call was asked for again. (A call the server answered
        # as the process died, or after the client's timeout, was never received: it is
        # asked again, and that is the only kind of call asked twice.)
        assert not paid & _asked_sites(server)

        # Stopped by a budget, under faults; then resumed with a larger one.
        _inject(server)
        budget = tmp_path / "budget"
        stopped = _simulacra("run", str(config), f"run.budget.cost={cost / 2:.9f}",
                             "--out", str(budget))
        assert stopped.returncode == 3, stopped.stderr
        paid = _recorded_sites(budget)
        server.reset()
        _inject(server)
        finished = _simulacra("run", "--resume", str(budget), f"run.budget.cost={cost * 3}")
        assert finished.returncode == 0, finished.stderr
        assert not paid & _asked_sites(server)
        replayed = _simulacra("replay", str(budget))  # the budget does not bind a replay
        assert replayed.returncode == 0, replayed.stderr

    expected_digest = (tmp_path / "clean" / "digest.txt").read_bytes()
    expected_log = (tmp_path / "clean" / "action_events.jsonl").read_bytes()
    for run_dir in (killed, budget):
        assert (run_dir / "digest.txt").read_bytes() == expected_digest, run_dir.name
        assert (run_dir / "action_events.jsonl").read_bytes() == expected_log, run_dir.name


@pytest.mark.parametrize("engine", ["round", "async_event"])
@pytest.mark.parametrize("shard_mode", ["processes", "dask"])
def test_a_sharded_society_killed_under_faults_resumes_on_other_shards_to_the_clean_run(
        tmp_path: Path, engine: str, shard_mode: str) -> None:
    """The same chaos on shards: the run's process is SIGKILLed mid-run under faults, with
    its shards (processes, or actors on a Dask LocalCluster); it resumes on another shard
    count, under faults again, to the files of a clean run in one process, asking the server
    for no recorded call again."""
    rng = random.Random(f"shards/{engine}/{shard_mode}")
    cluster = None
    extra: list[str] = []
    if shard_mode == "dask":
        distributed = pytest.importorskip("distributed")
        cluster = distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
            dashboard_address=None, scheduler_kwargs={"dashboard_address": "127.0.0.1:0"})
        extra = [f"run.dask.scheduler_address={cluster.scheduler_address}"]
    try:
        with _server() as server:
            config = _config(tmp_path, "social", engine, server.base_url)
            clean = _simulacra("run", str(config), "--out", str(tmp_path / "clean"))
            assert clean.returncode == 0, clean.stderr

            server.reset()
            _inject(server)
            killed = tmp_path / "killed"
            process = _simulacra("run", str(config), "--out", str(killed),
                                 "sim.engine.shards=2", f"sim.engine.shard_mode={shard_mode}",
                                 *extra, wait=False)
            assert isinstance(process, subprocess.Popen)
            _kill_after_steps(process, killed, rng)
            paid = _recorded_sites(killed)
            assert paid
            server.reset()
            _inject(server)
            resumed = _simulacra("run", "--resume", str(killed), "sim.engine.shards=3",
                                 *extra)
            assert resumed.returncode == 0, resumed.stderr
            assert not paid & _asked_sites(server)
    finally:
        if cluster is not None:
            cluster.close()
    for name in ("digest.txt", "action_events.jsonl"):
        assert (killed / name).read_bytes() == (tmp_path / "clean" / name).read_bytes(), name
