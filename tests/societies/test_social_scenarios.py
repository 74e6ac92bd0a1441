"""Scenarios on society runs: the social example's knobs, in rounds and in virtual time.

A scenario injects a post, resizes the feeds and interviews agents; it is
checked before anything is written, its changes are events of the log (in the
digest) at their step or time, a run with it has one digest on every engine
mode, a run cut and resumed equals the run straight, and an interview changes
nothing but the interview records.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from simulacra import RunControl, RunStopped, ScenarioError
from simulacra.cli import main
from simulacra.llm import CallSite, Completion, CompletionRequest, ScriptedModel
from simulacra.scenarios import Scenario
from simulacra.societies import (
    SCENARIO_FILE,
    RunConfig,
    load_config,
    replay_run,
    resume_society,
    run_society,
)

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "social" / "config.yaml"

STORM = "Storm warning tonight: stay home, @ada00"
QUESTION = "Are you worried about the storm?"


def _config(engine: str = "round", mode: str = "threads", *more: str) -> RunConfig:
    return load_config(CONFIG, [f"sim.engine.step.built_in={engine}", f"sim.engine.mode={mode}",
                                "sim.agents=12", "sim.steps=5", "seed=4", *more])


def _scenario(*interventions: dict[str, Any], name: str = "storm") -> Scenario:
    return Scenario(name=name, interventions=list(interventions))


FULL = _scenario(
    {"knob": "post", "at": 1, "value": STORM},
    {"knob": "feed_size", "at": 2, "value": 2, "duration": 2},
    {"knob": "interview", "at": 3, "value": f"ada00,ben01: {QUESTION}"},
    {"knob": "post", "at": 3, "value": "@cleo02: Sandbags at the corner shop, @dev03"},
)


class Spy:
    """The scripted model, keeping every request it is asked, by call site."""

    def __init__(self, seed: int = 4) -> None:
        self.inner = ScriptedModel(seed=seed)
        self.calls: list[tuple[CallSite, CompletionRequest]] = []
        self._lock = threading.Lock()

    def complete(self, request: CompletionRequest, *, site: CallSite | None = None) -> Completion:
        assert site is not None
        with self._lock:
            self.calls.append((site, request))
        return self.inner.complete(request, site=site)

    async def acomplete(self, request: CompletionRequest, *,
                        site: CallSite | None = None) -> Completion:
        return self.complete(request, site=site)

    def prompts(self, n: int) -> dict[str, str]:
        """Each agent's prompt of its n-th call (its turn in step n, on rounds)."""
        return {site.agent: request.messages[-1].content for site, request in self.calls
                if site.n == n and not site.agent.startswith("interview:")}


def _feed(prompt: str) -> list[str]:
    lines = prompt.split("\nFEED:\n", 1)[1].split("\nMENTIONS:", 1)[0].splitlines()
    return [line for line in lines if line.startswith("#")]


def _events(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "action_events.jsonl").read_text().splitlines()]


# -- checked before the run -------------------------------------------------------------


@pytest.mark.parametrize(("intervention", "message"), [
    ({"knob": "feed_sise", "at": 1, "value": 3}, "no knob 'feed_sise'.*did you mean 'feed_size'"),
    ({"knob": "feed_size", "at": 1, "value": "3"}, "knob 'feed_size' takes an int"),
    ({"knob": "feed_size", "at": 1, "value": 0}, "must be >= 1"),
    ({"knob": "feed_size", "at": 7, "value": 3}, "at=7.0 is after the end of the run"),
    ({"knob": "post", "at": 1, "value": "hi", "duration": 2}, "knob 'post' is an action"),
    ({"knob": "post", "at": 1, "value": "@nobody: hi"}, "no agent @nobody to post as"),
    ({"knob": "post", "at": 1, "value": "  "}, "the post has no text"),
    ({"knob": "interview", "at": 1, "value": "ada00,zed: why?"}, "no agent @zed to interview"),
    ({"knob": "interview", "at": 1, "value": "why?"}, "an interview is 'handle,handle"),
])
def test_a_scenario_that_does_not_fit_stops_before_anything_is_written(
        tmp_path: Path, intervention: dict[str, Any], message: str) -> None:
    bad = _scenario({"knob": "post", "at": 0, "value": "fine"}, intervention, name="bad")
    with pytest.raises(ScenarioError, match=message) as caught:
        run_society(_config(), out=tmp_path / "run", scenario=bad)
    assert "scenario 'bad', intervention 1" in str(caught.value)
    assert not (tmp_path / "run").exists()


