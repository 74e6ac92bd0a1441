"""The first week's traps: one line and the right exit status, counts that agree."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from simulacra.cli import main

ROOT = Path(__file__).resolve().parents[2]
SOCIAL = ROOT / "examples" / "social"

pytestmark = pytest.mark.timeout(120)


def _simulacra(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "simulacra", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=100, check=False)


def test_openai_compatible_without_base_url_is_one_line(tmp_path: Path) -> None:
    done = _simulacra("run", str(SOCIAL / "config.yaml"), "sim.llm.provider=openai_compatible",
                      "--out", str(tmp_path / "run"), "--no-progress", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: sim.llm.base_url is required when sim.llm.provider is 'openai_compatible' "
        "(e.g. http://localhost:8000/v1)"]
    assert not (tmp_path / "run").exists()


def test_resume_of_a_missing_directory_says_so(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "runs" / "nonexist"
    assert main(["run", "--resume", str(missing), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        f"error: run directory not found: {str(missing)!r} (it does not exist); --resume "
        "takes the directory a run wrote"]
    assert main(["run", "--resume", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "is not a run directory: it has no config.yaml" in err
    assert "config file not found" not in err


@pytest.mark.parametrize("engine", ["round", "async_event"])
def test_a_stop_counts_steps_as_the_checkpoints_do(tmp_path: Path, engine: str) -> None:
    """"stopped after N of M steps" names the checkpoint written there: N steps done."""
    run_dir = tmp_path / "run"
    done = _simulacra("run", str(SOCIAL / "config.yaml"), "sim.steps=20", "sim.agents=5",
                      f"sim.engine.step.built_in={engine}", "run.budget.tokens=3000",
                      "run.checkpoint_every=1", "--out", str(run_dir), "--no-progress",
                      cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    found = re.search(r"stopped after (\d+) of 20 steps", done.stderr)
    assert found is not None, done.stderr
    steps = int(found.group(1))
    assert steps > 0
    newest = max(p.name for p in (run_dir / "checkpoints").glob("checkpoint-*.ckpt"))
    assert newest == f"checkpoint-{steps:06d}.ckpt"
    telemetry = (run_dir / "telemetry.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(telemetry) == steps


def test_a_study_whose_model_file_is_missing_names_the_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = tmp_path / "study.toml"
    study.write_text('model = "examples/bank.py:run"\nmaster_seed = 1\nreplications = 1\n')
    assert main(["experiment", str(study), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "model_fn" not in err
    assert err.strip().splitlines() == [
        f"error: {study}: model = 'examples/bank.py:run': no file "
        f"{str(tmp_path / 'examples' / 'bank.py')!r} (a path in the study is read relative "
        "to the study file's directory)"]


def test_a_signal_in_the_last_step_says_the_run_finished(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A Ctrl-C that lands in the last step lets it finish the run: exit 0 and one line
    saying so (a stranger saw "stopping after this step", then a normal end, no word more)."""
    from simulacra.cli._society import _society

    class Finished:
        digest = "d" * 64

    def call(control: object) -> Finished:
        control.request_stop("SIGINT")  # type: ignore[attr-defined]  # as the handler does
        return Finished()

    assert isinstance(_society(call, "unused"), Finished)
    err = capsys.readouterr().err
    assert err == ("SIGINT: it came during the last step, which finished the run "
                   "(nothing to resume)\n")


def test_the_summary_explains_calls_against_agent_steps(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On the event-driven engine a run makes more calls than it resolves turns: the calls of
    turns whose answer falls after the end. The summary says so, and the counts agree with
    calls.jsonl and action_events.jsonl; the round engine, one call a turn, has no such row."""
    import json

    config = str(ROOT / "examples" / "social" / "config.yaml")
    out = tmp_path / "event"
    assert main(["run", config, "sim.agents=10", "sim.steps=3", "--out", str(out),
                 "--no-progress", "sim.engine.step.built_in=async_event"]) == 0
    text = capsys.readouterr().out
    lines = (out / "calls.jsonl").read_text(encoding="utf-8").splitlines()
    calls = {(c["agent"], c["n"]) for c in map(json.loads, lines)}
    lines = (out / "action_events.jsonl").read_text(encoding="utf-8").splitlines()
    turns = {(e["agent"], e["turn"]) for e in map(json.loads, lines)}  # "step": the window
    assert turns < calls  # every resolved turn called; some calls resolved no turn
    row = next(line for line in text.splitlines() if "calls per agent-step" in line)
    assert f"{len(calls) / len(turns):.2f}: a turn called more than once" in row
    assert main(["run", config, "sim.agents=10", "sim.steps=3", "--out",
                 str(tmp_path / "round"), "--no-progress"]) == 0
    assert "calls per agent-step" not in capsys.readouterr().out


def test_resume_with_a_config_file_and_replay_of_a_missing_directory_say_what_is_wrong(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A stranger's `run CONFIG --resume DIR` was told the config path is not a run.*
    override; `replay runs/nope` said "not a run directory" where `report` says it does not
    exist."""
    config = str(ROOT / "examples" / "social" / "config.yaml")
    assert main(["run", config, "--resume", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "continues the run with the config stored in RUN_DIR: leave out" in err
    missing = tmp_path / "nope"
    assert main(["replay", str(missing), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {str(missing)!r} is not a run directory: it does not exist\n"
