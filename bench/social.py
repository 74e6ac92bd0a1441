"""Benchmarks of the round-based engine and the social example (docs/social.md).

(a) overlap: 1000 agents x 5 steps against a real OpenAI-compatible HTTP server
    (``ScriptedServer``) whose replies take 200 ms of wall-clock time, at
    concurrency 64. Ideal wall time = total call time / 64; target <= 1.3x.
(b) engine overhead: microseconds per agent turn with no model at all (a
    trivial world and agents: the engine's own cost), and the social example's
    full turn with ``ScriptedModel`` (prompt, model, parse, resolve), with the
    model's own share measured side by side. Target: engine <= 50 us per turn.

    python bench/social.py            # both
    python bench/social.py overhead   # (b) only
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from simulacra.agents import ActionEvent, ActionSpec, AgentId, World
from simulacra.llm import ScriptedModel, ScriptedServer
from simulacra.societies import RoundEngine, load_config, run_society

CONFIG = Path(__file__).resolve().parents[1] / "examples" / "social" / "config.yaml"


class NullWorld(World):
    def observation_for(self, agent_id: AgentId, snapshot: Any = None) -> Any:
        return snapshot

    def decide(self, agent_id: AgentId, action: Any, step: int,
               time: float) -> list[tuple[str, dict[str, Any], tuple[str, ...]]]:
        return [("idle", {}, ())]

    def apply(self, event: ActionEvent) -> None:
        self.events = event.index + 1


class NullAgent:
    def __init__(self, id: int) -> None:
        self.id = id

    def observe(self, observation: Any) -> None:
        pass

    def act(self, spec: ActionSpec) -> Any:
        return None

    async def aact(self, spec: ActionSpec) -> Any:
        return None

    def get_state(self) -> dict[str, Any]:
        return {}

    def set_state(self, state: Any) -> None:
        pass


class TimedModel:
    """Wraps a model and adds up the wall time spent inside it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seconds = 0.0

    def complete(self, request: Any, *, site: Any = None) -> Any:
        start = time.perf_counter()
        out = self.inner.complete(request, site=site)
        self.seconds += time.perf_counter() - start
        return out

    async def acomplete(self, request: Any, *, site: Any = None) -> Any:
        return self.complete(request, site=site)


def overhead(agents: int = 10_000, steps: int = 5) -> None:
    print(f"(b) engine overhead: {agents} agents x {steps} steps")
    for mode in ("sequential", "threads", "asyncio"):
        engine = RoundEngine(NullWorld(), [NullAgent(i) for i in range(agents)], mode=mode,
                             concurrency=64)
        result = engine.run(steps)
        turns = agents * steps
        print(f"  engine only, {mode:<10}: {result.wall_s / turns * 1e6:7.1f} us/turn "
              f"({turns} turns, {result.wall_s:.2f} s)")
    agents_social, steps_social = 2000, 5
    for mode in ("sequential", "threads"):
        config = load_config(CONFIG, [f"sim.agents={agents_social}", f"sim.steps={steps_social}",
                                      f"sim.engine.mode={mode}"])
        model = TimedModel(ScriptedModel(seed=0))
        run = run_society(config, model=model)  # type: ignore[arg-type]
        turns = agents_social * steps_social
        total = run.result.wall_s / turns * 1e6
        inside = model.seconds / turns * 1e6
        if mode == "sequential":
            print(f"  social + ScriptedModel, {mode:<10}: {total:7.1f} us/turn in all, of "
                  f"which ScriptedModel {inside:6.1f} us, the rest (engine, world, prompt, "
                  f"parse) {total - inside:6.1f} us ({turns} turns)")
        else:  # the model's time adds up over threads that overlap: no split of wall time
            print(f"  social + ScriptedModel, {mode:<10}: {total:7.1f} us/turn of wall time "
                  f"({turns} turns)")


def overlap(agents: int = 1000, steps: int = 5, concurrency: int = 64,
            latency: float = 0.2) -> None:
    calls = agents * steps
    ideal = calls * latency / concurrency
    print(f"(a) overlap: {agents} agents x {steps} steps, replies take {latency * 1000:.0f} ms, "
          f"concurrency {concurrency}: ideal {ideal:.2f} s")
    with ScriptedServer(seed=0, latency=latency) as server:
        for mode in ("threads", "asyncio"):
            config = load_config(CONFIG, [
                f"sim.agents={agents}", f"sim.steps={steps}", f"sim.engine.mode={mode}",
                f"sim.engine.concurrency={concurrency}", "sim.llm.provider=openai_compatible",
                f"sim.llm.base_url={server.base_url}", f"sim.llm.concurrency={concurrency}"])
            start = time.perf_counter()
            run = run_society(config)
            wall = time.perf_counter() - start
            print(f"  {mode:<8}: {wall:6.2f} s = {wall / ideal:.3f}x ideal "
                  f"({run.llm['calls']} calls, failed turns {run.result.failed}, "
                  f"server peak in flight {server.peak_in_flight})")


if __name__ == "__main__":
    parts = sys.argv[1:] or ["overlap", "overhead"]
    if "overhead" in parts:
        overhead()
    if "overlap" in parts:
        overlap()