def test_the_event_engine_ends_at_the_last_window_not_the_last_step(tmp_path: Path) -> None:
    late = _scenario({"knob": "feed_size", "at": 4.5, "value": 3})
    with pytest.raises(ScenarioError, match="after the end of the run"):
        run_society(_config(), scenario=late, write=False)
    run = run_society(_config("async_event"), scenario=late, write=False)
    assert run.world.feed_size == 3  # type: ignore[attr-defined]


def test_a_model_without_knobs_cannot_take_a_scenario(tmp_path: Path) -> None:
    bare = tmp_path / "bare.py"
    social = str(ROOT / "examples" / "social")
    bare.write_text(f"import sys\nsys.path.insert(0, {social!r})\nimport model\n\n"
                    "def build(**kw):\n    return model.build(**kw)\n", encoding="utf-8")
    config = _config("round", "sequential", f"sim.world.factory={bare}:build")
    with pytest.raises(ScenarioError, match="declares no knobs"):
        run_society(config, out=tmp_path / "run", scenario=FULL)
    assert not (tmp_path / "run").exists()


# -- each knob's effect ---------------------------------------------------------------------


def test_an_injected_post_is_in_every_feed_from_its_step() -> None:
    spy = Spy()
    run = run_society(_config("round", "sequential"), model=spy, write=False,
                      scenario=_scenario({"knob": "post", "at": 1, "value": STORM}))
    assert not any(STORM in p for p in spy.prompts(0).values())
    step1 = spy.prompts(1)
    assert len(step1) == 12
    assert all(STORM in prompt for prompt in step1.values())
    # The system account's post mentions @ada00: it is her mention to answer.
    assert "MENTIONS: #" in step1["ada00"]
    world: Any = run.world
    [post] = [p for p in world.posts if p[0] == "system"]
    assert post[1] == STORM


def test_a_post_as_an_agent_is_theirs() -> None:
    run = run_society(_config("round", "sequential"), write=False, scenario=_scenario(
        {"knob": "post", "at": 2, "value": "@ben01: Free bread at the market, @ada00!"}))
    world: Any = run.world
    [post] = [p for p in world.posts if "Free bread" in p[1]]
    assert post[0] == "ben01"
    assert post[3] == 2
    assert post[4] == ["ada00"]


def test_the_feed_size_changes_what_agents_see_and_comes_back() -> None:
    spy = Spy()
    run_society(_config("round", "sequential"), model=spy, write=False,
                scenario=_scenario({"knob": "feed_size", "at": 2, "value": 2, "duration": 2}))
    sizes = {n: max(len(_feed(p)) for p in spy.prompts(n).values()) for n in range(5)}
    assert sizes[2] == sizes[3] == 2
    assert sizes[1] > 2
    assert sizes[4] > 2


def test_a_ramp_of_the_feed_size_steps_through_its_values(tmp_path: Path) -> None:
    run = run_society(_config("round", "sequential"), out=tmp_path / "run", scenario=_scenario(
        {"knob": "feed_size", "at": 1, "value": 2, "ramp": 3, "ramp_steps": 3}))
    knobs = [e for e in _events(tmp_path / "run") if e["kind"] == "knob"]
    assert [(e["step"], e["data"]["from"], e["data"]["to"]) for e in knobs] == [
        (2, 8, 6), (3, 6, 4), (4, 4, 2)]
    assert run.world.feed_size == 2  # type: ignore[attr-defined]


