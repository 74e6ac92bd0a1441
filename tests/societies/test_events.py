"""The event-driven engine: same seed, same trace, with lookahead concurrency or without.

The oracle is the engine itself run one call at a time (``lookahead=False``,
sequential): every other mode -- threads and asyncio, lookahead on, replies
arriving in random wall-clock order from a real HTTP server -- must give the
same events, world and agent states, bit for bit.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulacra import ConfigError, SeedTree
from simulacra.agents import ActionEvent, ActionSpec
from simulacra.errors import AgentActionError
from simulacra.llm import LatencyModel, OpenAICompatible, ScriptedModel, ScriptedServer
from simulacra.societies import EventEngine, RoundEngine

SOCIAL = Path(__file__).resolve().parents[2] / "examples" / "social"
if str(SOCIAL) not in sys.path:
    sys.path.insert(0, str(SOCIAL))

import model as social  # noqa: E402
from world import SocialAction, SocialObservation, SocialWorld  # noqa: E402

LATENCY = LatencyModel(base=0.2, noise_sigma=0.3, min_duration=0.1)


def _engine(mode: str, lookahead: bool, *, agents: int = 30, seed: int = 7,
            model: Any = None, **options: Any) -> EventEngine:
    world, people = social.build(agents=agents, seed=SeedTree(seed), llm={})
    return EventEngine(world, people, model=model or ScriptedModel(seed=3), latency=LATENCY,
                       seed=seed, mode=mode, lookahead=lookahead, concurrency=8, **options)


@pytest.fixture(scope="module")
def reference() -> Any:
    return _engine("sequential", False).run(max_turns=4)


def test_the_reference_run_does_something(reference: Any) -> None:
    assert reference.turns == 30 * 4
    assert reference.event_count >= reference.turns
    assert reference.chain_max >= 2  # mentions and replies woke agents
    assert len({w.index for w in reference.windows}) > 1


def test_the_old_name_of_the_event_count_still_works_and_warns(reference: Any) -> None:
    with pytest.warns(DeprecationWarning, match="EventResult.events is deprecated: it is a "
                      "count, now called event_count"):
        assert reference.events == reference.event_count


@pytest.mark.parametrize(("mode", "lookahead"), [
    ("sequential", True), ("threads", False), ("threads", True), ("asyncio", False),
    ("asyncio", True),
])
def test_every_mode_gives_the_one_call_at_a_time_result(mode: str, lookahead: bool,
                                                        reference: Any) -> None:
    result = _engine(mode, lookahead).run(max_turns=4)

    assert result.digest == reference.digest
    assert result.events_digest == reference.events_digest
    assert result.time == reference.time


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["threads", "asyncio"])
def test_replies_in_random_wall_clock_order_over_http(mode: str, reference: Any) -> None:
    """A real OpenAI-compatible server, replies delayed 0-40 ms at random: same trace."""
    with ScriptedServer(ScriptedModel(seed=3), latency=(0.0, 0.04), latency_seed=11) as server:
        client = OpenAICompatible(server.base_url, model="scripted", concurrency=8)
        try:
            result = _engine(mode, True, model=client).run(max_turns=4)
        finally:
            client.close()
        peak = server.peak_in_flight

    assert result.digest == reference.digest
    assert peak > 1  # calls really overlapped in wall-clock time
    assert result.peak_in_flight > 1


def test_lookahead_overlaps_calls_and_sequential_does_not(reference: Any) -> None:
    overlapped = _engine("threads", True).run(max_turns=4)
    one_at_a_time = _engine("threads", False).run(max_turns=4)

    assert overlapped.peak_in_flight > 1
    assert one_at_a_time.peak_in_flight == 1
    assert overlapped.digest == one_at_a_time.digest == reference.digest


def test_until_stops_in_virtual_time_and_continues() -> None:
    whole = _engine("threads", True).run(until=6.0)
    engine = _engine("threads", True)
    engine.run(until=2.5)
    assert engine.now <= 2.5
    split = engine.run(until=6.0)

    assert split.digest == whole.digest
    assert whole.time <= 6.0


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), agents=st.integers(2, 12), turns=st.integers(1, 4),
       concurrency=st.integers(1, 6))
def test_lookahead_never_changes_the_trace(seed: int, agents: int, turns: int,
                                           concurrency: int) -> None:
    def run(mode: str, lookahead: bool) -> str:
        world, people = social.build(agents=agents, seed=SeedTree(seed), llm={})
        engine = EventEngine(world, people, model=ScriptedModel(seed=seed), latency=LATENCY,
                             seed=seed, mode=mode, lookahead=lookahead,
                             concurrency=concurrency)
        return engine.run(max_turns=turns).digest

    assert run("threads", True) == run("sequential", False)


# -- the reactive chain -----------------------------------------------------------------


class ChainAgent:
    """A: posts mentioning B; B: replies to a mention; A: answers the reply. Else idle."""

    def __init__(self, id: str, script: dict[str, Any]) -> None:
        self.id = id
        self.script = script
        self.seen: SocialObservation | None = None
        self.done: list[str] = []

    def observe(self, observation: Any) -> None:
        self.seen = observation

    def act(self, spec: ActionSpec) -> SocialAction:
        seen = self.seen
        assert seen is not None
        if self.id == "a" and "post" not in self.done:
            self.done.append("post")
            return SocialAction("post", "hello @b, what do you think?")
        if seen.mentions:
            target = seen.mentions[-1]
            if self.id == "b" and "reply" not in self.done:
                self.done.append("reply")
                return SocialAction("reply", "interesting @a", target)
            if self.id == "a" and "answer" not in self.done:
                self.done.append("answer")
                return SocialAction("reply", "thanks @b!", target)
        return SocialAction("idle")

    def next_wake(self, now: float, rng: Any) -> float | None:
        return None  # only the first wake-up and reactive triggers

    def get_state(self) -> dict[str, Any]:
        return {"done": list(self.done)}

    def set_state(self, state: dict[str, Any]) -> None:
        self.done = list(state["done"])


def _chain_world() -> tuple[SocialWorld, list[ChainAgent]]:
    handles = ["a", "b", "c"]
    world = SocialWorld(handles, {h: [] for h in handles})
    return world, [ChainAgent(h, {}) for h in handles]


def test_a_reactive_chain_resolves_within_one_window() -> None:
    """post(A, mentions B) -> reply(B) wakes A -> answer(A): in one time unit, chain of 3."""
    world, agents = _chain_world()
    events: list[ActionEvent] = []
    engine = EventEngine(world, agents, latency=LatencyModel(min_duration=0.1, base=0.1),
                         seed=1, wake_interval=0.05, window=1.0, on_event=events.append)
    result = engine.run(until=50.0)

    story = [(e.agent, e.kind) for e in events if e.kind != "idle"]
    assert story == [("a", "post"), ("b", "reply"), ("a", "reply")]
    times = [e.time for e in events if e.kind != "idle"]
    assert times == sorted(times)
    assert times[-1] - times[0] < 1.0  # the whole chain inside one window of virtual time
    assert result.chain_max == 3
    window = next(w for w in result.windows if w.start <= times[-1] < w.start + 1.0)
    assert window.chain_max == 3


def test_the_round_engine_needs_three_steps_for_the_same_chain() -> None:
    world, agents = _chain_world()
    engine = RoundEngine(world, agents, mode="sequential")
    engine.run(steps=2)
    kinds = [post[1] for post in world.posts]
    assert len(world.posts) == 2  # the post, and B's reply: A has not answered yet
    engine.run(steps=1)

    assert len(world.posts) == 3, kinds
    assert world.posts[2][0] == "a"


# -- failures and bad input ------------------------------------------------------------------


class Flaky(ChainAgent):
    def act(self, spec: ActionSpec) -> SocialAction:
        if self.id == "b":
            raise RuntimeError("model down")
        return super().act(spec)


def test_a_failed_turn_is_recorded_and_the_run_goes_on() -> None:
    handles = ["a", "b", "c"]
    world = SocialWorld(handles, {h: [] for h in handles})
    agents = [Flaky(h, {}) for h in handles]
    events: list[ActionEvent] = []
    result = EventEngine(world, agents, seed=1, on_event=events.append).run(until=20.0)

    failed = [e for e in events if e.kind == "turn_failed"]
    assert result.failed == len(failed) >= 1
    assert {e.agent for e in failed} == {"b"}
    assert "model down" in failed[0].data["message"]


def test_fail_fast_names_the_agent_and_turn() -> None:
    handles = ["a", "b", "c"]
    world = SocialWorld(handles, {h: [] for h in handles})
    agents = [Flaky(h, {}) for h in handles]
    engine = EventEngine(world, agents, seed=1, fail_fast=True)

    with pytest.raises(AgentActionError, match=r"agent 'b' failed in turn 0 .*model down"):
        engine.run(until=20.0)


@pytest.mark.parametrize(("options", "message"), [
    ({"mode": "gpu"}, "mode must be one of sequential, threads, asyncio, got 'gpu'"),
    ({"concurrency": 0}, "concurrency must be an int >= 1, got int 0"),
    ({"wake_interval": -1}, "wake_interval must be a finite number > 0, got -1"),
    ({"reaction_delay": float("nan")}, "reaction_delay must be a finite number >= 0"),
    ({"latency": object()}, "latency must have duration"),
])
def test_bad_options_name_the_field(options: dict[str, Any], message: str) -> None:
    world, agents = _chain_world()
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        EventEngine(world, agents, **options)


def test_run_needs_a_limit() -> None:
    world, agents = _chain_world()
    engine = EventEngine(world, agents)
    with pytest.raises(ConfigError, match="give max_turns"):
        engine.run()
    with pytest.raises(ConfigError, match="max_turns must be an int >= 1, got int 0"):
        engine.run(max_turns=0)


# -- blocking-style agents ------------------------------------------------------------------


def member(ctx: Any, persona: str, interests: tuple[str, ...]) -> None:
    """The social agent written as one blocking function."""
    from agents import SYSTEM  # examples/social/agents.py
    from simulacra.llm import CompletionRequest, parse_social_action, social_prompt

    while True:
        seen = ctx.observe()
        text = social_prompt(seen.handle, persona=persona, interests=interests,
                             agents=seen.agents, feed=seen.feed, mentions=seen.mentions)
        reply = ctx.llm.complete(CompletionRequest.chat(text, system=SYSTEM))
        action = parse_social_action(reply.text)
        ctx.state["turns"] = ctx.state.get("turns", 0) + 1
        ctx.act(SocialAction(action["action"], action["text"], action["target"]))


def _blocking_engine(mode: str, lookahead: bool) -> EventEngine:
    from simulacra.societies import BlockingAgent

    world, people = social.build(agents=30, seed=SeedTree(7), llm={})
    blocking = [BlockingAgent(p.id, member, p.persona, p.interests) for p in people]
    return EventEngine(world, blocking, model=ScriptedModel(seed=3), latency=LATENCY, seed=7,
                       mode=mode, lookahead=lookahead, concurrency=8)


@pytest.mark.parametrize(("mode", "lookahead"), [
    ("sequential", False), ("threads", True), ("asyncio", True)])
def test_blocking_agents_run_in_the_event_engine(mode: str, lookahead: bool,
                                                 reference: Any) -> None:
    """The same agents as blocking functions: the same events and world as observe/act ones."""
    result = _blocking_engine(mode, lookahead).run(max_turns=4)

    assert result.events_digest == reference.events_digest
    assert result.world_digest == reference.world_digest
    assert result.turns == reference.turns
    if lookahead and mode != "sequential":
        assert result.peak_in_flight > 1  # their model calls overlapped


def test_a_blocking_agent_that_raises_fails_its_turn_and_retires() -> None:
    from simulacra.societies import BlockingAgent

    def broken(ctx: Any) -> None:
        ctx.act(SocialAction("post", "first words"))
        raise RuntimeError("lost my train of thought")

    def quiet(ctx: Any) -> None:
        ctx.sleep(0.5)  # then returns: it retires without acting

    handles = ["a", "b"]
    world = SocialWorld(handles, {h: [] for h in handles})
    events: list[ActionEvent] = []
    engine = EventEngine(world, [BlockingAgent("a", broken), BlockingAgent("b", quiet)],
                         model=ScriptedModel(1), seed=1, on_event=events.append)
    result = engine.run(until=30.0)

    assert [(e.agent, e.kind) for e in events] == [("a", "post"), ("a", "turn_failed")]
    assert "lost my train of thought" in events[1].data["message"]
    assert result.turns == 2
    with pytest.raises(ConfigError, match="blocking agent 'a' needs a model"):
        EventEngine(world, [BlockingAgent("a", broken)])


def test_rebuilding_a_world_from_its_log_is_idempotent() -> None:
    events: list[ActionEvent] = []
    engine = _engine("threads", True, on_event=events.append)
    result = engine.run(max_turns=3)
    fresh, _ = social.build(agents=30, seed=SeedTree(7), llm={})

    assert fresh.replay(events[:40]) == 40
    assert fresh.replay(events[20:]) == len(events) - 40  # the overlap is applied once
    assert fresh.replay(events) == 0
    assert fresh.state_digest() == result.world_digest
    with pytest.raises(ConfigError, match=r"cannot follow event #-1: the log has a gap"):
        social.build(agents=30, seed=SeedTree(7), llm={})[0].replay(events[1:])


def test_a_street_reads_as_of_a_time_what_its_turns_before_then_made(tmp_path: Path) -> None:
    """SocialWorld.observation_at(agent, t) on a street: what a world of only the turns
    before t shows the agent, read from a world that holds the others' later turns too.

    The turns of different agents commute there (SocialWorld.commutes), so a
    subset of a run's events may be applied on its own, in the run's order; the
    street's inboxes and authors' posts are in time order, so a read as of t can
    leave the later posts out.
    """
    import json

    from simulacra import load_config
    from simulacra.societies import build_society, run_society

    config = load_config(SOCIAL / "config.yaml", [
        "sim.agents=12", "sim.world.local=true", "sim.engine.step.built_in=async_event",
        "sim.steps=6", "run.checkpoint_every=null"])
    world = run_society(config, out=tmp_path / "run").world
    assert type(world).__name__ == "SocialWorld"  # the run loads the module on its own
    assert world.commutes()
    with (tmp_path / "run" / "action_events.jsonl").open(encoding="utf-8") as file:
        events = [ActionEvent.from_json(json.loads(line)) for line in file]
    times = sorted({e.time for e in events})
    assert len(times) > 10
    compared = 0
    for t in [*times[:: max(1, len(times) // 8)], times[-1] + 1.0]:
        past, _ = build_society(config)  # every turn before t
        for event in events:
            if event.time < t:
                past.apply(event)
        for handle in world.handles:
            # A forward world: the others' turns at any time, the agent's own before t
            # only (and none of the others' that answer or like what it wrote later).
            ahead, _ = build_society(config)
            later: set[int] = set()
            for event in events:
                data = event.data
                if ((event.agent == handle and event.time >= t)
                        or data.get("reply_to") in later
                        or (event.kind == "like" and data["post"] in later)):
                    if "post" in data and event.kind != "like":
                        later.add(data["post"])
                    continue
                ahead.apply(event)
            assert ahead.observation_at(handle, t) == past.observation_for(handle), (handle, t)
            compared += 1
    assert compared > 12 * 8
    # Not a street: its ids and its newest posts are everyone's; it does not say so.
    assert not SocialWorld(["a", "b"], {}).commutes()
    with pytest.raises(NotImplementedError, match="street"):
        SocialWorld(["a", "b"], {}).observation_at("a", 1.0)


def test_a_street_saved_before_its_posts_held_their_time_resumes_as_older_than_any_new_post(
        tmp_path: Path) -> None:
    """A street's state from a checkpoint written before posts held their time (7
    fields, not 8) loads, shows each agent what the same state with times shows, and
    the turns after it go in after its posts, as they would with the times."""
    import copy
    import json

    from simulacra import load_config
    from simulacra.societies import build_society, run_society

    config = load_config(SOCIAL / "config.yaml", [
        "sim.agents=10", "sim.world.local=true", "sim.engine.step.built_in=async_event",
        "sim.steps=8", "run.checkpoint_every=null"])
    run_society(config, out=tmp_path / "run")
    with (tmp_path / "run" / "action_events.jsonl").open(encoding="utf-8") as file:
        events = [ActionEvent.from_json(json.loads(line)) for line in file]
    half = len(events) // 2
    assert 10 < half < len(events) - 10
    then, _ = build_society(config)
    for event in events[:half]:
        then.apply(event)
    state = then.get_state()
    old = copy.deepcopy(state)
    assert old["posts"]
    assert all(len(post) == 8 for post in old["posts"])
    for post in old["posts"]:
        del post[7]  # as written before the time was kept
    kept, _ = build_society(config)
    kept.set_state(state)
    loaded, _ = build_society(config)
    loaded.set_state(old)
    late = events[half].time
    for handle in loaded.handles:
        assert loaded.observation_for(handle) == kept.observation_for(handle), handle
        assert loaded.observation_at(handle, late) == kept.observation_at(handle, late)
    for event in events[half:]:
        kept.apply(event)
        loaded.apply(event)
    for handle in loaded.handles:
        assert loaded.observation_for(handle) == kept.observation_for(handle), handle
        assert loaded.inbox[handle] == kept.inbox[handle], handle
