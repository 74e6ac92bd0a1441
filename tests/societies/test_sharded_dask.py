"""Sharded societies on a Dask cluster (``sim.engine.shard_mode=dask``), a real LocalCluster.

The shards are actors on the cluster's workers; the reference is the same
society in one process. A worker killed mid-run stops the run loudly, and its
last checkpoint resumes to the one-process digest.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _killing import killing_model

import simulacra
from simulacra.cli import main

distributed = pytest.importorskip("distributed")

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "social" / "config.yaml"

pytestmark = pytest.mark.timeout(300)

#: Kills its process at step kill_at on a Dask worker (the run's own process never acts).
KILLING = killing_model("SIMULACRA_TEST_WORKER")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """Two single-threaded worker processes on loopback, which know they are workers.

    The variable goes to the nannies (env=), not to this process's environment: a
    LocalCluster's nannies live in this process and start a killed worker again from
    it, so a variable set here only while the cluster started was missing from every
    restarted worker, and a later kill on one of them never happened.
    """
    with distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
            dashboard_address=None, env={"SIMULACRA_TEST_WORKER": "1"},
            scheduler_kwargs={"dashboard_address": "127.0.0.1:0"}) as local:
        yield local


def _base(address: str, *extra: str) -> list[str]:
    return ["sim.agents=10", "sim.steps=4", "sim.engine.shards=3", "sim.engine.shard_mode=dask",
            f"run.dask.scheduler_address={address}", *extra]


def test_dask_shards_give_the_one_process_digest(cluster: Any, tmp_path: Path) -> None:
    one = simulacra.run_society(simulacra.load_config(CONFIG, ["sim.agents=10", "sim.steps=4"]),
                                out=tmp_path / "one")
    many = simulacra.run_society(
        simulacra.load_config(CONFIG, _base(str(cluster.scheduler_address))),
        out=tmp_path / "many")
    assert many.result.digest == one.result.digest
    for name in ("action_events.jsonl", "digest.txt"):
        assert (tmp_path / "many" / name).read_bytes() == (tmp_path / "one" / name).read_bytes()
    assert simulacra.replay_run(tmp_path / "many", overrides=("sim.engine.shards=1",)).matches


def test_without_an_address_the_shards_run_on_a_local_cluster(tmp_path: Path) -> None:
    base = ["sim.agents=6", "sim.steps=2"]
    one = simulacra.run_society(simulacra.load_config(CONFIG, base))
    many = simulacra.run_society(simulacra.load_config(
        CONFIG, [*base, "sim.engine.shards=2", "sim.engine.shard_mode=dask"]))
    assert many.result.digest == one.result.digest


@pytest.mark.slow
def test_a_killed_worker_stops_the_run_and_the_checkpoint_resumes_it(
        cluster: Any, tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "killing.py").write_text(KILLING)
    config = folder / "config.yaml"
    config.write_text(textwrap.dedent("""\
        seed: 2
        sim:
          agents: 10
          steps: 5
          world: {factory: killing.py:build}
        run: {checkpoint_every: 1}
        """))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

    def simulacra_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "simulacra", *args], capture_output=True,
                              text=True, timeout=240, check=False, env=env)

    whole = simulacra_cli("run", str(config), "--out", str(tmp_path / "whole"), "--no-progress")
    assert whole.returncode == 0, whole.stderr
    cut = simulacra_cli("run", str(config), "--out", str(tmp_path / "cut"), "--no-progress",
                        "sim.world.kill_at=2", "run.recover_shards=0",
                        *_base(str(cluster.scheduler_address))[2:])
    assert cut.returncode == 1, cut.stderr
    assert "was lost" in cut.stderr
    assert "Traceback" not in cut.stderr
    assert not (tmp_path / "cut" / "digest.txt").exists()
    (tmp_path / "cut" / "config.yaml").write_text(
        (tmp_path / "cut" / "config.yaml").read_text().replace("kill_at: 2", "kill_at: null"))
    cluster.wait_for_workers(2, timeout=60)  # the nanny has restarted it
    resumed = simulacra_cli("run", "--resume", str(tmp_path / "cut"), "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    for name in ("digest.txt", "action_events.jsonl"):
        assert ((tmp_path / "cut" / name).read_bytes()
                == (tmp_path / "whole" / name).read_bytes()), name


def test_an_unreachable_scheduler_is_one_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = ["run", str(CONFIG), "--out", str(tmp_path / "run"), "--no-progress",
            *_base(f"tcp://127.0.0.1:{port}")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"run.dask.scheduler_address='tcp://127.0.0.1:{port}'" in err
    assert not (tmp_path / "run").exists()


def test_a_worker_killed_once_is_recovered_within_the_run(cluster: Any, tmp_path: Path) -> None:
    """The default run.recover_shards: the run resumes itself from its last checkpoint on
    the cluster's workers as they are now, and ends with the uncut run's files, exit 0."""
    folder = tmp_path / "model"
    folder.mkdir()
    once = tmp_path / "killed-once"
    (folder / "killing.py").write_text(killing_model("SIMULACRA_TEST_WORKER", once))
    config = folder / "config.yaml"
    config.write_text("seed: 2\nsim:\n  agents: 10\n  steps: 5\n"
                      "  world: {factory: killing.py:build}\nrun: {checkpoint_every: 1}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    whole = subprocess.run([sys.executable, "-m", "simulacra", "run", str(config), "--out",
                            str(tmp_path / "whole"), "--no-progress"], capture_output=True,
                           text=True, timeout=240, check=False, env=env)
    assert whole.returncode == 0, whole.stderr
    run = subprocess.run([sys.executable, "-m", "simulacra", "run", str(config), "--out",
                          str(tmp_path / "run"), "--no-progress", "sim.world.kill_at=2",
                          *_base(str(cluster.scheduler_address))[2:]],
                         capture_output=True, text=True, timeout=240, check=False, env=env)
    assert run.returncode == 0, run.stderr
    assert once.exists(), (run.stdout, run.stderr)  # the worker was killed: the run says so
    assert "resuming the run from its last checkpoint" in run.stderr
    for name in ("digest.txt", "action_events.jsonl"):
        assert (tmp_path / "run" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()
    cluster.wait_for_workers(2, timeout=60)