@pytest.mark.parametrize("engine", ["round", "async_event"])
def test_an_interview_records_answers_and_changes_nothing_else(tmp_path: Path,
                                                                engine: str) -> None:
    without = _scenario({"knob": "post", "at": 1, "value": STORM})
    with_it = _scenario({"knob": "post", "at": 1, "value": STORM},
                        {"knob": "interview", "at": 3, "value": f"ada00,ben01: {QUESTION}"})
    spy = Spy()
    base = run_society(_config(engine), out=tmp_path / "base", scenario=without)
    asked = run_society(_config(engine), out=tmp_path / "asked", scenario=with_it, model=spy)

    events = _events(tmp_path / "asked")
    interviews = [e for e in events if e["kind"] == "interview"]
    assert [e["agent"] for e in interviews] == ["ada00", "ben01"]
    for record in interviews:
        assert record["i"] == -1
        assert record["time"] == 3.0
        assert record["data"]["question"] == QUESTION
        assert record["data"]["answer"]
        assert record["data"]["scenario"] == "storm#1"
    # Every other event, the world and the agents are exactly those of the run without it.
    assert [e for e in events if e["kind"] != "interview"] == _events(tmp_path / "base")
    assert asked.result.world_digest == base.result.world_digest
    assert asked.result.agents_digest == base.result.agents_digest
    assert asked.digest != base.digest  # the answers are in the digest
    sites = sorted(str(site) for site, _ in spy.calls if site.agent.startswith("interview:"))
    assert sites == ["interview%3Aada00/1", "interview%3Aben01/1"]
    prompt = next(r for s, r in spy.calls if s.agent == "interview:ada00").messages[-1].content
    assert prompt.startswith("You are @ada00, a ")
    assert f"\nINTERVIEW: {QUESTION}" in prompt
    assert "Your feed:\n#" in prompt
    # Served from the recordings on replay.
    report = replay_run(tmp_path / "asked")
    assert report.matches
    assert report.calls_served == len(spy.calls)


def test_no_model_is_called_for_the_scenario_itself() -> None:
    knobs_only = _scenario({"knob": "post", "at": 1, "value": STORM},
                           {"knob": "feed_size", "at": 2, "value": 2, "duration": 2})
    for scenario, interviews in ((knobs_only, 0), (FULL, 2)):
        spy = Spy()
        run = run_society(_config("round", "sequential"), model=spy, write=False,
                          scenario=scenario)
        own = [site for site, _ in spy.calls if not site.agent.startswith("interview:")]
        # Each agent's own calls, 0..4, one a step: nothing more.
        assert sorted((s.agent, s.n) for s in own) == sorted(
            (str(a), n) for a in run.world.handles for n in range(5))  # type: ignore[attr-defined]
        assert len(spy.calls) - len(own) == interviews


# -- the log, the digest, every mode -------------------------------------------------------------


def test_each_change_is_an_event_of_the_log_at_its_step(tmp_path: Path) -> None:
    run = run_society(_config(), out=tmp_path / "run", scenario=FULL)
    events = _events(tmp_path / "run")
    changes = [(e["step"], e["kind"], e["agent"], e["data"].get("scenario"))
               for e in events if "scenario" in e["data"]]
    assert changes == [(1, "post", "system", "storm#0"), (2, "knob", "scenario", "storm#1"),
                       (3, "interview", "ada00", "storm#2"), (3, "interview", "ben01", "storm#2"),
                       (3, "post", "cleo02", "storm#3"), (4, "knob", "scenario", "storm#1 ends")]
    # Each comes before the turns of its step.
    firsts = {}
    for event in events:
        firsts.setdefault(event["step"], event)
    assert firsts[1]["data"].get("scenario") == "storm#0"
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["scenario"]["sha256"] == FULL.hash
    assert manifest["scenario"]["name"] == "storm"
    assert (tmp_path / "run" / SCENARIO_FILE).read_text() == FULL.artifact()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["scenario"] == {"name": "storm", "sha256": FULL.hash, "changes": 5,
                                   "applied": 5}
    assert run.result.event_count == len(events)


