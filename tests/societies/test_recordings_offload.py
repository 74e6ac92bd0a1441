"""A large run's recordings are written by a child process: the same run, the same files.

``run_society`` holds its recording store with ``offload=True`` when a step is
expected to make ``OFFLOAD_CALLS`` calls or more (``RecordingStore.hold``): the
run's thread then only lists each call, and a child process encodes and writes
them. Here the threshold is lowered so that small runs take that path, and each
is compared with the same run written in this process: digests, recordings (by
value) and the replay. Real processes and SQLite files throughout.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulacra.llm import RecordingStore
from simulacra.llm._record import _unpack
from simulacra.societies import RunDirectory, load_config, replay_run, resume_society, run_society
from simulacra.societies import _run as run_module

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "social" / "config.yaml"

pytestmark = pytest.mark.timeout(300)


def _recordings(run_dir: Path) -> dict[str, Any]:
    path = RunDirectory(run_dir).file("recordings")
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        blobs = {i: _unpack(codec, data) for i, codec, data in
                 db.execute("SELECT id, codec, data FROM blobs")}
        calls = {(bytes(k).hex(), a, n): (blobs[c], None if r is None else
                                         tuple(blobs[int(x)] for x in r.split()))
                 for k, a, n, c, r in db.execute(
                     "SELECT request_key, agent, n, completion, request FROM completions")}
    return calls


def _society(where: Path, overrides: list[str], *, offload: bool,
         monkeypatch: pytest.MonkeyPatch) -> Any:
    with monkeypatch.context() as patch:
        patch.setattr(run_module, "OFFLOAD_CALLS", 0 if offload else 10**12)
        patch.setattr(RecordingStore, "_PART", 7)  # steps go to the child in parts
        return run_society(load_config(CONFIG, overrides), out=where)


@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(overrides=st.tuples(
    st.integers(2, 40).map("sim.agents={}".format),
    st.integers(1, 4).map("sim.steps={}".format),
    st.sampled_from([1.0, 0.5, 0.2]).map("sim.engine.participation={}".format),
    st.sampled_from(["sequential", "threads", "asyncio"]).map("sim.engine.mode={}".format),
    st.integers(0, 3).map("seed={}".format)).map(list))
def test_an_offloaded_run_writes_what_a_run_in_one_process_writes(
        tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
        overrides: list[str]) -> None:
    where = tmp_path_factory.mktemp("offload")
    here = _society(where / "here", overrides, offload=False, monkeypatch=monkeypatch)
    child = _society(where / "child", overrides, offload=True, monkeypatch=monkeypatch)
    assert child.digest == here.digest
    assert child.llm["calls"] == here.llm["calls"]
    assert _recordings(where / "child") == _recordings(where / "here")
    assert replay_run(where / "child").digest == here.digest


def test_an_offloaded_run_stopped_mid_way_resumes_from_its_recordings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A world that crashes in step 3: steps 0-2's calls are in the file, and served."""
    overrides = ["sim.agents=30", "sim.steps=6", "run.checkpoint_every=2"]
    whole = _society(tmp_path / "whole", overrides, offload=False, monkeypatch=monkeypatch)
    calls: list[int] = []

    def crash(report: Any) -> None:
        calls.append(report.llm_calls)
        if report.step == 2:
            raise RuntimeError("the world fell over")

    with monkeypatch.context() as patch:
        patch.setattr(run_module, "OFFLOAD_CALLS", 0)
        patch.setattr(RecordingStore, "_PART", 7)
        with pytest.raises(RuntimeError, match="fell over"):
            run_society(load_config(CONFIG, overrides), out=tmp_path / "cut", on_step=crash)
        with RecordingStore(RunDirectory(tmp_path / "cut").file("recordings"),
                            readonly=True) as store:
            assert len(store) == sum(calls)  # every finished step's calls are written
        resumed = resume_society(tmp_path / "cut")
    assert resumed.digest == whole.digest
    # no call of a finished step is asked again: they are served from the recordings
    assert resumed.llm["recorded_this_session"] == whole.llm["calls"] - sum(calls)
