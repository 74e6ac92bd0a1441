"""``python examples/sir``: an SIR epidemic on a seeded contact network.

Prints the S/I/R curve, the final size and the run digest. Options:
``--people N``, ``--degree Z``, ``--beta B``, ``--gamma G``, ``--steps N``,
``--seed S``, ``--backend NAME`` (``local``, ``threaded``, ``processes``,
``async``...: the numbers and the digest do not change).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Sequence
from pathlib import Path

if importlib.util.find_spec("simulacra") is None:  # a source checkout without `pip install`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from simulacra import BackendUnavailable, ConfigError

if __package__:
    from .model import curve, run
else:  # `python examples/sir`: this directory is on sys.path, not its parent
    from model import curve, run  # type: ignore[no-redef,import-not-found,unused-ignore]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python examples/sir",
                                     description="SIR epidemic on a seeded contact network")
    parser.add_argument("--people", type=int, default=500)
    parser.add_argument("--degree", type=float, default=6.0)
    parser.add_argument("--beta", type=float, default=0.1)
    parser.add_argument("--gamma", type=float, default=0.2)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seed", default="0")
    parser.add_argument("--backend", default="local")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        result = run(args.seed, steps=args.steps, backend=args.backend, people=args.people,
                     degree=args.degree, beta=args.beta, gamma=args.gamma)
    except (ConfigError, BackendUnavailable) as exc:  # checked before the epidemic runs
        print(f"error: {exc}", file=sys.stderr)
        return 2
    points = curve(result)
    print(f"SIR: {args.people} people, mean degree {args.degree:g}, beta {args.beta:g}, "
          f"gamma {args.gamma:g}, seed {args.seed!r}, backend {args.backend!r}")
    print(f"{'step':>4}  {'S':>5}  {'I':>5}  {'R':>5}")
    for t, (s, i, r) in enumerate(points):
        if t % 5 == 0 or t == len(points) - 1:
            print(f"{t:>4}  {s:>5}  {i:>5}  {r:>5}")
    s, i, r = points[-1]
    print(f"final size (ever infected): {args.people - s} of {args.people} "
          f"({(args.people - s) / args.people:.0%}); digest {result.digest[:16]}")
    print(f"({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's exit status, no traceback
        print("interrupted", file=sys.stderr)
        sys.exit(130)
