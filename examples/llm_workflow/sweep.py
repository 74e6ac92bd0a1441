"""Capacity planning: sweep servers x batch size x agent concurrency, and plot it.

:func:`sweep` runs the grid as a :class:`simulacra.parallel.Experiment` of the
model's ``run`` function, with common random numbers: replication *r* of every
configuration gets the same seed, and tasks draw from per-task streams, so all
configurations see the same tasks and differ only by capacity. Results come
back in identity order on every backend, so the sweep is the same run
sequentially or on processes. :func:`plot` draws p95 latency and serving cost
per task against concurrency, one panel per server count and one line per
batch size (with 95% confidence intervals when there are replications), with
matplotlib's Agg canvas (no display, no global backend switch), and writes a PNG.

:func:`run_sweep` is the command: ``python examples/llm_workflow --sweep DIR`` or
``python examples/llm_workflow/sweep.py [DIR]``. It checks every option first,
then runs the sweep (with a progress bar when stderr is a terminal), prints the
table, writes ``capacity_sweep.csv`` and then plots ``capacity_sweep.png``. The
plot needs matplotlib (``python -m pip install '.[plot]'``): without it the sweep
says so in one line before it starts and writes the CSV only; ``--plot``
insists on the plot (and stops at once, with status 2, when matplotlib is
missing), ``--no-plot`` skips it.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if importlib.util.find_spec("simulacra") is None:  # a source checkout without `pip install`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from simulacra import BackendUnavailable, ConfigError, SimError
from simulacra.executors import executor_name
from simulacra.parallel import Experiment, Offloader, config_grid, mean_interval

if __package__:
    from .model import KPIS, Params, run
else:  # loaded as a top-level module (python examples/llm_workflow)
    from model import (  # type: ignore[no-redef,import-not-found,unused-ignore]
        KPIS,
        Params,
        run,
    )

__all__ = ["AXES", "PLOT_EXTRA", "check", "main", "plot", "plotting_available", "run_sweep",
           "sweep", "write_csv"]

#: What to install for :func:`plot`.
PLOT_EXTRA = "python -m pip install '.[plot]' in a clone of simulacra"

#: The swept parameters, in the order of the grid (and of the result rows).
AXES: tuple[str, ...] = ("servers", "batch_size", "concurrency")
#: KPIs whose confidence interval half-width is kept (``<kpi>_halfwidth``).
PLOTTED: tuple[str, ...] = ("p95_latency", "serving_cost_per_task")

Row = dict[str, Any]


def sweep(seed: int = 7, *, servers: Sequence[int] = (1, 2, 4),
          batch_sizes: Sequence[int] = (1, 4, 8), concurrency: Sequence[int] = (4, 16, 64),
          replications: int = 1, experiment_backend: str = "sequential",
          experiment_workers: int | None = None, progress: bool | None = False,
          **params: Any) -> list[Row]:
    """Run every configuration of the grid; one row of parameters and mean KPIs each.

    Args:
        seed: The master seed of the study.
        servers: LLM server counts.
        batch_sizes: Batch sizes.
        concurrency: Agent concurrency limits.
        replications: Replications per configuration; with two or more, the
            rows also hold 95% confidence half-widths of the plotted KPIs.
        experiment_backend: Where the replications run (``Experiment.run``'s
            backend: ``"sequential"``, ``"processes"``, ``"auto"``...). The
            rows are the same on every backend.
        experiment_workers: Workers of that backend.
        progress: The Experiment's progress bar on stderr: ``None`` when stderr
            is a terminal, ``False`` (the default) never.
        **params: Other model parameters (and ``backend``/``workers`` for
            the planner's pool), the same for every configuration.

    Returns:
        Rows in grid order (servers, then batch size, then concurrency): the
        axes, ``replications``, and the mean of every KPI over replications.

    Raises:
        ConfigError: an invalid parameter.
        ReplicationFailed: a run failed (its error is the cause).
    """
    cells = config_grid(servers=list(servers), batch_size=list(batch_sizes),
                        concurrency=list(concurrency))
    configs = [{**cell, **params} for cell in cells]
    study = Experiment.from_run(run, configs, master_seed=seed, common_random_numbers=True)
    results = study.run(replications, backend=experiment_backend,
                        max_workers=experiment_workers, progress=progress)
    rows: list[Row] = []
    for index, cell in enumerate(cells):
        records = [record for record in results.records if record.config_index == index]
        row: Row = {**cell, "replications": len(records)}
        for kpi in KPIS:
            interval = mean_interval([float(record.kpis[kpi]) for record in records])
            row[kpi] = interval.mean
            if kpi in PLOTTED:
                row[f"{kpi}_halfwidth"] = interval.halfwidth
        rows.append(row)
    return rows


def check(*, servers: Sequence[int] = (1, 2, 4), batch_sizes: Sequence[int] = (1, 4, 8),
          concurrency: Sequence[int] = (4, 16, 64), replications: int = 1,
          experiment_backend: str = "sequential", experiment_workers: int | None = None,
          backend: str = "inline",
          workers: int | None = None, **params: Any) -> None:
    """Check what :func:`sweep` would run, without running it (every config is cheap to check).

    Raises:
        ConfigError: an invalid parameter; the message names it.
        BackendUnavailable: the dask backend without its extra.
    """
    if isinstance(replications, bool) or not isinstance(replications, int) or replications < 1:
        raise ConfigError(f"llm_workflow: replications must be an int >= 1, got {replications!r}")
    name = executor_name(experiment_backend)  # an alias (local, threaded...) is its executor's name
    if name == "dask" and importlib.util.find_spec("distributed") is None:
        raise BackendUnavailable("the dask backend needs dask.distributed: "
                                 "python -m pip install '.[dask]' in a clone of simulacra")
    if experiment_workers is not None and (isinstance(experiment_workers, bool)
                                           or not isinstance(experiment_workers, int)
                                           or experiment_workers < 1):
        raise ConfigError(f"llm_workflow: sweep workers must be None or an int >= 1, "
                          f"got {experiment_workers!r}")
    for cell in config_grid(servers=list(servers), batch_size=list(batch_sizes),
                            concurrency=list(concurrency)):
        Params(**cell, **params)
    with Offloader(backend, workers):  # checks the planner's pool; starts no worker
        pass


def plotting_available() -> bool:
    """Whether :func:`plot` can run: matplotlib and its Agg canvas import."""
    try:
        import matplotlib.backends.backend_agg  # noqa: PLC0415  (optional)
        import matplotlib.figure  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def write_csv(rows: Sequence[Row], path: str | Path) -> Path:
    """Write the rows of :func:`sweep` as CSV; return the path."""
    target = Path(path)
    with target.open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]) if rows else [*AXES, *KPIS])
        writer.writeheader()
        writer.writerows(rows)
    return target


def plot(rows: Sequence[Row], out_dir: str | Path, *,
         name: str = "capacity_sweep.png") -> Path:
    """Plot p95 latency and serving cost per task against concurrency; return the PNG's path.

    Args:
        rows: Rows of :func:`sweep`.
        out_dir: The directory to write to (made if missing).
        name: The file name.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415  (optional)
    from matplotlib.figure import Figure  # noqa: PLC0415
    from matplotlib.ticker import NullLocator  # noqa: PLC0415

    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    server_counts = sorted({row["servers"] for row in rows})
    batch_sizes = sorted({row["batch_size"] for row in rows})
    figure = Figure(figsize=(4.0 * len(server_counts), 6.5), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(2, len(server_counts), squeeze=False, sharex=True, sharey="row")
    metrics = (("p95_latency", "p95 task latency (s)"),
               ("serving_cost_per_task", "serving cost per task ($)"))
    for column, n_servers in enumerate(server_counts):
        for line, (metric, label) in enumerate(metrics):
            ax = axes[line][column]
            for batch_size in batch_sizes:
                points = sorted((row["concurrency"], row[metric], row[f"{metric}_halfwidth"])
                                for row in rows
                                if row["servers"] == n_servers and row["batch_size"] == batch_size)
                errors = [0.0 if math.isnan(h) else h for _, _, h in points]
                ax.errorbar([x for x, _, _ in points], [y for _, y, _ in points],
                            yerr=errors if any(errors) else None, marker="o", capsize=3,
                            label=f"batch {batch_size}")
            ax.set_xscale("log", base=2)
            ticks = sorted({row["concurrency"] for row in rows})
            ax.set_xticks(ticks, [str(tick) for tick in ticks])
            ax.xaxis.set_minor_locator(NullLocator())
            if metric == "p95_latency":
                ax.set_yscale("log")
                ax.set_title(f"{n_servers} server{'s' if n_servers > 1 else ''}")
            else:
                ax.set_xlabel("agent concurrency")
            if column == 0:
                ax.set_ylabel(label)
                if line == 0:
                    ax.legend(fontsize="small")
            ax.grid(True, which="both", alpha=0.3)
    runs = rows[0]["replications"] if rows else 0
    figure.suptitle("LLM agentic workflow: capacity sweep (same tasks in every cell; "
                    f"{runs} replication{'s' if runs != 1 else ''}"
                    f"{', 95% CI' if runs > 1 else ''})")
    target = directory / name
    figure.savefig(target, dpi=110)
    return target


def run_sweep(out_dir: str | Path, *, seed: int = 7, replications: int = 1,
              experiment_backend: str = "sequential", experiment_workers: int | None = None,
              plot_it: bool | None = None, **params: Any) -> int:
    """The sweep as a command: check, run, print, write the CSV, then plot; the exit status.

    Args:
        out_dir: Where ``capacity_sweep.csv`` and ``capacity_sweep.png`` go (made if missing).
        seed: The master seed.
        replications: Replications per configuration.
        experiment_backend: Where the replications run.
        experiment_workers: Workers of that backend.
        plot_it: ``True``: the plot is required (status 2 at once without
            matplotlib); ``False``: no plot; ``None``: a plot when matplotlib is
            installed, else one line saying what to install, and the CSV only.
        **params: Model parameters (and ``backend``/``workers`` of the planner).

    Returns:
        0 on success, 2 for a bad option or a missing extra (one line on
        stderr, before any work), 1 if a run failed.
    """
    try:
        check(replications=replications, experiment_backend=experiment_backend,
              experiment_workers=experiment_workers, **params)
    except (ConfigError, BackendUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    can_plot = plot_it is not False and plotting_available()
    if plot_it and not can_plot:
        print(f"error: the capacity sweep's plot needs matplotlib: {PLOT_EXTRA} "
              "(or --no-plot for the CSV only)", file=sys.stderr)
        return 2
    directory = Path(out_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"error: cannot write to {str(directory)!r}: {exc.strerror or exc}",
              file=sys.stderr)
        return 2
    if plot_it is None and not can_plot:
        print(f"note: the plot needs matplotlib ({PLOT_EXTRA}): writing "
              "capacity_sweep.csv only", file=sys.stderr)
    start = time.perf_counter()
    try:
        rows = sweep(seed, replications=replications, experiment_backend=experiment_backend,
                     experiment_workers=experiment_workers, progress=None, **params)
    except (ConfigError, BackendUnavailable) as exc:  # raised before any replication runs
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    table = write_csv(rows, directory / "capacity_sweep.csv")  # the data first, then the plot
    print(f"capacity sweep: {len(rows)} configurations x {replications} "
          f"replication{'s' if replications != 1 else ''} ({experiment_backend}) in "
          f"{time.perf_counter() - start:.1f} s; mean KPIs")
    print(f"{'servers':>7} {'batch':>5} {'agents':>6} {'p95 latency':>12} {'queue':>6} "
          f"{'utilisation':>11} {'serving $/task':>14}")
    for row in rows:
        print(f"{row['servers']:>7} {row['batch_size']:>5} {row['concurrency']:>6} "
              f"{row['p95_latency']:>10.1f} s {row['mean_queue_depth']:>6.2f} "
              f"{row['server_utilisation']:>11.1%} {row['serving_cost_per_task']:>14.4f}")
    if can_plot:
        print(f"wrote {table} and {plot(rows, directory)}")
    else:
        print(f"wrote {table}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python examples/llm_workflow/sweep.py [DIR]``: run the capacity sweep."""
    defaults = Params()
    parser = argparse.ArgumentParser(
        prog="python examples/llm_workflow/sweep.py",
        description="Capacity sweep of the LLM agentic workflow: servers x batch size x "
                    "agent concurrency. Writes capacity_sweep.csv and capacity_sweep.png to DIR.",
    )
    parser.add_argument("out", nargs="?", default=".", metavar="DIR",
                        help="output directory (default: the current directory)")
    parser.add_argument("--seed", type=int, default=7, help="master seed (default 7)")
    parser.add_argument("--replications", type=int, default=1,
                        help="replications per configuration (default 1)")
    parser.add_argument("--backend", default="sequential",
                        help="where replications run (sequential, processes, auto...)")
    parser.add_argument("--workers", type=int, help="workers of that backend")
    parser.add_argument("--arrival-rate", type=float, default=defaults.arrival_rate,
                        help="tasks per second")
    parser.add_argument("--horizon", type=float, default=defaults.horizon, help="seconds")
    parser.add_argument("--plot", action=argparse.BooleanOptionalAction, default=None,
                        help="draw capacity_sweep.png (needs matplotlib; default: when it "
                             "is installed)")
    args = parser.parse_args(argv)
    return run_sweep(args.out, seed=args.seed, replications=args.replications,
                     experiment_backend=args.backend, experiment_workers=args.workers,
                     plot_it=args.plot, arrival_rate=args.arrival_rate, horizon=args.horizon)


if __name__ == "__main__":
    sys.exit(main())
