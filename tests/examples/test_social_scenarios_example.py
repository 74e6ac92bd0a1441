"""The social example's shipped scenarios, examples/social/scenarios: check, replay, run.

As its README says: ``simulacra scenarios check`` passes on the artifacts, a
replay of the shipped recordings writes them again byte for byte with no model
call, and each artifact runs on the example's config, on both engines, and
replays.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulacra.cli import main
from simulacra.scenarios import load_scenarios

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = "examples/social/scenarios"
TARGET = "examples/social/model.py:KNOBS"
CONFIG = "examples/social/config.yaml"


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def _artifact(name: str) -> Path:
    [path] = list((ROOT / EXAMPLE / "artifacts").glob(f"{name}-*.json"))
    return path


def test_the_readme_check_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios", "check", f"{EXAMPLE}/artifacts", "--docs", f"{EXAMPLE}/docs",
                 "--target", TARGET, "--until", "4"]) == 0
    assert capsys.readouterr().out.startswith(f"ok: 2 artifacts in {EXAMPLE}/artifacts")


def test_the_replay_writes_the_artifacts_again_byte_for_byte(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["scenarios", "generate", f"{EXAMPLE}/docs", "--target", TARGET,
                   "--until", "4", "--count", "2", "--replay", f"{EXAMPLE}/recordings.sqlite",
                   "--out", str(tmp_path)])

    assert status == 0, capsys.readouterr().err
    shipped = {p.name: p.read_bytes() for p in (ROOT / EXAMPLE / "artifacts").glob("*.json")}
    assert {p.name: p.read_bytes() for p in tmp_path.glob("*.json")} == shipped
    assert "no model called" in capsys.readouterr().out


def test_the_artifacts_cite_the_documents() -> None:
    scenarios = load_scenarios(ROOT / EXAMPLE / "artifacts")
    assert [s.name for s in scenarios] == ["feed-cache-outage", "storm-alert"]
    for scenario in scenarios:
        assert scenario.target == TARGET
        assert scenario.citations
        assert scenario.provenance["recording"]["file"] == "recordings.sqlite"


@pytest.mark.parametrize("engine", ["round", "async_event"])
def test_the_storm_alert_runs_interviews_and_replays(
        tmp_path: Path, engine: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["run", CONFIG, "--scenario", str(_artifact("storm-alert")), "--out", str(out),
                 "--no-progress", f"sim.engine.step.built_in={engine}"]) == 0
    printed = capsys.readouterr().out
    assert "storm-alert (" in printed
    assert "2 of 2 changes applied" in printed
    events = [json.loads(line) for line in (out / "action_events.jsonl").read_text().splitlines()]
    [alert] = [e for e in events if e["kind"] == "post" and e["agent"] == "system"]
    assert alert["data"]["scenario"] == "storm-alert#0"
    answers = [e for e in events if e["kind"] == "interview"]
    assert [e["agent"] for e in answers] == ["ada00", "ben01", "cleo02"]
    assert all(e["data"]["answer"] for e in answers)
    assert main(["replay", str(out), "--no-progress", "sim.engine.mode=sequential"]) == 0
    assert "digest matches" in capsys.readouterr().out


def test_the_feed_cache_outage_shrinks_the_feeds_for_two_steps(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["run", CONFIG, "--scenario", str(_artifact("feed-cache-outage")),
                 "--out", str(out), "--no-progress"]) == 0
    events = [json.loads(line) for line in (out / "action_events.jsonl").read_text().splitlines()]
    knobs = [(e["step"], e["data"]["from"], e["data"]["to"]) for e in events
             if e["kind"] == "knob"]
    assert knobs == [(1, 8, 3), (3, 3, 8)]


def test_the_scripted_stand_in_gives_action_knobs_no_duration(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The scripted stand-in by name: the default provider now reads the documents' own
    # numbers (`extract`), and these documents ground none of these knobs within 4 steps.
    assert main(["scenarios", "generate", f"{EXAMPLE}/docs", "--target", TARGET,
                 "--until", "4", "--provider", "scripted", "--out", str(tmp_path)]) == 0, \
        capsys.readouterr().err
    items = [item for scenario in load_scenarios(tmp_path) for item in scenario.interventions]
    assert {item.knob for item in items} == {"post", "feed_size", "interview"}
    assert all(item.duration is None for item in items if item.knob != "feed_size")
