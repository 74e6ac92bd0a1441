"""What automatic checkpoints cost a society run: the same run with them and without.

Two measures: the wall time of whole runs with and without (noisy on a
shared machine: a run waits for every thread), and, inside the runs with
checkpoints, the time the checkpoints themselves took (engine state, pickling,
fsync; ``summary.json["checkpoints"]``) as a share of that run's time, which
does not depend on another run's noise.

``run.checkpoint_every`` unset means automatic checkpoints (see
``simulacra.societies._run._drive``): the first after CHECKPOINT_FIRST_S
seconds, then whenever they would take at most CHECKPOINT_SHARE of the run.
This script runs the social example both ways, alternating, and prints the
median wall time of each and the overhead.

    python bench/society_checkpoints.py [--rounds 3] [KEY.PATH=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import simulacra
from simulacra.societies import _run as _rounds_run

CONFIG = Path(__file__).resolve().parents[1] / "examples" / "social" / "config.yaml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("overrides", nargs="*", default=["sim.agents=200", "sim.steps=40"])
    args = parser.parse_args()
    first = _rounds_run.CHECKPOINT_FIRST_S
    times: dict[str, list[float]] = {"automatic": [], "off": []}
    shares: list[float] = []
    for index in range(args.rounds):
        for mode in ("automatic", "off") if index % 2 == 0 else ("off", "automatic"):
            _rounds_run.CHECKPOINT_FIRST_S = first if mode == "automatic" else float("inf")
            out = Path(tempfile.mkdtemp()) / "run"
            config = simulacra.load_config(CONFIG, args.overrides)
            start = time.perf_counter()
            simulacra.run_society(config, out=out)
            times[mode].append(time.perf_counter() - start)
            stats = json.loads((out / "summary.json").read_text())["checkpoints"]
            if mode == "automatic":
                shares.append(stats["seconds"] / times[mode][-1])
            print(f"round {index + 1} {mode:>9}: {times[mode][-1]:.3f} s, "
                  f"{stats['written']} checkpoints taking {stats['seconds']:.3f} s", flush=True)
    auto, off = statistics.median(times["automatic"]), statistics.median(times["off"])
    print(f"{' '.join(args.overrides)}: median {auto:.3f} s with automatic checkpoints, "
          f"{off:.3f} s without: overhead {100 * (auto / off - 1):+.1f}%; checkpoints took "
          f"{100 * statistics.median(shares):.1f}% of the runs with them (median)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
