"""What a large run's recordings cost its own thread: written by a child process or here.

Runs the social demo (scripted model, sequential) three ways, alternating, in one
process:

* **child**: the recordings written by a child process (``RecordingStore.hold(
  offload=True)``, what ``run_society`` does when a step is expected to make
  ``OFFLOAD_CALLS`` calls or more): the run's thread only lists each call;
* **thread**: written by the store's writer thread in this process (what it does
  for smaller runs): encoding, hashing and packing on the run's thread;
* **off**: ``run.record=false``, nothing recorded (the floor).

For each it prints the median wall time and the run thread's CPU time
(``time.thread_time``: the writer thread and the child are not in it) per
agent-step, and what recording adds over **off**.

    python bench/recording_offload.py                  # 10,000 agents x 3 steps, 3 rounds
    python bench/recording_offload.py --agents 5000 --steps 4 --rounds 5
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from simulacra.societies import _run, load_config, run_society  # noqa: E402

CONFIG = ROOT / "examples" / "social" / "config.yaml"
MODES = ("child", "thread", "off")


def one(mode: str, agents: int, steps: int) -> tuple[float, float]:
    """One run in *mode*: (wall seconds, the run thread's CPU seconds)."""
    _run.OFFLOAD_CALLS = 0 if mode == "child" else 10**12  # type: ignore[misc]
    extra = ["run.record=false"] if mode == "off" else []
    config = load_config(CONFIG, [f"sim.agents={agents}", f"sim.steps={steps}",
                                  "sim.engine.mode=sequential", *extra])
    where = Path(tempfile.mkdtemp(prefix="offload-bench-"))
    try:
        gc.collect()
        start, cpu = time.perf_counter(), time.thread_time()
        run_society(config, out=where / "run")
        return time.perf_counter() - start, time.thread_time() - cpu
    finally:
        shutil.rmtree(where, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    rows: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
    for index in range(args.rounds):
        order = MODES if index % 2 == 0 else MODES[::-1]
        for mode in order:
            rows[mode].append(one(mode, args.agents, args.steps))
    us = 1e6 / (args.agents * args.steps)
    wall = {m: statistics.median(w for w, _ in rows[m]) * us for m in MODES}
    cpu = {m: statistics.median(c for _, c in rows[m]) * us for m in MODES}
    print(f"social demo, {args.agents:,} agents x {args.steps} steps, scripted, sequential; "
          f"median of {args.rounds}, us per agent-step")
    for mode in MODES:
        extra = ("" if mode == "off" else
                 f"; recording adds {wall[mode] - wall['off']:5.1f} wall, "
                 f"{cpu[mode] - cpu['off']:5.1f} CPU")
        print(f"  {mode:>6}: wall {wall[mode]:6.1f}, run thread CPU {cpu[mode]:6.1f}{extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
