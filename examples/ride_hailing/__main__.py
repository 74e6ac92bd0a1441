"""The SimPy-style fleet demo: ``python examples/ride_hailing`` runs a robotaxi fleet, prints KPIs.

It is the README's example of a SimPy-style model (processes, resources, stores);
the flagship demo is the society of LLM agents in ``examples/social``.

It runs the model once per dispatch policy with the same seed and prints the
parameters and a KPI table, with ``rich`` when it is installed and as plain
text otherwise. Options: ``--seed N``, ``--vehicles N``, ``--demand-rate X``,
``--horizon T``, ``--policy NAME`` (run only that policy), ``--plain``,
``--monitors FILE`` (write the idle vehicles, the charging stations and the
waits over time of every policy's run to a monitor file, for ``simulacra report``).
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

from simulacra import ConfigError, MonitorSet

try:
    from rich import box
    from rich.console import Console
    from rich.table import Table
except ImportError:  # rich is optional: fall back to plain text
    HAVE_RICH = False
else:
    HAVE_RICH = True

if __package__:
    from .model import POLICIES, Params, run
else:  # `python examples/ride_hailing`: this directory is on sys.path, not its parent
    from model import POLICIES, Params, run  # type: ignore[no-redef,import-not-found,unused-ignore]

#: KPI name, how to show its value, what it means.
ROWS: list[tuple[str, str, str]] = [
    ("requests", "int", "trip requests made"),
    ("served", "int", "trips completed (dropped off)"),
    ("abandoned", "int", "requests that gave up waiting"),
    ("open", "int", "still waiting or riding at the end"),
    ("abandonment_rate", "pct", "abandoned / requests"),
    ("mean_wait", "min", "request to pickup"),
    ("utilisation", "pct", "vehicle time on pickups and trips"),
    ("charges", "int", "charging sessions"),
    ("mean_charger_wait", "min", "time queued for a charger"),
    ("charger_utilisation", "pct", "chargers busy"),
]


def _show(value: float | int, how: str) -> str:
    if how == "int":
        return f"{int(value):,}"
    if how == "pct":
        return f"{value:.1%}"
    return f"{value:.2f} min"


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    defaults = Params()
    parser = argparse.ArgumentParser(
        prog="python examples/ride_hailing",
        description="Run the robotaxi fleet once per dispatch policy and print its KPIs.",
    )
    parser.add_argument("--seed", type=int, default=7, help="master seed (default 7)")
    parser.add_argument("--vehicles", type=int, default=defaults.vehicles)
    parser.add_argument("--demand-rate", type=float, default=defaults.demand_rate,
                        help="requests per minute")
    parser.add_argument("--horizon", type=float, default=defaults.horizon, help="minutes")
    parser.add_argument("--policy", choices=sorted(POLICIES), help="run only this policy")
    parser.add_argument("--plain", action="store_true", help="plain text, even with rich")
    parser.add_argument("--monitors", metavar="FILE", default=None,
                        help="write each policy's idle vehicles, charging stations and waits "
                             "over time to this monitor file (for `simulacra report`)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo and print its report; return the exit status."""
    args = _parse(argv)
    try:
        params = Params(vehicles=args.vehicles, demand_rate=args.demand_rate,
                        horizon=args.horizon)
        if args.monitors is not None and not Path(args.monitors).resolve().parent.is_dir():
            raise ConfigError(f"ride_hailing: --monitors {args.monitors}: the directory "
                              f"{Path(args.monitors).resolve().parent} does not exist")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    policies = [args.policy] if args.policy else list(POLICIES)
    results: dict[str, dict[str, float | int]] = {}
    seconds: dict[str, float] = {}
    monitors = MonitorSet() if args.monitors is not None else None
    for policy in policies:
        start = time.perf_counter()
        results[policy] = run(seed=args.seed, vehicles=params.vehicles,
                              demand_rate=params.demand_rate, horizon=params.horizon,
                              policy=policy, monitors=monitors)
        seconds[policy] = time.perf_counter() - start
    if monitors is not None:
        monitors.save(args.monitors)

    title = "simulacra: a robotaxi fleet on a ring of city zones"
    settings = [
        ("seed", str(args.seed)),
        ("vehicles", str(params.vehicles)),
        ("zones", f"{params.zones} on a ring, travel {params.min_travel:g} + "
                  f"{params.hop_time:g} per hop (min)"),
        ("demand", f"{params.demand_rate:g} requests/min for {params.horizon:g} min, "
                   f"patience {params.patience:g} min"),
        ("charging", f"{params.stations} stations x {params.chargers} chargers, range "
                     f"{params.battery_range:g} min, recharge below {params.recharge_below:.0%}"),
        ("policies", ", ".join(f"{p} (d={params.d})" if p == "power_of_d" else p
                               for p in policies)),
    ]
    columns = [f"{p} (d={params.d})" if p == "power_of_d" else p for p in policies]
    rows = [[name, *(_show(results[p][name], how) for p in policies), meaning]
            for name, how, meaning in ROWS]
    timing = ", ".join(f"{p} {seconds[p]:.2f} s" for p in policies)
    footer = f"wall time: {timing}. Same seed, same KPIs, bit for bit."

    if HAVE_RICH and not args.plain:
        _print_rich(title, settings, columns, rows, footer)
    else:
        _print_plain(title, settings, columns, rows, footer)
    if monitors is not None:
        print(f"monitors: {len(monitors.series)} series and {len(monitors.samples)} tallies "
              f"written to {args.monitors} (simulacra report)")
    return 0


def _print_plain(title: str, settings: list[tuple[str, str]], columns: list[str],
                 rows: list[list[str]], footer: str) -> None:
    print(title)
    print("=" * len(title))
    print()
    width = max(len(key) for key, _ in settings)
    for key, value in settings:
        print(f"  {key:<{width}}  {value}")
    print()
    header = ["KPI", *columns, "meaning"]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    line = "  ".join(
        cell.ljust(w) if i in (0, len(header) - 1) else cell.rjust(w)
        for i, (cell, w) in enumerate(zip(header, widths, strict=True))
    )
    print(line.rstrip())
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(
            cell.ljust(w) if i in (0, len(row) - 1) else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip())
    print()
    print(footer)


def _print_rich(title: str, settings: list[tuple[str, str]], columns: list[str],
                rows: list[list[str]], footer: str) -> None:
    console = Console(highlight=False)
    if not console.is_terminal:  # a file or a pipe: never wrap the table
        console.width = max(console.width, 100)
    console.print(f"[bold]{title}[/bold]")
    console.print()
    params = Table(box=None, show_header=False, padding=(0, 2, 0, 2))
    params.add_column(style="cyan", no_wrap=True)
    params.add_column()
    for key, value in settings:
        params.add_row(key, value)
    console.print(params)
    console.print()
    kpis = Table(box=box.SIMPLE_HEAD, title="KPIs", title_justify="left")
    kpis.add_column("KPI", style="bold", no_wrap=True)
    for column in columns:
        kpis.add_column(column, justify="right", no_wrap=True)
    kpis.add_column("meaning", style="dim")
    for row in rows:
        kpis.add_row(*row)
    console.print(kpis)
    console.print(f"[dim]{footer}[/dim]")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's exit status, no traceback
        print("interrupted", file=sys.stderr)
        sys.exit(130)
