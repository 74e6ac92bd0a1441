"""The live view over HTTP (no browser): the token, the host, the port, bad run directories,
the missing extra, the replay slider's snapshots, and the controls, which never change a run.

A run paused and stepped through the page's HTTP controls writes the digest and the
``action_events.jsonl`` of the same run played straight (round engine and event-driven
engine); a stop from the page writes a checkpoint, exits 130, and ``simulacra run --resume``
ends with the uninterrupted run's digest.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import sys
from pathlib import Path

import httpx
import pytest

import simulacra
from simulacra._util import install_hint
from simulacra.cli import main

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from _live_helpers import CONFIG, ViewedRun, run_args, simulacra_cli  # noqa: E402

pytestmark = pytest.mark.timeout(300)


# -- the token, the host and the port ---------------------------------------------------


def test_every_route_needs_the_token(round_run: Path) -> None:
    with simulacra.LiveView(round_run, process=False) as view:
        base, token = view.url.split("/?token=")
        with httpx.Client(timeout=10) as client:
            for path in ("/", "/plotly.min.js", "/stream", "/api/snapshot", "/no/such/route"):
                for params in ({}, {"token": "wrong"}, {"token": token[:-1]}):
                    response = client.get(base + path, params=params)
                    assert response.status_code == 403, (path, params)
                    assert "token" in response.text
            for params in ({}, {"token": "x" * len(token)}):
                response = client.post(f"{base}/api/control/stop", params=params)
                assert response.status_code == 403
            ok = {"token": token}
            page = client.get(base + "/", params=ok)
            assert page.status_code == 200
            assert "plotly.min.js?token=" in page.text
            assert "https://" not in page.text  # nothing external
            assert "http://" not in page.text
            script = client.get(base + "/plotly.min.js", params=ok)
            assert script.status_code == 200
            assert "plotly" in script.text[:2000].lower()
            assert client.get(base + "/no/such/route", params=ok).status_code == 404
            # A finished run has nothing to control.
            assert client.post(f"{base}/api/control/stop", params=ok).status_code == 409
            assert client.post(f"{base}/api/control/jump", params=ok).status_code == 404


def test_the_view_listens_on_127_0_0_1_on_a_free_port_with_a_random_token(
        round_run: Path) -> None:
    with simulacra.LiveView(round_run, process=False) as one, \
            simulacra.LiveView(round_run, process=False) as two:
        assert one.url.startswith("http://127.0.0.1:")
        assert one.url != two.url
        assert one.token != two.token
        assert len(one.token) >= 20


def test_a_remote_host_needs_allow_remote(round_run: Path) -> None:
    with pytest.raises(simulacra.ConfigError, match="--allow-remote"):
        simulacra.LiveView(round_run, host="0.0.0.0")  # noqa: S104
    done = simulacra_cli("view", str(round_run), "--host", "0.0.0.0")  # noqa: S104
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "--allow-remote" in done.stderr
    with simulacra.LiveView(round_run, host="0.0.0.0", allow_remote=True,  # noqa: S104
                            process=False) as view:
        port = int(view.url.split(":")[2].split("/")[0])
        with httpx.Client(timeout=10) as client:
            response = client.get(f"http://127.0.0.1:{port}/api/snapshot",
                                  params={"token": view.token})
            assert response.status_code == 200


def test_a_port_in_use_is_replaced_by_a_free_one_and_said_so(round_run: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with simulacra.LiveView(round_run, port=port, process=False) as view:
            assert view.note is not None
            assert f"port {port} is in use" in view.note
            assert f":{port}/" not in view.url
            with httpx.Client(timeout=10) as client:
                assert client.get(view.url).status_code == 200


def test_a_free_port_asked_for_is_used(round_run: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with simulacra.LiveView(round_run, port=port, process=False) as view:
        assert view.note is None
        assert view.url.startswith(f"http://127.0.0.1:{port}/?token=")


# -- bad input --------------------------------------------------------------------------


def _one_error_line(args: list[str], *expected: str) -> None:
    done = simulacra_cli(*args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ")
    assert done.stderr.count("\n") == 1, done.stderr
    for text in expected:
        assert text in done.stderr


def test_a_directory_that_is_not_a_run_directory_is_one_line_naming_what_is_missing(
        tmp_path: Path, round_run: Path) -> None:
    _one_error_line(["view", str(tmp_path / "nothing")], "does not exist")
    (tmp_path / "file.txt").write_text("x")
    _one_error_line(["view", str(tmp_path / "file.txt")], "is a file")
    (tmp_path / "empty").mkdir()
    _one_error_line(["view", str(tmp_path / "empty")], "no manifest.json")
    partial = tmp_path / "partial"
    shutil.copytree(round_run, partial)
    (partial / "telemetry.jsonl").unlink()
    _one_error_line(["view", str(partial)], "no telemetry.jsonl")


def test_a_run_directory_of_an_unknown_version_is_refused(tmp_path: Path,
                                                          round_run: Path) -> None:
    future = tmp_path / "future"
    shutil.copytree(round_run, future)
    manifest = json.loads((future / "manifest.json").read_text())
    manifest["scheme"] = "simulacra.manifest.v99"
    (future / "manifest.json").write_text(json.dumps(manifest))
    _one_error_line(["view", str(future)], "unknown format version", "v99",
                    "simulacra.manifest.v1")
    (future / "manifest.json").write_text("{not json")
    _one_error_line(["view", str(future)], "manifest.json")


@pytest.mark.parametrize("module", ["sse_starlette", "uvicorn", "plotly"])
def test_without_the_view_extra_both_commands_say_so_before_any_work(
        tmp_path: Path, round_run: Path, module: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # find_spec: not installed
    out = tmp_path / "never"
    assert main(["run", str(CONFIG), "--view", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert install_hint("view") in err
    assert not out.exists()  # nothing was written
    assert main(["view", str(round_run)]) == 2
    assert install_hint("view") in capsys.readouterr().err


def test_view_options_without_view_and_view_of_a_model_function_are_usage_errors() -> None:
    _one_error_line(["run", str(CONFIG), "--paused"], "--paused goes with --view")
    _one_error_line(["run", str(CONFIG), "--port", "8000"], "--port goes with --view")
    _one_error_line(["run", "examples/bank.py", "--view"], "run config")


# -- a finished run, replayed -----------------------------------------------------------


def test_the_replay_snapshots_follow_the_slider(round_run: Path) -> None:
    events = [json.loads(line) for line in
              (round_run / "action_events.jsonl").read_text().splitlines()]
    telemetry = [json.loads(line) for line in
                 (round_run / "telemetry.jsonl").read_text().splitlines()]
    with simulacra.LiveView(round_run, process=False) as view:
        base, token = view.url.split("/?token=")
        with httpx.Client(timeout=30) as client:
            def at(position: int) -> dict[str, object]:
                response = client.get(f"{base}/api/snapshot",
                                      params={"token": token, "pos": position})
                response.raise_for_status()
                return response.json()  # type: ignore[no-any-return]

            whole = client.get(f"{base}/api/snapshot", params={"token": token}).json()
            assert whole["mode"] == "replay"
            assert whole["state"] == "finished"
            assert whole["position"] == len(events)
            assert whole["totals"]["cost"] == pytest.approx(sum(t["cost"] for t in telemetry))
            start = at(0)
            assert start["events"] == []
            assert start["totals"]["steps"] == 0
            middle = at(len(events) // 2)
            newest = middle["events"][0]
            assert newest[0] == events[len(events) // 2 - 1]["i"]
            step = events[len(events) // 2 - 1]["step"]
            assert middle["step"] == step
            assert middle["totals"]["steps"] == step + 1
            assert middle["totals"]["calls"] == sum(t["llm_calls"] for t in telemetry[:step + 1])
            assert set(middle["charts"]) >= {"actions", "calls", "tokens", "cost", "failures"}
            ends = middle["boundaries"]
            assert ends[-1] == len(events)
            assert len(ends) == len({e["step"] for e in events})
            assert at(10**9)["position"] == len(events)  # clamped
            bad = client.get(f"{base}/api/snapshot", params={"token": token, "pos": "x"})
            assert bad.status_code == 400


# -- the controls never change the run --------------------------------------------------


def _straight(tmp_path: Path, engine: str, agents: int, steps: int) -> Path:
    out = tmp_path / "straight"
    done = simulacra_cli(*run_args(out, engine, agents, steps))
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.determinism
@pytest.mark.slow
@pytest.mark.parametrize("engine", ["round", "async_event"])
def test_a_run_stepped_through_the_pages_controls_is_the_run_played_straight(
        tmp_path: Path, engine: str) -> None:
    straight = _straight(tmp_path, engine, 10, 8)
    out = tmp_path / "viewed"
    run = ViewedRun(run_args(out, engine, 10, 8, "--view", "--paused"))
    try:
        assert "paused before step 0" in run.first_lines[-1]
        first = run.paused_at(0)
        assert first["mode"] == "live"
        assert first["totals"]["steps"] == 0
        for step in (1, 2, 3):
            run.control("step")
            snapshot = run.paused_at(step)
            assert snapshot["totals"]["steps"] == step  # exactly one step each time
            assert len((out / "telemetry.jsonl").read_text().splitlines()) == step
        run.control("play")
        run.control("pause")
        at = run.wait_for(lambda s: s["paused_at"] is not None or s["state"] == "ending",
                          "a pause or the end")
        run.control("play")
        code, _, err = run.finish()
    finally:
        run.kill()
    assert code == 0, err
    assert at["totals"]["steps"] >= 3
    assert (out / "digest.txt").read_text() == (straight / "digest.txt").read_text()
    assert (out / "action_events.jsonl").read_bytes() == \
        (straight / "action_events.jsonl").read_bytes()


@pytest.mark.determinism
@pytest.mark.slow
@pytest.mark.parametrize("engine", ["round", "async_event"])
def test_stop_from_the_page_writes_a_checkpoint_and_resume_finishes_the_run(
        tmp_path: Path, engine: str) -> None:
    straight = _straight(tmp_path, engine, 10, 6)
    out = tmp_path / "stopped"
    run = ViewedRun(run_args(out, engine, 10, 6, "--view", "--paused"))
    try:
        run.paused_at(0)
        run.control("step")
        run.control("step")
        run.paused_at(2)
        run.control("stop")
        code, _, err = run.finish()
    finally:
        run.kill()
    assert code == 130, err
    assert "stop from the live view" in err
    assert f"simulacra run --resume {out}" in err
    assert "Traceback" not in err
    assert (out / "checkpoints" / "checkpoint-000002.ckpt").is_file()
    assert not (out / "digest.txt").exists()
    resumed = ViewedRun(["run", "--resume", str(out), "--no-progress", "--view"])
    try:
        code, _, err = resumed.finish()
    finally:
        resumed.kill()
    assert code == 0, err
    assert (out / "digest.txt").read_text() == (straight / "digest.txt").read_text()
    assert (out / "action_events.jsonl").read_bytes() == \
        (straight / "action_events.jsonl").read_bytes()


@pytest.mark.slow
def test_ctrl_c_while_paused_stops_the_run_resumable(tmp_path: Path) -> None:
    out = tmp_path / "cut"
    run = ViewedRun(run_args(out, "round", 8, 4, "--view", "--paused"))
    try:
        run.paused_at(0)
        run.control("step")
        run.paused_at(1)
        run.process.send_signal(signal.SIGINT)
        code, _, err = run.finish()
    finally:
        run.kill()
    assert code == 130, err
    assert "SIGINT" in err
    assert f"simulacra run --resume {out}" in err
    assert (out / "checkpoints" / "checkpoint-000001.ckpt").is_file()
    done = simulacra_cli("run", "--resume", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_the_page_gets_the_runs_last_state_and_the_view_ends_with_the_run(
        tmp_path: Path) -> None:
    out = tmp_path / "run"
    run = ViewedRun(run_args(out, "round", 6, 3, "--view", "--paused"))
    try:
        run.paused_at(0)
        with run.client.stream("GET", f"{run.base}/stream",
                               params={"token": run.token}) as stream:
            run.control("play")
            messages = [line for line in stream.iter_lines() if line.startswith("data:")]
        code, out_text, err = run.finish()
    finally:
        run.kill()
    assert code == 0, err
    last = json.loads(messages[-2][len("data:"):])  # the final snapshot, then "end"
    assert last["state"] == "ended"
    assert last["message"].startswith("finished: digest ")
    assert last["totals"]["steps"] == 3
    assert "charts" in last
    assert (out / "digest.txt").read_text().strip() in out_text


# -- calls.jsonl: followed as it grows ---------------------------------------------------


def test_the_view_follows_calls_jsonl_as_it_grows_and_draws_its_latency(
        round_run: Path, tmp_path: Path) -> None:
    from simulacra.report._live import _Hub, _NoLink

    run = tmp_path / "run"
    shutil.copytree(round_run, run)
    calls = (round_run / "calls.jsonl").read_bytes().splitlines(keepends=True)
    assert len(calls) > 8
    half = len(calls) // 2
    (run / "calls.jsonl").write_bytes(b"".join(calls[:half]) + calls[half][:20])  # a line cut
    hub = _Hub(run, _NoLink(run), name="run", steps=None, replay=True)
    hub.refresh(force=True)
    files = hub.files
    assert files.calls.lines == half  # whole lines only
    assert files._at["calls"] == len(b"".join(calls[:half]))
    with (run / "calls.jsonl").open("ab") as stream:  # the rest of the line, and the others
        stream.write(calls[half][20:] + b"".join(calls[half + 1:]))
    hub.refresh(force=True)
    assert files.calls.lines == len(calls)  # each line once: read from where it stopped
    assert files._at["calls"] == (run / "calls.jsonl").stat().st_size

    lines = [json.loads(line) for line in calls]
    charts = hub.snapshot(charts=True)["charts"]
    assert list(charts).index("latency_hist") < list(charts).index("latency_pct")
    assert f"{sum(1 for c in lines if c['ok']):,} calls" in \
        charts["latency_hist"]["layout"]["title"]["text"]
    # The slider: the calls up to its step.
    events = [json.loads(line) for line in (run / "action_events.jsonl").read_text().splitlines()]
    first_step = sum(1 for e in events if e["step"] == 0)
    at = hub.at(first_step)
    shown = sum(at["charts"]["latency_hist"]["data"][0]["y"])
    assert shown == sum(1 for c in lines if c["ok"] and c["step"] == 0) > 0
    assert at["charts"]["latency_pct"]["data"][0]["x"] == [0]
    assert "latency_hist" not in hub.at(0)["charts"]  # no call yet