def test_the_event_engine_applies_changes_at_their_virtual_time(tmp_path: Path) -> None:
    timed = _scenario({"knob": "post", "at": 1.25, "value": STORM},
                      {"knob": "interview", "at": 2.5, "value": f"ada00: {QUESTION}"},
                      {"knob": "feed_size", "at": 3.75, "value": 3})
    run_society(_config("async_event"), out=tmp_path / "run", scenario=timed)
    events = _events(tmp_path / "run")
    marked = [(e["time"], e["step"], e["kind"]) for e in events if "scenario" in e["data"]]
    assert marked == [(1.25, 1, "post"), (2.5, 2, "interview"), (3.75, 3, "knob")]
    times = [e["time"] for e in events]
    assert times == sorted(times)  # in timestamp order with the agents' events
    # The post's mention wakes @ada00: her next turn is a reaction to it.
    after = [e for e in events if e["agent"] == "ada00" and e["time"] > 1.25
             and e["kind"] != "interview"]
    assert after


@pytest.mark.parametrize("engine", ["round", "async_event"])
def test_one_digest_on_every_mode(engine: str) -> None:
    digests = {mode: run_society(_config(engine, mode), scenario=FULL, write=False).digest
               for mode in ("sequential", "threads", "asyncio")}
    assert len(set(digests.values())) == 1, digests
    baseline = run_society(_config(engine, "sequential"), write=False).digest
    assert baseline not in digests.values()


def test_a_run_without_a_scenario_keeps_its_digest_and_config(tmp_path: Path) -> None:
    run = run_society(_config(), out=tmp_path / "run")
    assert "scenario" not in (tmp_path / "run" / "config.yaml").read_text()
    assert "scenario" not in json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert not (tmp_path / "run" / SCENARIO_FILE).exists()
    assert run.digest == run_society(_config(), write=False).digest


# -- resume and replay -------------------------------------------------------------------------


def _cut(config: RunConfig, out: Path, after: int, scenario: Scenario) -> None:
    control = RunControl()

    def stop(report: Any) -> None:
        if report.step + 1 == after:
            control.request_stop("test")

    with pytest.raises(RunStopped):
        run_society(config, out=out, scenario=scenario, control=control, on_step=stop)


@pytest.mark.parametrize("engine", ["round", "async_event"])
def test_a_run_cut_mid_scenario_and_resumed_equals_the_run_straight(tmp_path: Path,
                                                                     engine: str) -> None:
    config = _config(engine, "threads", "run.checkpoint_every=1")
    straight = run_society(config, out=tmp_path / "straight", scenario=FULL)
    # Cut after step 2: the post is applied, the feed is small, the rest is to come.
    _cut(config, tmp_path / "cut", 2, FULL)
    resumed = resume_society(tmp_path / "cut")

    assert resumed.digest == straight.digest
    assert ((tmp_path / "cut" / "action_events.jsonl").read_bytes()
            == (tmp_path / "straight" / "action_events.jsonl").read_bytes())
    assert json.loads((tmp_path / "cut" / "manifest.json").read_text())["scenario"][
        "sha256"] == FULL.hash
    assert replay_run(tmp_path / "cut").matches


