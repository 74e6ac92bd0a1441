"""What OpenTelemetry tracing costs a society run: the same run with ``run.trace.otel`` off and on.

Off (the default) installs no wrapper and imports no OpenTelemetry module: a
run pays nothing per turn or call (``tests/societies/test_otel.py`` checks the
imports). On (``jsonl``), every step, turn and model call is a span written to
``otel_spans.jsonl``. The social demo runs both ways, alternating, in one
process; each row is the median of its rounds, per agent-step.

    python bench/society_tracing.py [--rounds 3] [KEY.PATH=VALUE ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import simulacra

CONFIG = Path(__file__).resolve().parents[1] / "examples" / "social" / "config.yaml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("overrides", nargs="*",
                        default=["sim.agents=300", "sim.steps=10", "sim.engine.mode=sequential"])
    args = parser.parse_args()
    times: dict[str, list[float]] = {"off": [], "jsonl": []}
    turns = 0
    for index in range(args.rounds):
        for mode in ("off", "jsonl") if index % 2 == 0 else ("jsonl", "off"):
            config = simulacra.load_config(CONFIG, [*args.overrides, f"run.trace.otel={mode}"])
            out = Path(tempfile.mkdtemp()) / "run"
            start = time.perf_counter()
            run = simulacra.run_society(config, out=out)
            times[mode].append(time.perf_counter() - start)
            turns = run.result.steps * config.sim.agents
            print(f"round {index + 1} {mode:>5}: {times[mode][-1]:.3f} s", flush=True)
    off, on = statistics.median(times["off"]), statistics.median(times["jsonl"])
    loaded = sorted(name for name in sys.modules if name.startswith("opentelemetry"))
    print(f"\n{' '.join(args.overrides)}, {turns} agent-steps, medians of {args.rounds}")
    print(f"  off:   {off:.3f} s  {off / turns * 1e6:8.1f} us an agent-step")
    print(f"  jsonl: {on:.3f} s  {on / turns * 1e6:8.1f} us an agent-step "
          f"(+{(on - off) / turns * 1e6:.1f} us, {on / off:.2f}x)")
    print(f"  opentelemetry modules loaded by the end: {len(loaded)} (by the runs with it on)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
