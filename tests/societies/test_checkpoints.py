"""Checkpoints: run to the middle, save, resume in a new process, end where an uncut run ends."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from simulacra import CheckpointError, SeedTree
from simulacra.llm import LatencyModel, ScriptedModel
from simulacra.societies import EventEngine
from simulacra.societies._checkpoint import (
    checkpoint_files,
    read_checkpoint,
    write_checkpoint,
)

ROOT = Path(__file__).resolve().parents[2]
SOCIAL = ROOT / "examples" / "social"
if str(SOCIAL) not in sys.path:
    sys.path.insert(0, str(SOCIAL))

import model as social  # noqa: E402

LATENCY = LatencyModel(base=0.2, noise_sigma=0.3, min_duration=0.1)


def engine(mode: str = "threads") -> EventEngine:
    world, people = social.build(agents=20, seed=SeedTree(5), llm={})
    return EventEngine(world, people, model=ScriptedModel(seed=5), latency=LATENCY, seed=5,
                       mode=mode, concurrency=8)


RESUME = """
import sys
sys.path[:0] = [{src!r}, {social!r}, {tests!r}]
from test_checkpoints import engine
from simulacra.societies._checkpoint import read_checkpoint
e = engine("asyncio")
e.restore(read_checkpoint({path!r}, "events"))
print(e.run(until=8.0).digest)
"""


@pytest.mark.timeout(120)
def test_resume_in_a_new_process_ends_where_an_uncut_run_ends(tmp_path: Path) -> None:
    whole = engine().run(until=8.0)

    first = engine()
    first.run(until=3.0)
    path = write_checkpoint(tmp_path, 1, "events", first.state())
    script = RESUME.format(src=str(ROOT / "src"), social=str(SOCIAL),
                           tests=str(Path(__file__).resolve().parent), path=str(path))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=110, check=False, env={**os.environ, "PYTHONPATH": ""})

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == whole.digest
    assert whole.turns > 40


def test_cuts_at_every_time_unit_with_a_turn_limit_equal_one_run() -> None:
    whole = engine().run(max_turns=3)
    cut = engine()
    for t in range(1, 40):
        result = cut.run(max_turns=3, until=float(t))
        restored = engine()
        restored.restore(cut.state())
        cut = restored
    result = cut.run(max_turns=3)

    assert result.digest == whole.digest


def test_no_checkpoint_is_overwritten(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, 1, "events", {"x": 1})
    with pytest.raises(CheckpointError, match="exists already; checkpoints are never overwritten"):
        write_checkpoint(tmp_path, 1, "events", {"x": 2})
    assert read_checkpoint(tmp_path / "checkpoint-000001.ckpt") == {"x": 1}
    assert [p.name for p in checkpoint_files(tmp_path)] == ["checkpoint-000001.ckpt"]


def _saved(tmp_path: Path) -> Path:
    e = engine("sequential")
    e.run(until=2.0)
    return write_checkpoint(tmp_path, 7, "events", e.state())


def test_a_truncated_checkpoint_is_refused(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])

    with pytest.raises(CheckpointError, match=r"corrupted or truncated checkpoint"):
        read_checkpoint(path, "events")
    path.write_bytes(data[:30])
    with pytest.raises(CheckpointError, match=r"truncated checkpoint \(its header"):
        read_checkpoint(path, "events")


def test_a_corrupted_checkpoint_is_refused(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))

    with pytest.raises(CheckpointError, match=str(path).replace(".", r"\.")):
        read_checkpoint(path, "events")


def test_an_unknown_format_version_is_refused(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    path.write_bytes(path.read_bytes().replace(b"CHECKPOINT 1", b"CHECKPOINT 9", 1))

    with pytest.raises(CheckpointError, match="format version '9'; this simulacra reads version 1"):
        read_checkpoint(path, "events")


def test_other_engines_and_other_files_are_refused(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    with pytest.raises(CheckpointError, match="checkpoint of the 'events' engine, not of 'round'"):
        read_checkpoint(path, "round")
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    with pytest.raises(CheckpointError, match="not a simulacra checkpoint"):
        read_checkpoint(other)
    with pytest.raises(CheckpointError, match="cannot read the checkpoint"):
        read_checkpoint(tmp_path / "missing.ckpt")
    with pytest.raises(CheckpointError, match="not a state of the event-driven engine"):
        engine().restore({"scheme": "other"})


def test_a_state_of_other_agents_is_refused() -> None:
    world, people = social.build(agents=3, seed=SeedTree(5), llm={})
    small = EventEngine(world, people, latency=LATENCY)
    with pytest.raises(CheckpointError, match="3 saved, 20 here"):
        engine().restore(small.state())


def test_state_is_plain_enough_to_compare(tmp_path: Any) -> None:
    a, b = engine("sequential"), engine("threads")
    a.run(until=4.0)
    b.run(until=4.0)
    assert a.state()["digest"] == b.state()["digest"]
    assert sorted(a.state()["queue"]) == sorted(b.state()["queue"])  # heaps: same entries
