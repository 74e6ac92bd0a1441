"""Damaged input exits 2, as missing input does; a run that goes wrong exits 1.

The command line's convention is one line and exit 2 for what it was given (a config,
a run directory, a study directory) and exit 1 for a run that went wrong. A run
directory whose recordings or newest checkpoint were already garbage when the command
started is what it was given: a stranger got exit 1 there, and exit 2 for the same
directory with the file deleted. A recording store that fails while the run writes it
stays a failed run. Every case runs ``python -m simulacra`` in a subprocess.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from simulacra.societies import RUN_FILES

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "social" / "config.yaml"
RECORDINGS = RUN_FILES["recordings"]

pytestmark = pytest.mark.timeout(180)


def _simulacra(*args: str, cwd: Path,
               preexec_fn: Callable[[], None] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "simulacra", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=150, check=False,
                          preexec_fn=preexec_fn)


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: "), done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run stopped by its budget after 3 of 6 steps, with the checkpoints of steps 0-3."""
    where = tmp_path_factory.mktemp("stopped") / "run"
    done = _simulacra("run", str(CONFIG), "sim.agents=6", "sim.steps=6",
                      "run.checkpoint_every=1", "run.budget.tokens=3000", "--out", str(where),
                      "--no-progress", cwd=where.parent)
    assert done.returncode == 3, done.stderr
    names = sorted(p.name for p in (where / "checkpoints").glob("*.ckpt"))
    assert names == [f"checkpoint-{n:06d}.ckpt" for n in range(4)], names
    return where


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run of 6 agents x 3 steps."""
    where = tmp_path_factory.mktemp("finished") / "run"
    done = _simulacra("run", str(CONFIG), "sim.agents=6", "sim.steps=3", "--out", str(where),
                      "--no-progress", cwd=where.parent)
    assert done.returncode == 0, done.stderr
    return where


def _copy(run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    return copy


def _garbage(path: Path) -> None:
    path.write_bytes(bytes(range(256)) * 12)


def _truncated(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


DAMAGE = {"garbage": _garbage, "truncated": _truncated}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_resume_with_damaged_recordings_exits_2(stopped: Path, tmp_path: Path,
                                                damage: str) -> None:
    run = _copy(stopped, tmp_path)
    DAMAGE[damage](run / RECORDINGS)
    done = _simulacra("run", "--resume", str(run), "run.budget.tokens=100000", "--no-progress",
                      cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    line = _one_line(done)
    assert line.startswith(f"error: {run / RECORDINGS} is not a recording store: ")
    assert line.count(str(run / RECORDINGS)) == 1, line  # it was named twice
    assert "`--re-record` resumes anyway" in line
    assert not (run / "digest.txt").exists()


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_resume_with_a_damaged_newest_checkpoint_exits_2_naming_the_valid_one(
        stopped: Path, tmp_path: Path, damage: str) -> None:
    run = _copy(stopped, tmp_path)
    newest = run / "checkpoints" / "checkpoint-000003.ckpt"
    DAMAGE[damage](newest)
    done = _simulacra("run", "--resume", str(run), "run.budget.tokens=100000", "--no-progress",
                      cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    line = _one_line(done)
    assert line.startswith(f"error: {newest}: ")
    assert ("not a simulacra checkpoint" if damage == "garbage"
            else "corrupted or truncated checkpoint") in line
    assert (f"the newest valid checkpoint is that of step 2: `simulacra run --resume {run} "
            "--from-checkpoint 2` continues from it") in line
    # The line's own advice works.
    resumed = _simulacra("run", "--resume", str(run), "--from-checkpoint", "2",
                         "run.budget.tokens=100000", "--no-progress", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert (run / "digest.txt").is_file()


def test_resume_with_every_checkpoint_damaged_or_the_recordings_missing_exits_2(
        stopped: Path, tmp_path: Path) -> None:
    """Missing input was already exit 2 for a missing directory; so is a missing file in it."""
    run = _copy(stopped, tmp_path)
    for checkpoint in (run / "checkpoints").glob("*.ckpt"):
        _garbage(checkpoint)
    done = _simulacra("run", "--resume", str(run), "--no-progress", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "checkpoint-000003.ckpt: not a simulacra checkpoint" in _one_line(done)

    run = _copy(stopped, tmp_path / "again")
    (run / RECORDINGS).unlink()
    done = _simulacra("run", "--resume", str(run), "--no-progress", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    line = _one_line(done)
    assert f"{run / RECORDINGS} is missing" in line
    assert "--re-record" in line


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_replay_of_damaged_recordings_exits_2(finished: Path, tmp_path: Path,
                                              damage: str) -> None:
    run = _copy(finished, tmp_path)
    DAMAGE[damage](run / RECORDINGS)
    done = _simulacra("replay", str(run), "--no-progress", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    line = _one_line(done)
    assert line.startswith(f"error: {run / RECORDINGS} is not a recording store: ")
    assert line.count(str(run / RECORDINGS)) == 1, line
    assert "RecordingError" not in line  # bad input reads as the other usage errors do
    assert "replayed" not in done.stdout


@pytest.mark.parametrize("name", [RECORDINGS, RUN_FILES["summary"], RUN_FILES["events"],
                                  RUN_FILES["manifest"]])
def test_report_of_a_run_directory_with_a_garbage_file_exits_2(finished: Path, tmp_path: Path,
                                                                name: str) -> None:
    pytest.importorskip("plotly")
    run = _copy(finished, tmp_path)
    _garbage(run / name)
    done = _simulacra("report", str(run), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    line = _one_line(done)
    assert line.count(str(run / name)) == 1, line  # the recordings were named twice
    assert not (run / "report.html").exists()


@pytest.mark.parametrize("name", [RUN_FILES["telemetry"], RUN_FILES["events"],
                                  RUN_FILES["calls"]])
def test_report_of_a_run_file_of_one_garbage_line_exits_2(finished: Path, tmp_path: Path,
                                                          name: str) -> None:
    """One line of garbage without an end of line is damage, not a line cut by a kill."""
    pytest.importorskip("plotly")
    run = _copy(finished, tmp_path)
    (run / name).write_bytes(b"\x00garbage")
    done = _simulacra("report", str(run), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert _one_line(done) == f"error: {run / name}: line 1 is not JSON; the run's " + {
        RUN_FILES["telemetry"]: "telemetry", RUN_FILES["events"]: "event log",
        RUN_FILES["calls"]: "call log"}[name] + " is damaged"
    assert not (run / "report.html").exists()


def _file_size_limit(limit: int) -> Callable[[], None]:
    def apply() -> None:  # in the child, before exec: writes past *limit* bytes fail (EFBIG)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_a_recording_store_that_fails_during_the_resumed_run_exits_1(
        tmp_path: Path) -> None:
    """Not bad input: the store was sound when the command started, and failed as it wrote."""
    run = tmp_path / "run"
    done = _simulacra("run", str(CONFIG), "sim.agents=20", "sim.steps=8",
                      "run.checkpoint_every=1", "run.budget.tokens=6000", "--out", str(run),
                      "--no-progress", cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    largest = max(p.stat().st_size for p in run.rglob("*") if p.is_file())
    # Room for the files to grow a little: the store (the fastest to grow) fails first.
    done = _simulacra("run", "--resume", str(run), "run.budget.tokens=100000", "--no-progress",
                      cwd=tmp_path, preexec_fn=_file_size_limit(largest + 40_000))
    assert done.returncode == 1, done.stderr
    line = _one_line(done)
    assert line.startswith(f"error: RecordingError: recording store {run / RECORDINGS}: "
                           "the write failed")


def test_a_damaged_study_directory_exits_2(tmp_path: Path) -> None:
    """An output directory whose study.json is damaged, or that holds another study."""
    (tmp_path / "model.py").write_text(
        "def run(seed=0, x=1):\n    return {'y': (seed % 7) * x}\n", encoding="utf-8")
    study = tmp_path / "study.toml"
    study.write_text('model = "model.py:run"\nmaster_seed = 1\nreplications = 2\n'
                     'backend = "sequential"\noutput = "out"\n', encoding="utf-8")
    done = _simulacra("experiment", str(study), "--no-progress", cwd=tmp_path)
    assert done.returncode == 0, done.stderr

    other = tmp_path / "other.toml"
    other.write_text(study.read_text().replace("master_seed = 1", "master_seed = 2"),
                     encoding="utf-8")
    done = _simulacra("experiment", str(other), "--no-progress", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "holds a different study: its master_seed is 1" in _one_line(done)

    _garbage(tmp_path / "out" / "study.json")
    done = _simulacra("experiment", str(study), "--resume", "--no-progress", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"{str(tmp_path / 'out' / 'study.json')!r} cannot be read as a study" in _one_line(
        done)


@pytest.mark.parametrize("command", ["replay", "resume"])
def test_a_damaged_completion_found_in_the_middle_of_the_run_exits_2(
        finished: Path, stopped: Path, tmp_path: Path, command: str) -> None:
    """A completion whose stored bytes no longer read back, met at its own call in step 1:
    the file was damaged before the command started, whenever the command meets it."""
    import contextlib
    import sqlite3

    run = _copy(finished if command == "replay" else stopped, tmp_path)
    with contextlib.closing(sqlite3.connect(run / RECORDINGS)) as db, db:
        agent, n, blob = db.execute("SELECT agent, n, completion FROM completions "
                                    "WHERE n = 1 ORDER BY agent LIMIT 1").fetchone()
        db.execute("UPDATE blobs SET codec = 0, data = ? WHERE id = ?", (b'{"text', blob))
    args = (["replay", str(run)] if command == "replay"
            else ["run", "--resume", str(run), "--from-checkpoint", "0"])
    done = _simulacra(*args, "--no-progress", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    line = _one_line(done)
    assert f"damaged completion at site {agent}/{n}" in line
    assert str(run / RECORDINGS) in line
