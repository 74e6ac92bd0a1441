"""What a newcomer types in the first hour gets one clear line, not a traceback or a guess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulacra import ConfigError
from simulacra._util import install_hint
from simulacra.cli import main

ROOT = Path(__file__).resolve().parents[2]
SOCIAL = ROOT / "examples" / "social"


def test_a_folder_with_a_config_suggests_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(SOCIAL)]) == 2
    assert f"simulacra run {SOCIAL / 'config.yaml'}" in capsys.readouterr().err


def test_a_text_file_is_not_run_as_python(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("import os; os._exit(7)\n")
    assert main(["run", str(notes)]) == 2
    assert "neither a Python file" in capsys.readouterr().err


def test_unknown_keys_get_the_closest_known_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(SOCIAL / "config.yaml"), "sim.engine.mod=x", "sim.stpes=3"]) == 2
    err = capsys.readouterr().err
    assert "did you mean sim.engine.mode?" in err
    assert "did you mean sim.steps?" in err


def test_a_wrong_world_type_is_a_config_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(SOCIAL / "config.yaml"), "sim.world.feed_size=abc",
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "sim.world.feed_size='abc'" in err
    assert "Traceback" not in err


def test_options_nobody_reads_are_refused(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(SOCIAL / "config.yaml"), "sim.engine.step.options.window=2",
                 "--no-progress"]) == 2
    assert "the round engine takes no step options" in capsys.readouterr().err
    assert main(["run", str(ROOT / "examples" / "bank.py"), "--out", str(tmp_path)]) == 2
    assert "--out is for run configs" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("lookahead=maybe", "sim.engine.step.options.lookahead must be true or false, got str "
                            "'maybe'"),
        ("window=-1", "sim.engine.step.options.window must be a finite number > 0, got -1"),
        ("lookahed=false", "sim.engine.step.options.lookahed is not an option of the "
                           "async_event engine"),
    ],
)
def test_event_engine_options_are_checked_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, message: str
) -> None:
    out = tmp_path / "run"
    assert main(["run", str(SOCIAL / "config.yaml"), "sim.engine.step.built_in=async_event",
                 f"sim.engine.step.options.{option}", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.timeout(120)
def test_ctrl_c_in_replay_is_one_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    # Long enough that the replay is still running when the signal comes a second in
    # (8,000 turns replayed in about a second once replays got faster; 24,000 now).
    assert main(["run", str(SOCIAL / "config.yaml"), "--out", str(run_dir), "sim.agents=400",
                 "sim.steps=60", "--no-progress"]) == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    process = subprocess.Popen([sys.executable, "-m", "simulacra", "replay", str(run_dir),
                                "--no-progress"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
    time.sleep(1.0)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("interrupted")


def test_experiment_checks_for_polars_before_any_replication(tmp_path: Path) -> None:
    """The plain install has no polars: the study stops at once, naming the extra."""
    study = tmp_path / "study.toml"
    study.write_text(f'model = "{ROOT / "examples" / "bank.py"}:run"\nreplications = 2\n'
                     f'master_seed = 1\noutput = "{tmp_path / "out"}"\n'
                     '[grid]\nservers = [2, 3]\n')
    code = ("import sys; sys.modules['polars'] = None  # as on the plain install\n"
            "from simulacra.cli import main\n"
            f"sys.exit(main(['experiment', {str(study)!r}]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 2, done.stderr
    assert install_hint("parallel") in done.stderr
    assert not (tmp_path / "out").exists()  # no replication ran


def test_one_vocabulary_for_backends() -> None:
    """The executors' and engines' words name the same backends; a near miss is suggested."""
    import simulacra
    from simulacra.backends import get_backend, parse_settings

    assert type(get_backend("threads")) is type(get_backend("threaded"))
    assert type(get_backend("sequential")) is type(get_backend("local"))
    assert parse_settings({"orchestration": {"mode": "threads"}}).mode == "threaded"
    with pytest.raises(simulacra.ConfigError, match="did you mean 'threaded'"):
        get_backend("thread_pool")


@pytest.mark.parametrize("example", ["sir", "contagion"])
def test_the_examples_take_the_shared_backend_names(example: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / example), "--backend",
                           "threads"], capture_output=True, text=True, timeout=240,
                          check=False, env=env)
    assert done.returncode == 0, done.stderr


def test_experiment_example_runs_as_printed(capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    assert main(["experiment", "--example"]) == 0
    study = tmp_path / "elsewhere" / "study.toml"  # not the repository root: runs anywhere
    study.parent.mkdir()
    study.write_text(capsys.readouterr().out)
    assert main(["experiment", str(study), "--output", str(tmp_path / "out"),
                 "--replications", "2", "--backend", "sequential", "--no-progress"]) == 0
    assert (tmp_path / "out" / "summary.csv").is_file()
    assert main(["experiment"]) == 2
    assert "--example" in capsys.readouterr().err


def test_broken_yaml_is_one_line_with_its_position(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("sim:\n  steps: [\n", encoding="utf-8")
    assert main(["run", str(config), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        f"error: {config}: not valid YAML: line 3, column 1: expected the node content, "
        "but found '<stream end>'"]


@pytest.mark.parametrize(("mode", "shown"), [("async", "asyncio"), ("local", "sequential"),
                                              ("threaded", "threads")])
def test_the_agent_backends_words_name_the_society_modes_too(
    mode: str, shown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", str(SOCIAL / "config.yaml"), f"sim.engine.mode={mode}", "sim.steps=1",
                 "sim.agents=5", "--no-progress"]) == 0
    assert f"5 agents, 1 step, 5 events (round engine, {shown}, seed 0)" in capsys.readouterr().out


def test_the_agent_backends_words_name_the_study_backends_too(tmp_path: Path) -> None:
    from simulacra import Experiment

    study = Experiment.from_run(f"{ROOT / 'examples' / 'bank.py'}:run",
                                [{"customers": 50, "arrival_rate": 0.5}], master_seed=3)
    reference = study.run(2, "sequential")
    for alias, name in (("local", "sequential"), ("threaded", "threads")):
        results = study.run(2, alias, 1)
        assert results.backend == name
        assert [r.kpis for r in results] == [r.kpis for r in reference]
    with pytest.raises(ConfigError, match="did you mean 'threads'"):
        study.run(1, "threds")


def test_the_summary_says_how_much_the_run_directory_takes_on_disk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert main(["run", str(SOCIAL / "config.yaml"), "--out", str(out), "--no-progress"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(" on disk"))
    value, unit = line.split()[2:4]
    scale = {"B": 1, "KB": 1e3, "MB": 1e6}[unit]
    total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    assert abs(float(value) * scale - total) <= 0.01 * total + scale


def test_a_damaged_digest_file_is_named_not_blamed_on_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert main(["run", str(SOCIAL / "config.yaml"), "--out", str(run), "sim.steps=1",
                 "--no-progress"]) == 0
    capsys.readouterr()
    (run / "digest.txt").write_text("0000\n", encoding="utf-8")
    assert main(["replay", str(run), "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "first difference: digest.txt itself: it was changed after the run" in err[0]
    (run / "digest.txt").unlink()
    assert main(["replay", str(run), "--no-progress"]) == 2
    assert "has no digest.txt, but summary.json says the run finished" in (
        capsys.readouterr().err)
