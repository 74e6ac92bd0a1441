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

It checks its options, runs the study (with a progress bar when stderr is a
terminal), prints the table, writes ``fleet_sizing.csv`` and then
``fleet_sizing.png`` (mean wait and abandonment rate against fleet size, one
line per demand rate, with 95% CI bars) into OUT_DIR (default: the current
directory). The plot needs matplotlib (``python -m pip install '.[plot]'``):
without it the study says so in one line before it starts and writes the CSV
only; ``--plot`` insists on the plot (and stops at once, with status 2, when
matplotlib is missing), ``--no-plot`` skips it. Other options: ``--seed N``,
``--replications N``, ``--workers N``, ``--horizon T`` (minutes).
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if importlib.util.find_spec("simulacra") is None:  # a source checkout without `pip install`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from simulacra import BackendUnavailable, ConfigError, SimError
from simulacra.executors import executor_name
from simulacra.parallel import Experiment, config_grid, mean_interval

if __package__:
    from .model import Params, run
else:  # run as a script: python examples/ride_hailing/fleet_sizing.py
    from model import Params, run  # type: ignore[no-redef,import-not-found,unused-ignore]

__all__ = ["KPIS", "PLOT_EXTRA", "check", "main", "plot", "plotting_available", "study",
           "write_csv"]

#: What to install for :func:`plot`.
PLOT_EXTRA = "python -m pip install '.[plot]' in a clone of simulacra"
#: The study's grid, unless told otherwise.
FLEET_SIZES: tuple[int, ...] = (20, 30, 40, 60)
DEMAND_RATES: tuple[float, ...] = (2.0, 4.0)

#: The KPIs summarised per cell (mean and 95% CI half-width).
KPIS: tuple[str, ...] = ("mean_wait", "abandonment_rate", "utilisation", "served")

Row = dict[str, Any]


def study(seed: int = 7, *, fleet_sizes: Sequence[int] = FLEET_SIZES,
          demand_rates: Sequence[float] = DEMAND_RATES, replications: int = 5,
          backend: str = "sequential", max_workers: int | None = None,
          progress: bool | None = False, **params: Any) -> list[Row]:
    """Run the fleet-size x demand grid; one summary row per cell, in grid order.

    Args:
        seed: The master seed of the study.
        fleet_sizes: Numbers of vehicles.
        demand_rates: Trip requests per minute.
        replications: Independent runs per cell (at least 2 for an interval).
        backend: Where replications run (``Experiment.run``'s backend).
        max_workers: Workers of that backend.
        progress: The Experiment's progress bar on stderr: ``None`` when stderr
            is a terminal, ``False`` (the default) never.
        **params: Other model parameters, the same in every cell (e.g. ``horizon``).

    Returns:
        Rows with ``vehicles``, ``demand_rate``, ``replications`` and, per KPI,
        ``<kpi>`` (the mean) and ``<kpi>_ci`` (the 95% half-width).
    """
    cells = config_grid(vehicles=list(fleet_sizes), demand_rate=list(demand_rates))
    configs = [{**cell, **params} for cell in cells]
    experiment = Experiment.from_run(run, configs, master_seed=seed)
    results = experiment.run(replications, backend=backend, max_workers=max_workers,
                             progress=progress)
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


def check(*, fleet_sizes: Sequence[int] = FLEET_SIZES,
          demand_rates: Sequence[float] = DEMAND_RATES, replications: int = 5,
          backend: str = "sequential", max_workers: int | None = None, **params: Any) -> None:
    """Check what :func:`study` would run, with an interval per cell, without running it.

    Raises:
        ConfigError: an invalid option or model parameter; the message names it.
        BackendUnavailable: the dask backend without its extra.
    """
    if isinstance(replications, bool) or not isinstance(replications, int) or replications < 2:
        raise ConfigError(f"fleet_sizing: replications must be an int >= 2 (a confidence "
                          f"interval needs two), got {replications!r}")
    name = executor_name(backend)  # an alias (local, threaded...) is its executor's name
    if name == "dask" and importlib.util.find_spec("distributed") is None:
        raise BackendUnavailable("the dask backend needs dask.distributed: "
                                 "python -m pip install '.[dask]' in a clone of simulacra")
    if max_workers is not None and (isinstance(max_workers, bool)
                                    or not isinstance(max_workers, int) or max_workers < 1):
        raise ConfigError(f"fleet_sizing: workers must be None or an int >= 1, "
                          f"got {max_workers!r}")
    for cell in config_grid(vehicles=list(fleet_sizes), demand_rate=list(demand_rates)):
        Params(**cell, **params)


def plotting_available() -> bool:
    """Whether :func:`plot` can run: matplotlib and its Agg canvas import."""
    try:
        import matplotlib.backends.backend_agg  # noqa: PLC0415  (optional)
        import matplotlib.figure  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


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
    """Check the options, run the study, print the table, write the CSV, then the PNG."""
    parser = argparse.ArgumentParser(prog="python examples/ride_hailing/fleet_sizing.py",
                                     description="Robotaxi fleet sizing study.")
    parser.add_argument("out", nargs="?", default=".", help="output directory")
    parser.add_argument("--seed", type=int, default=7, help="master seed (default 7)")
    parser.add_argument("--backend", default="sequential",
                        help="where replications run (sequential, processes, auto...)")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--replications", type=int, default=5)
    parser.add_argument("--horizon", type=float, default=300.0,
                        help="minutes of each run (default 300)")
    parser.add_argument("--plot", action=argparse.BooleanOptionalAction, default=None,
                        help="draw fleet_sizing.png (needs matplotlib; default: when it is "
                             "installed)")
    args = parser.parse_args(argv)
    options: dict[str, Any] = {"replications": args.replications, "backend": args.backend,
                               "max_workers": args.workers, "horizon": args.horizon}
    try:
        check(**options)
    except (ConfigError, BackendUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    can_plot = args.plot is not False and plotting_available()
    if args.plot and not can_plot:
        print(f"error: the fleet-sizing plot needs matplotlib: {PLOT_EXTRA} "
              "(or --no-plot for the CSV only)", file=sys.stderr)
        return 2
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"error: cannot write to {str(out)!r}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if args.plot is None and not can_plot:
        print(f"note: the plot needs matplotlib ({PLOT_EXTRA}): writing fleet_sizing.csv only",
              file=sys.stderr)
    start = time.perf_counter()
    try:
        rows = study(args.seed, progress=None, **options)
    except (ConfigError, BackendUnavailable) as exc:  # raised before any replication runs
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    table = write_csv(rows, out / "fleet_sizing.csv")  # the data first, then the plot
    print(f"fleet sizing: {len(rows)} cells x {args.replications} replications "
          f"({args.backend}) in {time.perf_counter() - start:.1f} s; means with 95% CI")
    print(f"{'vehicles':>8} {'demand':>7} {'mean wait (min)':>18} {'abandoned':>16}")
    for row in rows:
        print(f"{row['vehicles']:>8} {row['demand_rate']:>7g} "
              f"{row['mean_wait']:>9.2f} ± {row['mean_wait_ci']:<6.2f} "
              f"{100 * row['abandonment_rate']:>7.1f}% ± {100 * row['abandonment_rate_ci']:.1f}")
    if can_plot:
        print(f"wrote {table} and {plot(rows, out / 'fleet_sizing.png')}")
    else:
        print(f"wrote {table}")
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's exit status, no traceback
        print("interrupted", file=sys.stderr)
        sys.exit(130)
