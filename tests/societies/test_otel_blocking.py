"""OpenTelemetry spans of the event engine's blocking agents, whose turns span many hand-offs.

A blocking agent's turn starts on the apply loop, makes its model call on a worker (a thread,
or a task of the asyncio loop) and acts when the loop steps it again: its span is still the
parent of its call, and a turn whose function raises has status ERROR. Spans change nothing:
the run's digests are those of the same run untraced. Real runs of the engine, read back from
the JSON-lines file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from simulacra import SeedTree
from simulacra.llm import LatencyModel, ScriptedModel
from simulacra.societies import BlockingAgent, EventEngine
from simulacra.societies._events import EventSteps

pytest.importorskip("opentelemetry.sdk.trace")
pytest.importorskip("greenlet")

from simulacra.societies._otel import TracedModel, start_tracing

SOCIAL = Path(__file__).resolve().parents[2] / "examples" / "social"
if str(SOCIAL) not in sys.path:
    sys.path.insert(0, str(SOCIAL))

import model as social  # noqa: E402
from world import SocialAction, SocialWorld  # noqa: E402

LATENCY = LatencyModel(base=0.2, noise_sigma=0.3, min_duration=0.1)
WINDOWS = 4


def member(ctx: Any, persona: str, interests: tuple[str, ...]) -> None:
    """The social agent as one blocking function (as tests/societies/test_events.py has it)."""
    from agents import SYSTEM  # examples/social/agents.py
    from simulacra.llm import CompletionRequest, parse_social_action, social_prompt

    while True:
        seen = ctx.observe()
        text = social_prompt(seen.handle, persona=persona, interests=interests,
                             agents=seen.agents, feed=seen.feed, mentions=seen.mentions)
        reply = ctx.llm.complete(CompletionRequest.chat(text, system=SYSTEM))
        action = parse_social_action(reply.text)
        ctx.act(SocialAction(action["action"], action["text"], action["target"]))


def _run(mode: str, path: Path | None) -> tuple[Any, list[dict[str, Any]]]:
    world, people = social.build(agents=12, seed=SeedTree(7), llm={})
    blocking = [BlockingAgent(p.id, member, p.persona, p.interests) for p in people]
    tracer = None if path is None else start_tracing(
        "jsonl", path=path, seed=7, run_name="blocking", provider_name="scripted",
        unit="window")
    model: Any = ScriptedModel(seed=3)
    if tracer is not None:
        model = TracedModel(model, tracer)
    engine = EventEngine(world, blocking, model=model, latency=LATENCY, seed=7, mode=mode,
                         concurrency=4)
    steps = EventSteps(engine, width=1.0, max_turns=None, on_step=None)
    steps.tracer = tracer
    try:
        result = steps.run(WINDOWS)
    finally:
        if tracer is not None:
            tracer.close()
    if path is None:
        return result, []
    return result, [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("mode", ["sequential", "threads", "asyncio"])
def test_a_blocking_agents_call_is_a_child_of_its_turn(tmp_path: Path, mode: str) -> None:
    result, spans = _run(mode, tmp_path / "spans.jsonl")
    untraced, _ = _run(mode, None)
    assert result.digest == untraced.digest
    assert result.step_digests == untraced.step_digests

    by_id = {span["span_id"]: span for span in spans}
    windows = [s for s in spans if s["name"].startswith("window ")]
    turns = [s for s in spans if s["name"].startswith("invoke_agent ")]
    chats = [s for s in spans if s["name"].startswith("chat ")]
    assert sorted(w["name"] for w in windows) == [f"window {k}" for k in range(WINDOWS)]
    assert len(windows) + len(turns) + len(chats) == len(spans)
    assert len(turns) >= result.event_count > 0  # each resolved turn made an event
    for turn in turns:
        window = by_id[turn["parent_span_id"]]
        assert window["name"] == f"window {int(turn['attributes']['simulacra.time'])}"
        assert turn["status"] == "UNSET"
    # one call a turn (the member calls once, then acts), a child of that turn
    assert len(chats) == len(turns)
    for chat in chats:
        turn = by_id[chat["parent_span_id"]]
        attributes = chat["attributes"]
        assert turn["name"] == f"invoke_agent {attributes['simulacra.agent']}"
        assert attributes["simulacra.turn"] == turn["attributes"]["simulacra.turn"]
        assert attributes["simulacra.call.n"] == attributes["simulacra.turn"]
        assert attributes["simulacra.time"] == turn["attributes"]["simulacra.time"]
        assert turn["start_time_unix_nano"] <= chat["start_time_unix_nano"]
        assert chat["end_time_unix_nano"] <= turn["end_time_unix_nano"]


def test_a_turn_that_raises_has_status_error(tmp_path: Path) -> None:
    def broken(ctx: Any) -> None:
        ctx.act(SocialAction("post", "first words"))
        raise RuntimeError("lost my train of thought")

    def quiet(ctx: Any) -> None:
        ctx.sleep(0.5)  # then returns: it retires without acting

    handles = ["a", "b"]
    world = SocialWorld(handles, {h: [] for h in handles})
    path = tmp_path / "spans.jsonl"
    tracer = start_tracing("jsonl", path=path, seed=1, run_name="broken",
                           provider_name="scripted", unit="window")
    engine = EventEngine(world, [BlockingAgent("a", broken), BlockingAgent("b", quiet)],
                         model=TracedModel(ScriptedModel(1), tracer), seed=1)
    steps = EventSteps(engine, width=10.0, max_turns=None, on_step=None)
    steps.tracer = tracer
    steps.run(3)
    tracer.close()
    spans = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    turns = sorted((s for s in spans if s["name"].startswith("invoke_agent ")),
                   key=lambda s: (s["name"], s["attributes"]["simulacra.turn"]))
    # a: acts, raises (and retires), and its next wake-up finds it retired (a turn started
    # that ends with nothing to resolve); b: returns at once, in its first turn
    assert [(s["name"], s["attributes"]["simulacra.turn"], s["status"]) for s in turns] == [
        ("invoke_agent a", 0, "UNSET"), ("invoke_agent a", 1, "ERROR"),
        ("invoke_agent a", 2, "UNSET"), ("invoke_agent b", 0, "UNSET")]
    failed = turns[1]
    assert failed["attributes"]["error.type"] == "RuntimeError"
    assert failed["status_message"] == "lost my train of thought"
    assert not [s for s in spans if s["name"].startswith("chat ")]  # no one called the model
