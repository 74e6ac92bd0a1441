"""The event-driven engine: lookahead overlap against the ideal, and its per-action overhead.

Two measurements, side by side in one run:

* ``overlap``: the social world (``examples/social``), N agents x K actions,
  with a provider whose every reply takes 200 ms of wall-clock time (the
  scripted model behind a 200 ms sleep, in process -- or ``--http`` for the
  real OpenAI-compatible ``ScriptedServer`` over loopback HTTP), at
  concurrency 64 on threads and on asyncio. The ideal is the total call time
  divided by 64; the ratio is wall / ideal (target <= 1.3). The trace of each
  run is checked against the one-call-at-a-time run with the same (instant)
  scripted model: the digests must be equal.
* ``overhead``: microseconds per action that are the engine's own, with a
  world and agents that do nothing (no model, no feed), sequentially; and the
  whole social stack with the ``ScriptedModel`` per action, for scale.

Usage::

    python bench/events.py                  # 1000 agents x 20 actions (about 3 min)
    python bench/events.py --agents 200 --actions 5 --quick
    python bench/events.py --http           # the overlap over loopback HTTP
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "examples" / "social")]

import model as social  # noqa: E402

from simulacra import SeedTree  # noqa: E402
from simulacra.agents import ActionSpec, World  # noqa: E402
from simulacra.llm import (  # noqa: E402
    CallSite,
    Completion,
    CompletionRequest,
    LatencyModel,
    OpenAICompatible,
    ScriptedModel,
    ScriptedServer,
)
from simulacra.societies import EventEngine  # noqa: E402

LATENCY = LatencyModel(base=0.5, prefill_per_token=0.0001, decode_per_token=0.01,
                       noise_sigma=0.2, min_duration=0.5)
WAKE = 2.0
SEED = 7


class SlowModel:
    """The scripted model, each reply held back *delay* seconds of wall-clock time."""

    def __init__(self, inner: ScriptedModel, delay: float) -> None:
        self.inner = inner
        self.delay = delay

    def complete(self, request: CompletionRequest, *, site: CallSite | None = None) -> Completion:
        time.sleep(self.delay)
        return self.inner.complete(request, site=site)

    async def acomplete(self, request: CompletionRequest, *,
                        site: CallSite | None = None) -> Completion:
        await asyncio.sleep(self.delay)
        return self.inner.complete(request, site=site)


def social_engine(agents: int, model: Any, mode: str, lookahead: bool,
                  concurrency: int = 64) -> EventEngine:
    world, people = social.build(agents=agents, seed=SeedTree(SEED), llm={})
    return EventEngine(world, people, model=model, latency=LATENCY, seed=SEED, mode=mode,
                       lookahead=lookahead, concurrency=concurrency, wake_interval=WAKE)


def overlap(agents: int, actions: int, delay: float, http: bool) -> list[dict[str, Any]]:
    reference = social_engine(agents, ScriptedModel(seed=3), "sequential", False).run(
        max_turns=actions)
    rows = []
    for mode in ("threads", "asyncio"):
        if http:
            server = ScriptedServer(ScriptedModel(seed=3), latency=delay)
            model: Any = OpenAICompatible(server.base_url, model="scripted", concurrency=64,
                                          timeout=60.0)
        else:
            server, model = None, SlowModel(ScriptedModel(seed=3), delay)
        try:
            result = social_engine(agents, model, mode, True).run(max_turns=actions)
        finally:
            if server is not None:
                model.close()
                server.close()
        ideal = result.llm_calls * delay / 64
        rows.append({"mode": mode, "calls": result.llm_calls, "wall_s": result.wall_s,
                     "ideal_s": ideal, "ratio": result.wall_s / ideal,
                     "peak_in_flight": result.peak_in_flight,
                     "same_trace": result.digest == reference.digest})
    return rows


class NullWorld(World):
    """Resolves every action into one event; observes nothing."""

    def observation_for(self, agent_id: Any, snapshot: Any = None) -> None:
        return None

    def decide(self, agent_id: Any, action: Any, step: int,
               time: float) -> list[tuple[str, dict[str, Any], tuple[str, ...]]]:
        return [("act", {}, ())]


class NullAgent:
    def __init__(self, id: int) -> None:
        self.id = id

    def observe(self, observation: Any) -> None:
        pass

    def act(self, spec: ActionSpec) -> str:
        return "act"

    def get_state(self) -> dict[str, Any]:
        return {}

    def set_state(self, state: Any) -> None:
        pass


def overhead(agents: int, actions: int, rounds: int) -> dict[str, float]:
    null, full = [], []
    for _ in range(rounds):
        engine = EventEngine(NullWorld(), [NullAgent(i) for i in range(agents)], seed=SEED,
                             mode="sequential", latency=LATENCY, wake_interval=WAKE)
        result = engine.run(max_turns=actions)
        null.append(result.wall_s / result.turns * 1e6)
        engine = social_engine(agents, ScriptedModel(seed=3), "sequential", True)
        result = engine.run(max_turns=actions)
        full.append(result.wall_s / result.turns * 1e6)
    return {"engine_us": statistics.median(null), "engine_us_min": min(null),
            "social_scripted_us": statistics.median(full),
            "social_scripted_us_min": min(full)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--actions", type=int, default=20)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="skip the overlap run")
    args = parser.parse_args()

    cost = overhead(args.agents, args.actions, args.rounds)
    print(f"engine overhead: {cost['engine_us']:.1f} us/action median "
          f"(min {cost['engine_us_min']:.1f}); target <= 50")
    print(f"whole social stack with ScriptedModel: {cost['social_scripted_us']:.1f} us/action "
          f"median (min {cost['social_scripted_us_min']:.1f})")
    if args.quick:
        return
    where = "HTTP (ScriptedServer)" if args.http else "in process"
    for row in overlap(args.agents, args.actions, args.delay, args.http):
        print(f"overlap {row['mode']:8s} {where}: {row['calls']} calls x {args.delay * 1000:.0f} "
              f"ms, wall {row['wall_s']:.1f} s, ideal {row['ideal_s']:.1f} s, "
              f"ratio {row['ratio']:.2f} (target <= 1.3), peak in flight "
              f"{row['peak_in_flight']}, trace equals sequential: {row['same_trace']}")


if __name__ == "__main__":
    main()
