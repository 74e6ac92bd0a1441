"""Checkpoint, crash, and ``simulacra run --resume`` in a new process: the uncut run's digest.

Each engine (round-based and event-driven) runs the social world in a
subprocess that writes a checkpoint every 2 steps and is killed (``os._exit``)
after step 3; a second subprocess resumes it from the checkpoint of step 2.
The resumed run must end with the digest of a run that was never interrupted,
and its logs must equal that run's logs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from simulacra import CheckpointError, ConfigError, resume_society

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def _config(tmp_path: Path, engine: str) -> Path:
    path = tmp_path / f"{engine}.yaml"
    path.write_text(f"""
name: resume-{engine}
seed: 3
sim:
  steps: 6
  agents: 16
  world:
    factory: {HERE / "_crashing.py"}:build
    feed_size: 6
    follows: 3
  engine:
    step:
      built_in: {engine}
    mode: threads
    concurrency: 8
run:
  checkpoint_every: 2
""", encoding="utf-8")
    return path


def _simulacra(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "simulacra", *args], capture_output=True,
                          text=True, timeout=240, check=False, env=env)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("engine", ["round", "async_event"])
def test_a_crashed_run_resumes_to_the_uncut_digest(tmp_path: Path, engine: str) -> None:
    config = _config(tmp_path, engine)
    whole, cut = tmp_path / "whole", tmp_path / "cut"

    done = _simulacra("run", str(config), "--out", str(whole), "--no-progress")
    assert done.returncode == 0, done.stderr
    crashed = _simulacra("run", str(config), "sim.world.crash_at=3", "--out", str(cut),
                         "--no-progress")
    assert crashed.returncode == 9, crashed.stderr  # killed mid-run, after step 3
    assert not (cut / "digest.txt").exists()
    assert sorted(p.name for p in (cut / "checkpoints").iterdir()) == [
        "checkpoint-000000.ckpt", "checkpoint-000002.ckpt"]  # before step 0, and step 2
    assert (cut / "action_events.jsonl").stat().st_size > 0

    # The crash happened after step 3 was logged: resume cuts that back to step 2.
    (cut / "config.yaml").write_text(
        (cut / "config.yaml").read_text().replace("crash_at: 3", "crash_at: null"))
    resumed = _simulacra("run", "--resume", str(cut), "--no-progress")

    assert resumed.returncode == 0, resumed.stderr
    expected = (whole / "digest.txt").read_text()
    assert (cut / "digest.txt").read_text() == expected
    logged = (cut / "action_events.jsonl").read_bytes()
    assert logged == (whole / "action_events.jsonl").read_bytes()
    assert expected.strip() in resumed.stdout


def test_resume_errors_name_the_problem(tmp_path: Path) -> None:
    config = _config(tmp_path, "round")
    done = _simulacra("run", str(config), "--out", str(tmp_path / "whole"), "--no-progress")
    assert done.returncode == 0, done.stderr

    with pytest.raises(ConfigError, match="holds a finished run; nothing to resume"):
        resume_society(tmp_path / "whole")
    with pytest.raises(ConfigError, match="is not a run directory"):
        resume_society(tmp_path / "nowhere")

    (tmp_path / "whole" / "digest.txt").unlink()
    shutil_target = tmp_path / "whole" / "checkpoints"
    for file in shutil_target.iterdir():
        file.unlink()
    with pytest.raises(CheckpointError, match="has no checkpoint to resume from"):
        resume_society(tmp_path / "whole")


@pytest.mark.timeout(300)
def test_a_corrupted_checkpoint_changes_nothing(tmp_path: Path) -> None:
    config = _config(tmp_path, "round")
    cut = tmp_path / "cut"
    crashed = _simulacra("run", str(config), "sim.world.crash_at=3", "--out", str(cut),
                         "--no-progress")
    assert crashed.returncode == 9
    checkpoint = cut / "checkpoints" / "checkpoint-000002.ckpt"
    data = bytearray(checkpoint.read_bytes())
    data[-5] ^= 0x55
    checkpoint.write_bytes(bytes(data))
    before = {p.name: p.read_bytes() for p in cut.iterdir() if p.is_file()}

    resumed = _simulacra("run", "--resume", str(cut), "--no-progress")

    assert resumed.returncode != 0
    assert "corrupted or truncated checkpoint" in resumed.stderr
    assert {p.name: p.read_bytes() for p in cut.iterdir() if p.is_file()} == before


def test_checkpoints_every_t_units_of_virtual_time(tmp_path: Path) -> None:
    from simulacra import load_config, run_society

    base = ["sim.engine.step.built_in=async_event", "sim.engine.step.options.window=0.5",
            "sim.steps=6"]
    config = load_config(_config(tmp_path, "async_event"),
                         [*base, "run.checkpoint_every=null", "run.checkpoint_every_time=1.0"])
    run_society(config, out=tmp_path / "timed")
    names = [p.name for p in sorted((tmp_path / "timed" / "checkpoints").iterdir())]
    # Before step 0, then at t = 1.0 and 2.0.
    assert names == ["checkpoint-000000.ckpt", "checkpoint-000002.ckpt", "checkpoint-000004.ckpt"]

    odd = load_config(_config(tmp_path, "async_event"),
                      [*base, "run.checkpoint_every=null", "run.checkpoint_every_time=0.75"])
    with pytest.raises(ConfigError, match=r"whole number of steps of 0\.5 units"):
        run_society(odd, out=tmp_path / "odd")
    assert not (tmp_path / "odd").exists()  # refused before anything was written
    both = load_config(_config(tmp_path, "async_event"), [*base, "run.checkpoint_every_time=1"])
    with pytest.raises(ConfigError, match="both set"):
        run_society(both, out=tmp_path / "both")


def _recorded_calls(run_dir: Path) -> int:
    import sqlite3

    with sqlite3.connect(run_dir / "llm_recordings.sqlite") as db:
        return int(db.execute("SELECT COUNT(*) FROM completions").fetchone()[0])


def _telemetry_totals(run_dir: Path) -> dict[str, int]:
    import json

    lines = [json.loads(line) for line in
             (run_dir / "telemetry.jsonl").read_text().splitlines()]
    return {key: sum(int(line[key]) for line in lines)
            for key in ("llm_calls", "prompt_tokens", "completion_tokens", "failed")}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("engine", ["round", "async_event"])
def test_calls_and_tokens_are_counted_once_across_a_resume(tmp_path: Path, engine: str) -> None:
    """The issue's overcount: summary.json, telemetry and the recordings agree, for the
    whole run, whether it ran in one go or crashed and resumed."""
    import json

    config = _config(tmp_path, engine)
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert _simulacra("run", str(config), "--out", str(whole), "--no-progress").returncode == 0
    assert _simulacra("run", str(config), "sim.world.crash_at=3", "--out", str(cut),
                      "--no-progress").returncode == 9
    (cut / "config.yaml").write_text(
        (cut / "config.yaml").read_text().replace("crash_at: 3", "crash_at: null"))
    resumed = _simulacra("run", "--resume", str(cut), "--no-progress")
    assert resumed.returncode == 0, resumed.stderr

    for run_dir in (whole, cut):
        llm = json.loads((run_dir / "summary.json").read_text())["llm"]
        telemetry = _telemetry_totals(run_dir)
        recorded = _recorded_calls(run_dir)
        assert recorded > 0
        assert llm["calls"] == telemetry["llm_calls"] == recorded, (run_dir.name, llm)
        assert llm["prompt_tokens"] == telemetry["prompt_tokens"] > 0
        assert llm["completion_tokens"] == telemetry["completion_tokens"] > 0
    uncut = json.loads((whole / "summary.json").read_text())["llm"]
    again = json.loads((cut / "summary.json").read_text())["llm"]
    assert again["calls"] == uncut["calls"]
    # Before and after the resume: the first session up to its checkpoint at step 2.
    assert [s["from_step"] for s in again["sessions"]] == [0, 2]
    assert sum(s["calls"] for s in again["sessions"]) == again["calls"]
    assert 0 < again["sessions"][0]["calls"] < again["calls"]
    # The resumed table has the calls row, of the whole run
    assert f"{uncut['calls']}, whole run (" in resumed.stdout


LOOSE = HERE / "loose" / "bazaar.py"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("engine", ["round", "async_event"])
def test_a_world_file_outside_any_package_resumes_to_the_uncut_run(
        tmp_path: Path, engine: str) -> None:
    """The issue's loose world file: the resumed run must not execute it twice (which made
    every turn fail with "returned Deed, not a Deed") and must end where an uncut run ends."""
    assert not (LOOSE.parent / "__init__.py").exists()
    config = tmp_path / "bazaar.yaml"
    config.write_text(f"""
