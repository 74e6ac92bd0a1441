"""Engine overhead per agent-step: a whole society run against the bare work of its turns.

The social demo (scripted model, sequential) is run twice in one process:

* **bare**: the same world, agents and model, driven by a plain loop that does
  only what a turn is made of: observe, prompt, call the model, parse,
  resolve (in id order; no recordings, no call log, no events file, no
  digests, no checkpoints, no telemetry);
* **engine**: ``run_society`` on the same config into a fresh run directory:
  the round engine with everything it writes (recordings in groups, the call
  log, the events, telemetry, checkpoints -- automatic, as the demo's config
  has them, or as ``--set run.checkpoint_every=2`` says --, digests, the
  summary).

The engine overhead per agent-step is (engine - bare) / agent-steps: what
simulacra adds on top of the user's world, the agents' prompts and the model.
``--replay`` also replays the engine's run directory (recorded completions,
0 calls) and reports the same figure for it against the bare loop less the
model's time.

    python bench/society_overhead.py                   # 10,000 agents x 10 steps
    python bench/society_overhead.py --agents 2000 --steps 5 --rounds 3 --replay

Each figure is the median of ``--rounds`` rounds, the bare and the engine
run alternating (a loaded machine slows both alike).
"""

from __future__ import annotations

import argparse
import gc
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from simulacra.agents import ActionSpec  # noqa: E402
from simulacra.societies import (  # noqa: E402
    build_model,
    build_society,
    load_config,
    replay_run,
    run_society,
)

CONFIG = ROOT / "examples" / "social" / "config.yaml"


def _config(agents: int, steps: int, extra: tuple[str, ...] = ()) -> Any:
    return load_config(CONFIG, [f"sim.agents={agents}", f"sim.steps={steps}",
                                "sim.engine.mode=sequential", *extra])


def bare(agents: int, steps: int) -> tuple[float, float, int]:
    """The plain loop: (seconds in all, seconds in the model, agent-steps)."""
    config = _config(agents, steps)
    start = time.perf_counter()
    world, people = build_society(config)
    model = build_model(config)
    in_model = 0.0
    clock = time.perf_counter

    class Timed:
        def complete(self, request: Any, *, site: Any = None) -> Any:
            nonlocal in_model
            t0 = clock()
            try:
                return model.complete(request, site=site)
            finally:
                in_model += clock() - t0

    timed = Timed()
    for agent in people:
        agent.bind(timed)  # type: ignore[attr-defined]
    turns = 0
    for step in range(steps):
        spec = ActionSpec(step, float(step))
        snapshot = world.snapshot()
        actions = []
        for agent in people:
            agent.observe(world.observation_for(agent.id, snapshot))
            try:
                actions.append((agent.id, True, agent.act(spec)))
            except Exception as exc:  # a failed turn, as the engine has them
                actions.append((agent.id, False, exc))
        with world.lock:
            for who, ok, value in actions:
                if ok:
                    world.resolve(who, value, step=step, time=float(step))
                else:
                    world.failed(who, value, step=step, time=float(step))
        turns += len(people)
    return time.perf_counter() - start, in_model, turns


def engine(agents: int, steps: int, where: Path,
           extra: tuple[str, ...] = ()) -> tuple[float, int]:
    """run_society into *where*, with the dotted overrides *extra*: (seconds, agent-steps)."""
    config = _config(agents, steps, extra)
    start = time.perf_counter()
    run = run_society(config, out=where)
    took = time.perf_counter() - start
    return took, int(run.failures["turns"])


def replay(where: Path) -> float:
    start = time.perf_counter()
    replay_run(where)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--replay", action="store_true")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a dotted override of the engine's run (run.checkpoint_every=2); "
                             "the default is the demo's config: automatic checkpoints")
    args = parser.parse_args(argv)
    rows: dict[str, list[float]] = {"bare": [], "model": [], "engine": [], "replay": []}
    turns = 0
    for _ in range(args.rounds):
        gc.collect()
        took, in_model, turns = bare(args.agents, args.steps)
        rows["bare"].append(took)
        rows["model"].append(in_model)
        where = Path(tempfile.mkdtemp(prefix="overhead-")) / "run"
        try:
            gc.collect()
            took, done = engine(args.agents, args.steps, where, tuple(args.set))
            if done != turns:
                raise SystemExit(f"the engine ran {done} agent-steps, the bare loop {turns}")
            rows["engine"].append(took)
            if args.replay:
                gc.collect()
                rows["replay"].append(replay(where))
        finally:
            shutil.rmtree(where.parent, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in rows.items() if v}
    us = 1e6 / turns
    print(f"social demo, {args.agents:,} agents x {args.steps} steps = {turns:,} agent-steps, "
          f"scripted, sequential; median of {args.rounds}")
    print(f"  bare loop (observe, prompt, model, parse, resolve): {med['bare']:7.2f} s "
          f"= {med['bare'] * us:6.1f} us/agent-step (model alone {med['model'] * us:5.1f})")
    print(f"  run_society (the engine, everything written):       {med['engine']:7.2f} s "
          f"= {med['engine'] * us:6.1f} us/agent-step")
    print(f"  engine overhead: {(med['engine'] - med['bare']) * us:6.1f} us/agent-step "
          f"(target 50); rounds {[round(x, 2) for x in rows['engine']]} vs "
          f"{[round(x, 2) for x in rows['bare']]}")
    if args.replay:
        work = med["bare"] - med["model"]
        print(f"  replay (recorded, 0 calls): {med['replay']:7.2f} s = "
              f"{med['replay'] * us:6.1f} us/agent-step; overhead over the bare loop without "
              f"its model {(med['replay'] - work) * us:6.1f} us/agent-step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
