"""Fleet sizing: how many robotaxis does a city of this demand need?

A Monte Carlo study over fleet size x demand rate, run as a
:class:`simulacra.parallel.Experiment` of the ride-hailing model's ``run``
function. Every cell gets ``replications`` independent runs with seeds derived
from the study's master seed, and the KPIs come back as means with 95%
confidence intervals (Student t over replications). Results are in identity
order (config, replication) on every backend, so the study prints and plots
the same numbers sequentially, on threads or on worker processes.

Run it::

    python examples/ride_hailing/fleet_sizing.py [OUT_DIR] [--backend processes]

It prints the table and writes ``fleet_sizing.png`` (mean wait and abandonment
rate against fleet size, one line per demand rate, with 95% CI bars) and
``fleet_sizing.csv`` into OUT_DIR (default: the current directory).
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulacra.parallel import Experiment, config_grid, mean_interval

if __package__:
    from .model import run
else:  # run as a script: python examples/ride_hailing/fleet_sizing.py
    from model import run  # type: ignore[no-redef,import-not-found,unused-ignore]

__all__ = ["KPIS", "plot", "study", "write_csv"]

#: The KPIs summarised per cell (mean and 95% CI half-width).
KPIS: tuple[str, ...] = ("mean_wait", "abandonment_rate", "utilisation", "served")

Row = dict[str, Any]


def study(seed: int = 7, *, fleet_sizes: Sequence[int] = (20, 30, 40, 60),
          demand_rates: Sequence[float] = (2.0, 4.0), replications: int = 5,
          backend: str = "sequential", max_workers: int | None = None,
          **params: Any) -> list[Row]:
    """Run the fleet-size x demand grid; one summary row per cell, in grid order.

    Args:
        seed: The master seed of the study.
        fleet_sizes: Numbers of vehicles.
        demand_rates: Trip requests per minute.
        replications: Independent runs per cell (at least 2 for an interval).
        backend: Where replications run (``Experiment.run``'s backend).
        max_workers: Workers of that backend.
        **params: Other model parameters, the same in every cell (e.g. ``horizon``).

    Returns:
        Rows with ``vehicles``, ``demand_rate``, ``replications`` and, per KPI,
        ``<kpi>`` (the mean) and ``<kpi>_ci`` (the 95% half-width).
    """
    cells = config_grid(vehicles=list(fleet_sizes), demand_rate=list(demand_rates))
    configs = [{**cell, **params} for cell in cells]
    experiment = Experiment.from_run(run, configs, master_seed=seed)
    results = experiment.run(replications, backend=backend, max_workers=max_workers,
                             progress=False)
    rows: list[Row] = []
    for index, cell in enumerate(cells):
        records = [r for r in results.records if r.config_index == index]
        row: Row = {**cell, "replications": len(records)}
        for kpi in KPIS:
            interval = mean_interval([float(r.kpis[kpi]) for r in records])
            row[kpi] = interval.mean
            row[f"{kpi}_ci"] = interval.halfwidth
        rows.append(row)
    return rows


def write_csv(rows: Sequence[Row], path: Path) -> Path:
    """Write the rows as CSV; returns *path*."""
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def plot(rows: Sequence[Row], path: Path) -> Path:
    """Plot mean wait and abandonment rate against fleet size; write a PNG to *path*."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415

    figure = Figure(figsize=(10, 4), dpi=100)
    FigureCanvasAgg(figure)
    wait_axes, abandon_axes = figure.subplots(1, 2)
    for demand in sorted({row["demand_rate"] for row in rows}):
        cell = sorted((r for r in rows if r["demand_rate"] == demand),
                      key=lambda r: r["vehicles"])
        sizes = [r["vehicles"] for r in cell]
        label = f"{demand:g} requests/min"
        wait_axes.errorbar(sizes, [r["mean_wait"] for r in cell],
                           yerr=[r["mean_wait_ci"] for r in cell], marker="o", capsize=3,
                           label=label)
        abandon_axes.errorbar(sizes, [100 * r["abandonment_rate"] for r in cell],
                              yerr=[100 * r["abandonment_rate_ci"] for r in cell], marker="o",
                              capsize=3, label=label)
    wait_axes.set(xlabel="vehicles", ylabel="mean wait (min)", title="Wait to pickup")
    abandon_axes.set(xlabel="vehicles", ylabel="abandoned (%)", title="Abandonment")
    for axes in (wait_axes, abandon_axes):
        axes.grid(visible=True, alpha=0.3)
        axes.legend()
    figure.suptitle("Fleet sizing: means with 95% confidence intervals")
    figure.tight_layout()
    figure.savefig(path)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Run the study, print the table, write the PNG and the CSV."""
    parser = argparse.ArgumentParser(description="Robotaxi fleet sizing study.")
    parser.add_argument("out", nargs="?", default=".", help="output directory")
    parser.add_argument("--backend", default="sequential")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--replications", type=int, default=5)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = study(replications=args.replications, backend=args.backend,
                 max_workers=args.workers, horizon=300.0)
    print(f"{'vehicles':>8} {'demand':>7} {'mean wait (min)':>18} {'abandoned':>16}")
    for row in rows:
        print(f"{row['vehicles']:>8} {row['demand_rate']:>7g} "
              f"{row['mean_wait']:>9.2f} ± {row['mean_wait_ci']:<6.2f} "
              f"{100 * row['abandonment_rate']:>7.1f}% ± {100 * row['abandonment_rate_ci']:.1f}")
    print(f"wrote {plot(rows, out / 'fleet_sizing.png')} and "
          f"{write_csv(rows, out / 'fleet_sizing.csv')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
