"""Run directories written before societies moved onto the kernel replay to their digest.

``data/runs_v1`` holds two runs written by the code at 0202a26 (see its README). A run
directory of a format this release does not read is refused in one line that names it.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from simulacra.cli import main

DATA = Path(__file__).parent / "data" / "runs_v1"


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[Path]:
    copy = tmp_path / "runs_v1"
    shutil.copytree(DATA, copy)
    yield copy
    # Each test replays its own copy, whose world is the package `society` in it: the
    # loader refuses a second `society.model` from another place in one process (as it
    # should), so the copy's modules go when the test ends.
    for name in [name for name in sys.modules if name == "society" or
                 name.startswith("society.")]:
        del sys.modules[name]


@pytest.mark.parametrize("engine", ["round", "async_event", "event_scenario",
                                    "event_asyncio_reactive", "event_max_turns"])
def test_a_v1_run_directory_replays_to_its_digest(
        runs: Path, engine: str, capsys: pytest.CaptureFixture[str]) -> None:
    written = (runs / engine / "digest.txt").read_text().split()[0]
    assert main(["replay", str(runs / engine)]) == 0
    out = capsys.readouterr().out
    assert f"digest matches: {written}" in out
    assert ", 0 model calls" in out


def test_a_run_directory_of_an_unknown_format_is_refused_in_one_line(
        runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = runs / "round" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["scheme"] = "simulacra.manifest.v9"
    manifest.write_text(json.dumps(data))
    assert main(["replay", str(runs / "round")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    assert "run directory format 'simulacra.manifest.v9'" in err
    assert "'simulacra.manifest.v1'" in err


@pytest.mark.parametrize("engine", ["async_event", "event_max_turns"])
def test_a_v1_event_run_directory_resumes_as_it_was_made(
        runs: Path, engine: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Written before ActionEvent.turn, its events hold the agent's turn in "step": a resume
    stamps them the same way (its manifest says nothing of it) and ends on its digest."""
    run = runs / engine
    written = (run / "digest.txt").read_text().split()[0]
    (run / "digest.txt").unlink()  # as if it had stopped: resume it from its first checkpoint
    assert main(["run", "--resume", str(run), "--from-checkpoint", "0", "--no-progress"]) == 0
    assert (run / "digest.txt").read_text().split()[0] == written
    assert json.loads((run / "manifest.json").read_text())["event_step"] == "turn"
    assert all("turn" not in json.loads(line) for line in
               (run / "action_events.jsonl").read_text().splitlines())