name: bazaar-{engine}
seed: 11
sim:
  steps: 6
  agents: 7
  world:
    factory: {LOOSE}:build
  engine:
    step:
      built_in: {engine}
run:
  checkpoint_every: 2
""", encoding="utf-8")
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    done = _simulacra("run", str(config), "--out", str(whole), "--no-progress")
    assert done.returncode == 0, done.stderr
    crashed = _simulacra("run", str(config), "sim.world.crash_at=3", "--out", str(cut),
                         "--no-progress")
    assert crashed.returncode == 9, crashed.stderr
    (cut / "config.yaml").write_text(
        (cut / "config.yaml").read_text().replace("crash_at: 3", "crash_at: null"))
    resumed = _simulacra("run", "--resume", str(cut), "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    assert "turn_failed" not in (cut / "action_events.jsonl").read_text()
    assert (cut / "digest.txt").read_text() == (whole / "digest.txt").read_text()
    assert (cut / "action_events.jsonl").read_bytes() == \
        (whole / "action_events.jsonl").read_bytes()


def _crashed_at_five(tmp_path: Path) -> tuple[Path, Path]:
    """An uncut run and a run killed after step 5, with checkpoints at steps 2 and 4."""
    config = _config(tmp_path, "round")
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert _simulacra("run", str(config), "--out", str(whole), "--no-progress").returncode == 0
    assert _simulacra("run", str(config), "sim.world.crash_at=5", "--out", str(cut),
                      "--no-progress").returncode == 9
    (cut / "config.yaml").write_text(
        (cut / "config.yaml").read_text().replace("crash_at: 5", "crash_at: null"))
    assert sorted(p.name for p in (cut / "checkpoints").glob("*.ckpt")) == [
        "checkpoint-000000.ckpt", "checkpoint-000002.ckpt", "checkpoint-000004.ckpt"]
    return whole, cut


@pytest.mark.timeout(300)
def test_resume_refuses_missing_or_short_recordings_unless_told_to_re_record(
        tmp_path: Path) -> None:
    import sqlite3

    _, cut = _crashed_at_five(tmp_path)
    recordings = cut / "llm_recordings.sqlite"
    kept = recordings.read_bytes()
    recordings.unlink()
    before = {p.name: p.read_bytes() for p in cut.iterdir() if p.is_file()}
    refused = _simulacra("run", "--resume", str(cut), "--no-progress")
    assert refused.returncode == 2  # missing input, as a missing run directory is
    assert "llm_recordings.sqlite is missing" in refused.stderr
    assert "--re-record" in refused.stderr
    assert {p.name: p.read_bytes() for p in cut.iterdir() if p.is_file()} == before

    recordings.write_bytes(kept)
    with sqlite3.connect(recordings) as db:  # lose one agent's calls
        db.execute("DELETE FROM completions WHERE agent = (SELECT MIN(agent) FROM completions)")
    short = _simulacra("run", "--resume", str(cut), "--no-progress")
    assert short.returncode == 2
    assert "does not match the checkpoint of step 4" in short.stderr

    forced = _simulacra("run", "--resume", str(cut), "--re-record", "--no-progress")
    assert forced.returncode == 0, forced.stderr
    assert (cut / "digest.txt").is_file()


@pytest.mark.timeout(300)
def test_a_damaged_newest_checkpoint_names_the_newest_valid_one(tmp_path: Path) -> None:
    whole, cut = _crashed_at_five(tmp_path)
    newest = cut / "checkpoints" / "checkpoint-000004.ckpt"
    data = bytearray(newest.read_bytes())
    data[-3] ^= 0x55
    newest.write_bytes(bytes(data))

    refused = _simulacra("run", "--resume", str(cut), "--no-progress")
    assert refused.returncode == 2  # damaged input
    assert "corrupted or truncated checkpoint" in refused.stderr
    assert f"--resume {cut} --from-checkpoint 2" in refused.stderr

    resumed = _simulacra("run", "--resume", str(cut), "--from-checkpoint", "2", "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    assert (cut / "digest.txt").read_text() == (whole / "digest.txt").read_text()
    assert (cut / "action_events.jsonl").read_bytes() == \
        (whole / "action_events.jsonl").read_bytes()
    assert (cut / "checkpoints" / "superseded" / "checkpoint-000004.ckpt").is_file()
    assert _simulacra("run", "--resume", str(cut), "--from-checkpoint", "3").returncode != 0


@pytest.mark.timeout(300)
@pytest.mark.parametrize("checkpoint", [0, 2, 4])
def test_idle_agents_are_not_copied_into_checkpoints_and_resume_all_the_same(
        tmp_path: Path, checkpoint: int) -> None:
    """At participation 0.25 a checkpoint holds only the agents that have taken a turn (the
    first one none at all: the factory's state); resumed from any, the uncut run's logs."""
    from simulacra.societies import run_society
    from simulacra.societies._checkpoint import read_checkpoint

    config = {"name": "sparse", "seed": 8,
              "sim": {"steps": 6, "agents": 40,
                      "world": {"factory": f"{HERE / '_crashing.py'}:build", "follows": 3},
                      "engine": {"participation": 0.25, "mode": "threads", "concurrency": 4}},
              "run": {"checkpoint_every": 2}}
    whole = run_society(config, out=tmp_path / "whole")
    files = sorted((tmp_path / "whole" / "checkpoints").iterdir())
    assert [p.name for p in files] == [f"checkpoint-{s:06d}.ckpt" for s in (0, 2, 4)]
    states = [read_checkpoint(p, "round") for p in files]
    assert states[0]["engine"] == {"scheme": "simulacra.societies.as_built.v1"}
    assert states[0]["llm_position"] == {}
    acted = [set(s["engine"]["agents"]) for s in states[1:]]
    assert 0 < len(acted[0]) < len(acted[1]) < 40  # only those that took a turn, growing
    assert acted[0] <= acted[1]
    assert set(states[2]["llm_position"]) == acted[1]

    cut = tmp_path / "cut"
    import shutil

    shutil.copytree(tmp_path / "whole", cut)
    for name in ("digest.txt", "summary.json"):
        (cut / name).unlink()
    resumed = resume_society(cut, from_checkpoint=checkpoint)
    assert resumed.digest == whole.digest
    assert ((cut / "action_events.jsonl").read_bytes()
            == (tmp_path / "whole" / "action_events.jsonl").read_bytes())