def test_resume_refuses_a_scenario_that_changed(tmp_path: Path) -> None:
    artifact = FULL.save(tmp_path / "artifacts")
    config = _config("round", "threads", "run.checkpoint_every=1",
                     f"scenario={json.dumps(str(artifact))}")
    _cut(config, tmp_path / "cut", 2, FULL)
    run_dir = tmp_path / "cut"

    # The artifact the config names was replaced by another scenario.
    other = _scenario({"knob": "post", "at": 1, "value": "Another post"})
    keep = artifact.read_text()
    artifact.write_text(other.artifact())
    with pytest.raises(ScenarioError, match="changed since the run started"):
        resume_society(run_dir)
    artifact.write_text(keep)
    # The run's own copy was edited.
    copy = run_dir / SCENARIO_FILE
    copy.write_text(copy.read_text().replace("Storm", "Sturm"))
    with pytest.raises(ScenarioError, match="does not match its content"):
        resume_society(run_dir)
    copy.write_text(FULL.artifact())
    assert resume_society(run_dir).digest == run_society(
        config.with_overrides(["run.checkpoint_every=null"]), write=False).digest


# -- the command line --------------------------------------------------------------------------


def test_simulacra_run_takes_a_scenario_file_and_the_config_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hand = tmp_path / "storm.json"
    data = FULL.content()
    hand.write_text(json.dumps(data), encoding="utf-8")  # by hand: no hash
    common = [str(CONFIG), "sim.agents=12", "seed=4", "--no-progress"]
    assert main(["run", *common, "--scenario", str(hand), "--out", str(tmp_path / "a")]) == 0
    assert (tmp_path / "a" / SCENARIO_FILE).read_text() == FULL.artifact()

    config = tmp_path / "config.yaml"
    text = CONFIG.read_text().replace("factory: model.py:build",
                                      f"factory: {CONFIG.parent / 'model.py'}:build")
    config.write_text(text + "scenario: storm.json\n", encoding="utf-8")
    assert main(["run", str(config), "sim.agents=12", "seed=4", "--no-progress",
                 "--out", str(tmp_path / "b")]) == 0
    assert ((tmp_path / "a" / "digest.txt").read_text()
            == (tmp_path / "b" / "digest.txt").read_text())
    capsys.readouterr()
    assert main(["replay", str(tmp_path / "b"), "--no-progress"]) == 0
    assert "digest matches" in capsys.readouterr().out

    hand.write_text(json.dumps({**data, "interventions": [
        {"knob": "feed_sise", "at": 1, "value": 3}]}), encoding="utf-8")
    assert main(["run", *common, "--scenario", str(hand), "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: scenario 'storm', intervention 0: the model has no knob")
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "c").exists()
    assert main(["run", "--resume", str(tmp_path / "a"), "--scenario", str(hand)]) == 2
    assert "--resume RUN_DIR continues the scenario" in capsys.readouterr().err


def test_simulacra_run_gives_a_model_function_its_scenario(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rush = Scenario(name="rush", interventions=[{"knob": "demand", "at": 10, "value": 1.2}])
    artifact = rush.save(tmp_path)
    bank = str(ROOT / "examples" / "bank.py")
    common = ["run", bank, "--seed", "3", "--set", "customers=2000", "--json"]
    assert main(common) == 0
    base = json.loads(capsys.readouterr().out)
    assert main([*common, "--scenario", str(artifact)]) == 0
    assert json.loads(capsys.readouterr().out) != base


def test_a_resume_before_an_interview_serves_its_answers_from_the_recordings(
        tmp_path: Path) -> None:
    config = _config("round", "threads", "run.checkpoint_every=1")
    straight = run_society(config, out=tmp_path / "straight", scenario=FULL)
    _cut(config, tmp_path / "cut", 4, FULL)  # the interview of step 3 is made and recorded
    spy = Spy()
    resumed = resume_society(tmp_path / "cut", from_checkpoint=2, model=spy)

    assert resumed.digest == straight.digest
    assert not [site for site, _ in spy.calls if site.agent.startswith("interview:")]
    assert resumed.llm["served_from_recordings"] >= 2 * 12 + 2  # steps 2 and 3, and the answers
