"""The social demo's street (``sim.world.local=true``): neighbours only, and early starts.

The world names each agent's neighbours (``affected_by``); the event-driven
engine trusts nothing and checks every turn it starts early, so a run with
early starts that ends at all ends on the digest of the run without them.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from typing import Any

import pytest

from simulacra import ConfigError, EventEngine, LatencyModel, ScriptedModel, load_config
from simulacra.societies import build_society

CONFIG = "examples/social/config.yaml"


class Unsteady:
    """The scripted model's replies, each after a keyed wall-clock pause (0.2-40 ms)."""

    def __init__(self) -> None:
        self.inner = ScriptedModel(seed=3)

    def complete(self, request: Any, *, site: Any = None) -> Any:
        completion = self.inner.complete(request, site=site)
        rng = random.Random(f"{request.key()}/{site}")
        time.sleep(min(0.04, 0.002 * rng.lognormvariate(0.0, 1.2)))
        return completion

    async def acomplete(self, request: Any, *, site: Any = None) -> Any:
        return await asyncio.to_thread(self.complete, request, site=site)


class Laggard(Unsteady):
    """Unsteady, but the first agent's calls take 0.3 s: the kernel waits behind them."""

    def complete(self, request: Any, *, site: Any = None) -> Any:
        if site is not None and site.agent.strip("ad") in ("0", "00", "000"):  # ada0, ada00...
            time.sleep(0.3)
        return super().complete(request, site=site)


def street(agents: int, *extra: str) -> tuple[Any, list[Any]]:
    return build_society(load_config(CONFIG, [f"sim.agents={agents}", "sim.world.local=true",
                                              "sim.world.follows=4", *extra]))


def run(agents: int, *, mode: str = "threads", dependencies: bool = True) -> tuple[str, int]:
    world, people = street(agents)
    engine = EventEngine(world, people, model=Unsteady(), mode=mode, concurrency=32,
                         latency=LatencyModel(base=0.5, min_duration=0.5, noise_sigma=0.6),
                         wake_interval=0.7, reaction_delay=0.1, dependencies=dependencies)
    return engine.run(max_turns=4).digest, engine.early_starts


@pytest.mark.parametrize("mode", ["threads", "asyncio"])
def test_the_street_runs_alike_with_and_without_early_starts(mode: str) -> None:
    reference, _ = run(40, mode="sequential")
    without, none = run(40, mode=mode, dependencies=False)
    early, started = run(40, mode=mode)
    assert none == 0
    assert started > 0  # the world names neighbours: some turns did start early
    assert early == without == reference


def test_the_street_is_a_ring_of_neighbours() -> None:
    world, people = street(12)
    ids = [p.id for p in people]
    for i, me in enumerate(ids):
        near = world.affected_by(me)
        assert near == {ids[(i + k) % 12] for k in (-2, -1, 1, 2)}
        assert set(world.follows[me]) <= near
    global_world, _ = build_society(load_config(CONFIG, ["sim.agents=12"]))
    assert global_world.affected_by(ids[0]) is None


def test_on_the_street_only_neighbours_are_reached() -> None:
    world, people = street(12)
    SocialAction = sys.modules[type(world).__module__].SocialAction  # noqa: N806
    ids = [p.id for p in people]
    me, near, far = ids[0], ids[1], ids[6]
    events = world.resolve(me, SocialAction("post", f"hi @{near} and @{far}"), step=0, time=0.0)
    assert events[0].data["mentions"] == [near]  # the far one is text, not a mention
    assert events[0].triggers == (near,)
    post = events[0].data["post"]
    far_post = world.resolve(far, SocialAction("post", "far away"), step=0,
                             time=0.0)[0].data["post"]
    for kind, target, text in (("reply", far_post, "yes"), ("like", far_post, ""),
                               ("follow", None, f"@{far}")):
        (event,) = world.resolve(me, SocialAction(kind, text, target), step=0, time=0.0)
        assert event.kind == "idle", (kind, event)
    (reply,) = world.resolve(near, SocialAction("reply", "hello", post), step=0, time=0.0)
    assert reply.kind == "reply"
    assert reply.triggers == (me,)
    seen = world.observation_for(far)
    assert all(author in (far,) for _, author, _, _ in seen.feed)  # no "newest of all"


def test_local_must_be_a_boolean() -> None:
    with pytest.raises(ConfigError, match=r"sim.world.local must be true or false, got str"):
        street(6, "sim.world.local='yes'")


def test_a_run_directory_counts_the_turns_started_early(tmp_path: Any) -> None:
    from simulacra.societies import run_society

    settings = ["sim.agents=60", "sim.world.local=true", "sim.world.follows=1",
                "sim.engine.step.built_in=async_event",
                "sim.steps=1", "sim.engine.step.options.window=100",
                "sim.engine.step.options.max_turns=3"]
    early = run_society(load_config(CONFIG, settings), out=tmp_path / "early", model=Unsteady())
    assert early.llm["throughput"]["turns_started_early"] > 0
    settings.append("sim.engine.step.options.dependencies=false")
    off = run_society(load_config(CONFIG, settings), out=tmp_path / "off", model=Unsteady())
    assert off.llm["throughput"]["turns_started_early"] == 0
    assert off.digest == early.digest
    assert "turns_committed_ahead" not in early.llm["throughput"]  # in timestamp order
    settings[-1] = "sim.engine.step.options.out_of_order=true"
    ahead = run_society(load_config(CONFIG, settings), out=tmp_path / "ahead", model=Laggard())
    assert ahead.llm["throughput"]["turns_committed_ahead"] > 0
    assert ahead.digest == early.digest
    summary = json.loads((tmp_path / "ahead" / "summary.json").read_text(encoding="utf-8"))
    assert summary["llm"]["throughput"]["turns_committed_ahead"] > 0


@pytest.mark.parametrize("mode", ["threads", "asyncio"])
def test_no_turn_starts_early_while_a_run_waits_for_its_calls_to_return(mode: str) -> None:
    """A stop or a checkpoint waits for the calls in flight: none is added meanwhile."""
    reference = EventEngine(*street(60), model=ScriptedModel(seed=3), mode="sequential",
                            latency=LatencyModel(base=0.5, min_duration=0.5, noise_sigma=0.6),
                            wake_interval=0.7, reaction_delay=0.1).run(max_turns=3)
    world, people = street(60)
    engine = EventEngine(world, people, model=Unsteady(), mode=mode, concurrency=4,
                         latency=LatencyModel(base=0.5, min_duration=0.5, noise_sigma=0.6),
                         wake_interval=0.7, reaction_delay=0.1)
    engine.run(max_turns=3, until=1.5, drain=False, early_until=100.0)
    before = engine.early_starts
    engine.drain()
    assert engine.early_starts == before
    assert engine.run(max_turns=3).digest == reference.digest
