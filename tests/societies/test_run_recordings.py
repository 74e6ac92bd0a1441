"""Society runs and their recordings: replays match, old recordings replay, and run sizes."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from pathlib import Path

import pytest

from simulacra.llm import RecordingStore
from simulacra.societies import RunDirectory, load_config, replay_run, run_society

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "social" / "config.yaml"

pytestmark = pytest.mark.timeout(180)

#: The v1 layout (simulacra.llm.recordings.v1), as the store of commit a003d8d wrote it.
V1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE completions (request_key TEXT NOT NULL, agent TEXT NOT NULL, n INTEGER NOT NULL,
    completion TEXT NOT NULL, PRIMARY KEY (request_key, agent, n)) WITHOUT ROWID;
CREATE INDEX completions_by_site ON completions (agent, n);
CREATE TABLE requests (request_key TEXT PRIMARY KEY, request TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE failures (request_key TEXT NOT NULL, agent TEXT NOT NULL, n INTEGER NOT NULL,
    error TEXT NOT NULL, message TEXT NOT NULL, PRIMARY KEY (request_key, agent, n))
    WITHOUT ROWID;
INSERT INTO meta VALUES ('format', 'simulacra.llm.recordings.v1');
"""


def _as_v1(recordings: Path) -> None:
    """Rewrite a run's recordings in the v1 layout, in place."""
    with RecordingStore(recordings, readonly=True) as store:
        calls = [(key, site, store.get(key, site), store.request(key)) for key, site in store]
    recordings.unlink()
    with contextlib.closing(sqlite3.connect(recordings)) as db, db:
        db.executescript(V1_SCHEMA)
        for key, site, completion, request in calls:
            assert completion is not None
            assert request is not None
            db.execute("INSERT INTO completions VALUES (?, ?, ?, ?)",
                       (key, "" if site is None else site.agent, -1 if site is None else site.n,
                        completion.to_json()))
            db.execute("INSERT OR IGNORE INTO requests VALUES (?, ?)",
                       (key, request.canonical().decode("utf-8")))


def test_a_recorded_run_replays_exactly_and_is_small(tmp_path: Path) -> None:
    config = load_config(CONFIG, ["sim.agents=30", "sim.steps=4"])
    run = run_society(config, out=tmp_path / "run")
    rundir = RunDirectory(tmp_path / "run")
    recordings = rundir.file("recordings")
    assert run.llm["calls"] == 120
    with RecordingStore(recordings, readonly=True) as store:
        assert len(store) == 120
    assert recordings.stat().st_size / 120 < 2000  # v1: about 4.6 KB a call
    report = replay_run(tmp_path / "run")
    assert report.matches, report
    assert report.calls_served == 120
    assert report.model_calls == 0
    # the replay wrote nothing into the recordings
    with RecordingStore(recordings, readonly=True) as store:
        assert len(store) == 120


def test_a_run_recorded_in_the_v1_layout_still_replays(tmp_path: Path) -> None:
    config = load_config(CONFIG, ["sim.agents=20", "sim.steps=3"])
    run = run_society(config, out=tmp_path / "run")
    recordings = tmp_path / "run" / "llm_recordings.sqlite"
    _as_v1(recordings)
    before = recordings.read_bytes()
    report = replay_run(tmp_path / "run")
    assert report.matches, report
    assert report.digest == run.digest
    assert report.calls_served == 60
    assert report.model_calls == 0
    assert recordings.read_bytes() == before  # read through a copy: the old file is kept


def test_size_bytes_counts_every_file_of_the_run_directory(tmp_path: Path) -> None:
    config = load_config(CONFIG, ["sim.agents=10", "sim.steps=3", "run.checkpoint_every=1"])
    run_society(config, out=tmp_path / "run")
    rundir = RunDirectory(tmp_path / "run")
    files = [p for p in rundir.path.rglob("*") if p.is_file()]
    assert any(p.parent.name == "checkpoints" for p in files)
    assert rundir.size_bytes() == sum(p.stat().st_size for p in files)
    summary = json.loads(rundir.file("summary").read_text())
    assert summary["steps"] == 3
    # grows with what is added; a link is not followed
    (rundir.path / "notes.txt").write_bytes(b"x" * 1000)
    before = rundir.size_bytes()
    target = tmp_path / "elsewhere.bin"
    target.write_bytes(b"y" * 5000)
    os.symlink(target, rundir.path / "link.bin")
    assert rundir.size_bytes() == before
    assert RunDirectory(tmp_path / "missing").size_bytes() == 0


def test_size_bytes_of_a_run_directory_still_being_written(tmp_path: Path) -> None:
    seen: list[int] = []
    rundir = RunDirectory(tmp_path / "run")
    config = load_config(CONFIG, ["sim.agents=10", "sim.steps=2"])
    run_society(config, out=rundir.path, on_step=lambda report: seen.append(rundir.size_bytes()))
    assert len(seen) == 2
    assert 0 < seen[0] <= seen[1]
    assert rundir.size_bytes() > 0


def test_a_damaged_recording_stops_the_replay_at_its_own_call(tmp_path: Path) -> None:
    """A completion whose stored bytes are damaged is named as such, at its call site.

    As a failed turn, the replay went on, the world diverged, and it stopped at a
    later agent's call blaming "the prompt or the request settings changed".
    """
    from simulacra.errors import AgentActionError

    config = load_config(CONFIG, ["sim.agents=20", "sim.steps=3",
                                  "sim.engine.mode=sequential"])
    run_society(config, out=tmp_path / "run")
    recordings = RunDirectory(tmp_path / "run").file("recordings")
    with contextlib.closing(sqlite3.connect(recordings)) as db, db:
        agent, n, blob = db.execute("SELECT agent, n, completion FROM completions "
                                    "WHERE n = 1 ORDER BY agent LIMIT 1").fetchone()
        db.execute("UPDATE blobs SET codec = 0, data = ? WHERE id = ?", (b'{"text', blob))
    with pytest.raises(AgentActionError) as info:
        replay_run(tmp_path / "run")
    message = str(info.value)
    assert f"agent {agent!r} failed in step {n}" in message
    assert f"damaged completion at site {agent}/{n}" in message
    assert "ReplayMiss" not in message


def test_a_config_changed_after_the_run_is_named_before_the_replay(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """manifest.json holds the config's SHA-256: an edited config.yaml is refused at once
    (a stranger's edit of steps: 3 -> 4 ran three steps, then blamed a missing recording)."""
    from simulacra.cli import main
    from simulacra.errors import ConfigError

    config = load_config(CONFIG, ["sim.agents=8", "sim.steps=3"])
    run_society(config, out=tmp_path / "run")
    replay_run(tmp_path / "run")  # as written: it replays
    stored = tmp_path / "run" / "config.yaml"
    text = stored.read_text(encoding="utf-8")
    assert "  steps: 3\n" in text
    stored.write_text(text.replace("  steps: 3\n", "  steps: 4\n"), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"config\.yaml: it was changed after the run"):
        replay_run(tmp_path / "run")
    capsys.readouterr()
    assert main(["replay", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "it was changed after the run" in err
