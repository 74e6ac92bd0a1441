"""What recording the model's completions costs a society run: bytes per call and time.

Runs the social example (scripted model) with ``run.record`` on and off,
alternating, and prints:

- the size of ``llm_recordings.sqlite`` per recorded call, and the whole run
  directory's size (``RunDirectory.size_bytes()``);
- the median wall time and CPU time (all threads) of whole runs with and
  without recording, and the engine's own wall time (``summary.json["wall_s"]``),
  each as a same-run ratio and as microseconds per call (the machine is shared:
  only same-run ratios are stable, and CPU time moves less than wall time).

    python bench/recording_size.py [--rounds 5] [KEY.PATH=VALUE ...]

The scripted model answers in microseconds, so this is the worst case: each
call is committed before the model wrapper returns (a crash loses no finished
call), and the commit, the SQL and the compression cost about as much as the
scripted call itself. Against a real model (hundreds of milliseconds a call)
the same cost is well under 1%.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import simulacra
from simulacra.societies import RunDirectory

CONFIG = Path(__file__).resolve().parents[1] / "examples" / "social" / "config.yaml"


def _run(overrides: list[str], record: bool, root: Path,
         index: int) -> tuple[float, float, float, Path]:
    """One run: its wall time, its CPU time (all threads), the engine's wall time, its folder."""
    out = root / f"run-{index}-{'rec' if record else 'norec'}"
    config = simulacra.load_config(CONFIG, [*overrides, f"run.record={str(record).lower()}"])
    start, cpu = time.perf_counter(), time.process_time()
    simulacra.run_society(config, out=out)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    engine = float(json.loads((out / "summary.json").read_text())["wall_s"])
    return wall, cpu, engine, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("overrides", nargs="*", default=[])
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="simulacra-recording-bench-"))
    runs: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
    sizes = None
    try:
        _run(args.overrides, True, root, -1)  # warm up: imports, the factory, the page cache
        for index in range(args.rounds):
            for record in (True, False) if index % 2 == 0 else (False, True):
                wall, cpu, engine, out = _run(args.overrides, record, root, index)
                runs[record].append((wall, cpu, engine))
                if record and sizes is None:
                    calls = json.loads((out / "summary.json").read_text())["llm"]["calls"]
                    store = (out / "llm_recordings.sqlite").stat().st_size
                    sizes = (calls, store, RunDirectory(out).size_bytes())
                shutil.rmtree(out)
                print(f"round {index + 1} {'recorded' if record else 'unrecorded':>10}: "
                      f"{wall:.3f} s wall, {cpu:.3f} s CPU, engine {engine:.3f} s", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if sizes is None:
        return 1
    calls, store, whole = sizes
    print(f"{' '.join(args.overrides) or 'defaults'}: {calls} calls; recordings {store:,} bytes "
          f"= {store / calls:,.0f} bytes per call; run directory {whole:,} bytes")
    for i, what in enumerate(("run wall", "run CPU", "engine wall")):
        rec = statistics.median(r[i] for r in runs[True])
        norec = statistics.median(r[i] for r in runs[False])
        print(f"median {what}: {rec:.3f} s recorded, {norec:.3f} s unrecorded: "
              f"{rec / norec:.2f}x ({1e6 * (rec - norec) / calls:,.0f} us per call)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
