"""``python examples/contagion``: cascade-size distributions of Gai-Kapadia contagion.

For each average degree it runs one cascade per seed and prints the share of
seeds with contagion (a cascade reaching more than 5% of the banks), the mean
extent of those cascades, and a histogram of cascade sizes. Options:
``--banks N``, ``--degree Z`` (repeatable), ``--seeds N``, ``--backend NAME``
(``local``, ``threaded`` or ``processes``: the numbers do not change),
``--capital-ratio X``.
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
    from .model import build, cascade_distribution
else:  # `python examples/contagion`: this directory is on sys.path, not its parent
    from model import (  # type: ignore[no-redef,import-not-found,unused-ignore]
        build,
        cascade_distribution,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python examples/contagion",
                                     description="Gai-Kapadia contagion: cascade sizes over seeds")
    parser.add_argument("--banks", type=int, default=100)
    parser.add_argument("--degree", type=float, action="append",
                        help="average degree (repeatable; default 1, 2, 4, 8)")
    parser.add_argument("--seeds", type=int, default=20, help="runs per degree (seeds 0..N-1)")
    parser.add_argument("--backend", default="local")
    parser.add_argument("--capital-ratio", type=float, default=0.04)
    args = parser.parse_args(argv)
    degrees = args.degree or [1.0, 2.0, 4.0, 8.0]
    try:  # every option is checked before the first cascade runs (building is cheap)
        if args.seeds < 1:
            raise ConfigError(f"seeds must be an int >= 1, got {args.seeds}")
        for degree in degrees:
            build(0, banks=args.banks, degree=degree, capital_ratio=args.capital_ratio,
                  backend=args.backend)
    except (ConfigError, BackendUnavailable) as exc:  # BackendUnavailable: an extra is missing
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"Gai-Kapadia contagion: {args.banks} banks, capital ratio {args.capital_ratio:.0%}, "
          f"interbank share 20%, zero recovery; seeds 0-{args.seeds - 1}; "
          f"backend {args.backend!r}")
    print(f"{'degree':>6}  {'contagion':>9}  {'extent':>6}  {'mean':>6}  "
          f"{'0-5%':>5} {'5-25%':>5} {'25-50%':>6} {'50-75%':>6} {'75-100%':>7}")
    start = time.perf_counter()
    try:
        for degree in degrees:
            d = cascade_distribution(range(args.seeds), banks=args.banks, degree=degree,
                                     capital_ratio=args.capital_ratio, backend=args.backend)
            extent = d["extent_given_contagion"]
            h = d["histogram"]
            print(f"{degree:>6g}  {d['contagion_frequency']:>9.0%}  "
                  f"{'-' if extent is None else f'{extent:.0%}':>6}  {d['mean']:>6.1%}  "
                  f"{h['0-5%']:>5} {h['5-25%']:>5} {h['25-50%']:>6} {h['50-75%']:>6} "
                  f"{h['75-100%']:>7}")
    except (ConfigError, BackendUnavailable) as exc:  # e.g. a backend whose extra is missing
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's exit status, no traceback
        print("interrupted", file=sys.stderr)
        sys.exit(130)
