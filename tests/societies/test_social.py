"""The social-network example: runs, run directories, replay, HTTP determinism and the CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import simulacra
from simulacra.cli import main
from simulacra.llm import CompletionRequest, ScriptedModel, ScriptedRule, ScriptedServer
from simulacra.societies import RunConfig, build_society, load_config, replay_run, run_society

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "social" / "config.yaml"
SRC = ROOT / "src"


def _config(*overrides: str) -> RunConfig:
    return load_config(CONFIG, list(overrides))


@pytest.mark.timeout(120)
def test_the_example_at_50_agents_x_5_steps_writes_a_run_and_replays(tmp_path: Path) -> None:
    config = _config()
    assert (config.sim.agents, config.sim.steps) == (50, 5)
    run = run_society(config, out=tmp_path / "run")
    summary = run.summary
    assert summary["agents"] == 50
    for key in ("posts", "replies", "likes", "mentions", "mention chains"):
        assert summary[key] > 0, key
    assert summary["failed turns"] == 0
    assert run.result.event_count == 250
    assert run.llm["calls"] == 250

    folder = tmp_path / "run"
    events = (folder / "action_events.jsonl").read_text().splitlines()
    assert len(events) == 250
    assert json.loads(events[0])["i"] == 0
    telemetry = [json.loads(line) for line in (folder / "telemetry.jsonl").read_text().splitlines()]
    assert [t["step"] for t in telemetry] == [0, 1, 2, 3, 4]
    assert telemetry[-1]["digest"] == run.result.step_digests[-1]
    assert (folder / "digest.txt").read_text().strip() == run.digest
    stored = json.loads((folder / "summary.json").read_text())
    assert stored["digest"] == run.digest
    assert stored["summary"]["posts"] == summary["posts"]
    with simulacra.RecordingStore(folder / "llm_recordings.sqlite", readonly=True) as store:
        assert len(store) == 250

    report = replay_run(folder)
    assert report.matches
    assert report.calls_served == 250
    assert report.model_calls == 0
    # Replaying with another mode gives the same digest.
    assert replay_run(folder, overrides=("sim.engine.mode=asyncio",)).matches


@pytest.mark.determinism
@pytest.mark.timeout(120)
def test_same_digest_in_every_mode_with_http_replies_in_random_order(tmp_path: Path) -> None:
    reference = run_society(_config("sim.agents=16", "sim.steps=3", "sim.engine.mode=sequential"))
    with ScriptedServer(seed=0, latency=(0.0, 0.03), latency_seed=11) as server:
        digests = {}
        peaks = {}
        for mode in ("sequential", "threads", "asyncio"):
            before = server.peak_in_flight
            run = run_society(_config(
                "sim.agents=16", "sim.steps=3", f"sim.engine.mode={mode}",
                "sim.engine.concurrency=8", "sim.llm.provider=openai_compatible",
                f"sim.llm.base_url={server.base_url}", "sim.llm.concurrency=8",
            ), out=tmp_path / mode)
            digests[mode] = run.digest
            peaks[mode] = max(before, server.peak_in_flight)
        assert server.calls == 3 * 48
    assert digests == dict.fromkeys(digests, reference.digest)
    assert peaks["threads"] > 1  # calls overlapped, so replies came back out of order
    # The server is gone: a replay that called a model would fail.
    for mode in ("sequential", "threads", "asyncio"):
        report = replay_run(tmp_path / mode, overrides=("sim.engine.mode=threads",))
        assert report.matches
        assert report.calls_served == 48


def test_the_event_log_rebuilds_the_world(tmp_path: Path) -> None:
    config = _config("sim.agents=20", "sim.steps=4")
    run = run_society(config, out=tmp_path / "run")
    fresh, _ = build_society(config)
    for event in simulacra.RunDirectory(tmp_path / "run").read_events():
        fresh.apply(event)
    assert fresh.state_digest() == run.world.state_digest()


def test_a_reply_that_is_not_json_fails_only_that_turn() -> None:
    def garbled(request: CompletionRequest) -> bool:
        return "You are @ada0." in request.prompt

    model = ScriptedModel(seed=0, rules=[ScriptedRule("garbled", garbled,
                                                      lambda request, rng: "sure! I'll post"),
                                         *simulacra.llm.social_rules()])
    run = run_society(_config("sim.agents=10", "sim.steps=3"), model=model)
    assert run.result.failed == 3
    assert run.summary["failed turns"] == 3
    assert run.summary["posts"] + run.summary["replies"] > 0


def test_fail_fast_from_config_stops_on_the_bad_reply() -> None:
    model = ScriptedModel(seed=0, rules=[("bad", lambda r: True, lambda r, rng: "{not json")])
    with pytest.raises(simulacra.AgentActionError, match=r"'[a-z]+\d' failed in step 0"):
        run_society(_config("sim.agents=5", "sim.steps=1", "sim.engine.fail_fast=true"),
                    model=model)


def test_a_replay_of_a_tampered_run_names_the_first_difference(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    run_society(_config("sim.agents=8", "sim.steps=2"), out=folder)
    lines = (folder / "action_events.jsonl").read_text().splitlines()
    event = json.loads(lines[3])
    event["kind"] = "tampered"
    lines[3] = json.dumps(event)
    (folder / "action_events.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "digest.txt").write_text("0" * 64 + "\n")
    with pytest.raises(simulacra.DeterminismError, match=r"event 3 \(line 4 of action_events"):
        replay_run(folder)


def _truncate(lines: list[str]) -> list[str]:
    return lines[:-3]


def _swap(lines: list[str]) -> list[str]:
    return [lines[1], lines[0], *lines[2:]]


def _edit_text(lines: list[str]) -> list[str]:
    event = json.loads(lines[-1])
    event["data"]["text"] = event["data"].get("text", "") + "!"
    return [*lines[:-1], json.dumps(event, sort_keys=True, separators=(",", ":"))]


def _cut_mid_line(lines: list[str]) -> list[str]:
    return [*lines[:-1], lines[-1][:20]]


@pytest.mark.parametrize("engine", ["round", "async_event"])
@pytest.mark.parametrize("damage", [_truncate, _swap, _edit_text, _cut_mid_line])
def test_a_replay_checks_every_event_of_the_log_not_only_the_digest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str, damage: Any) -> None:
    """The digest is untouched: only action_events.jsonl was cut, reordered or edited,
    and the replay must say so (exit 1), naming the first event that differs."""
    folder = tmp_path / "run"
    run_society(_config("sim.agents=8", "sim.steps=3", f"sim.engine.step.built_in={engine}"),
                out=folder)
    log = folder / "action_events.jsonl"
    assert main(["replay", str(folder), "--no-progress"]) == 0
    lines = log.read_text().splitlines()
    assert f"all {len(lines)} events of action_events.jsonl match" in capsys.readouterr().out
    log.write_text("\n".join(damage(lines)) + "\n")

    assert main(["replay", str(folder), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "event log mismatch" in err
    assert err.count("\n") == 1, err  # one line
    with pytest.raises(simulacra.DeterminismError, match=r"but action_events\.jsonl does not"):
        replay_run(folder)
    assert not replay_run(folder, check=False).matches


def test_a_replay_that_misses_the_recordings_names_the_call_site(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    run_society(_config("sim.agents=8", "sim.steps=3"), out=folder)
    import sqlite3

    with sqlite3.connect(folder / "llm_recordings.sqlite") as db:  # lose every third call
        db.execute("DELETE FROM completions WHERE n = 2")
    with pytest.raises(simulacra.ConfigError, match=r"only sim\.engine\.mode"):
        replay_run(folder, overrides=("sim.steps=3",))
    with pytest.raises(simulacra.AgentActionError) as info:
        replay_run(folder)
    assert isinstance(info.value.__cause__, simulacra.ReplayMiss)
    # An agent's third call, named by its call site.
    assert re.search(r"agent='[a-z]+\d' n=2", str(info.value.__cause__))


@pytest.mark.parametrize(("override", "field"), [
    ("sim.steps=abc", "sim.steps"), ("sim.engine.mod=x", "sim.engine.mod"),
    ("sim.engine.participation=2", "sim.engine.participation"),
    ("sim.llm.provider=gpt", "sim.llm.provider"),
    ("sim.engine.step.built_in=pregel", "sim.engine.step.built_in"),
])
def test_bad_overrides_name_the_dotted_field(override: str, field: str) -> None:
    with pytest.raises(simulacra.ConfigError, match=field.replace(".", r"\.")):
        _config(override)


@pytest.mark.parametrize(("override", "field"), [
    ("sim.agents=true", "sim.agents"), ("sim.steps=2.5", "sim.steps"),
    ("sim.steps=3.0", "sim.steps"), ("run.record=1", "run.record"),
    ("sim.engine.concurrency=false", "sim.engine.concurrency"),
])
def test_values_of_another_type_are_refused_not_converted(override: str, field: str) -> None:
    # pydantic's lax mode would read true as 1 and 3.0 as 3: a typo that runs
    with pytest.raises(simulacra.ConfigError, match=field.replace(".", r"\.")) as info:
        _config(override)
    # the problem is the command line's, not the file's
    assert str(info.value).endswith("(set on the command line)")
    assert "config.yaml" not in str(info.value)


def test_a_problem_in_the_file_still_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "society.yaml"
    path.write_text("sim:\n  agents: yes\n", encoding="utf-8")
    with pytest.raises(simulacra.ConfigError, match=r"society\.yaml: sim\.agents") as info:
        simulacra.load_config(path, ["sim.steps=2"])
    assert "command line" not in str(info.value)


def test_config_errors_for_the_world_factory() -> None:
    with pytest.raises(simulacra.ConfigError, match=r"sim\.world\.colour"):
        build_society(_config("sim.world.colour=red"))
    with pytest.raises(simulacra.ConfigError, match=r"sim\.world\.factory"):
        build_society(load_config(None))
    with pytest.raises(simulacra.ConfigError, match=r"sim\.llm\.base_url"):
        run_society(_config("sim.llm.provider=openai_compatible"))


def test_async_event_runs_from_config_and_replays(tmp_path: Path) -> None:
    """sim.engine.step.built_in=async_event: a step is a window of virtual time."""
    config = _config("sim.engine.step.built_in=async_event", "sim.steps=4",
                     "sim.engine.step.options.window=0.5")
    run = run_society(config, out=tmp_path / "run")

    assert "async_event" in simulacra.societies.step_engine_names()
    assert run.result.steps == 4
    assert run.result.event_count > 0
    telemetry = (tmp_path / "run" / "telemetry.jsonl").read_text().splitlines()
    assert len(telemetry) == 4
    report = simulacra.replay_run(tmp_path / "run")
    assert report.matches
    assert report.model_calls == 0
    with pytest.raises(simulacra.ConfigError, match=r"sim\.engine\.step\.options\.tick"):
        run_society(_config("sim.engine.step.built_in=async_event",
                            "sim.engine.step.options.tick=1"))


# -- the command line ------------------------------------------------------------


def test_cli_run_then_replay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "run"
    code = main(["run", str(CONFIG), "sim.agents=12", "--out", str(folder), "sim.steps=2",
                 "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    for word in ("posts", "replies", "likes", "mention chains", "most engaged", "digest"):
        assert word in out
    digest = (folder / "digest.txt").read_text().strip()
    assert digest in out

    assert main(["replay", str(folder), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "0 model calls" in out
    assert f"digest matches: {digest}" in out

    (folder / "digest.txt").write_text("f" * 64 + "\n")
    assert main(["replay", str(folder), "--no-progress"]) == 1
    assert "digest mismatch" in capsys.readouterr().err


def test_cli_bad_override_exits_2_naming_the_field(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(CONFIG), "sim.steps=many", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "sim.steps" in err
    assert "many" in err
    assert main(["run", str(CONFIG), "steps"]) == 2
    assert "dotted.key=value" in capsys.readouterr().err
    assert main(["replay", "/nonexistent/run"]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_cli_model_function_targets_still_take_no_overrides(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(ROOT / "examples" / "bank.py"), "x=1"]) == 2
    assert "--set" in capsys.readouterr().err


@pytest.mark.timeout(120)
def test_python_examples_social_runs(tmp_path: Path) -> None:
    env: dict[str, Any] = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "social"), "sim.agents=10", "sim.steps=2",
         "--out", str(tmp_path / "run"), "--no-progress"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=100, check=False)
    assert done.returncode == 0, done.stderr
    assert "mention chains" in done.stdout
    assert (tmp_path / "run" / "digest.txt").is_file()
