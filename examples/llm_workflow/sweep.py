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
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulacra.parallel import Experiment, config_grid, mean_interval

if __package__:
    from .model import KPIS, run
else:  # loaded as a top-level module (python examples/llm_workflow)
    from model import KPIS, run  # type: ignore[no-redef,import-not-found,unused-ignore]

__all__ = ["AXES", "plot", "sweep", "write_csv"]

#: The swept parameters, in the order of the grid (and of the result rows).
AXES: tuple[str, ...] = ("servers", "batch_size", "concurrency")
#: KPIs whose confidence interval half-width is kept (``<kpi>_halfwidth``).
PLOTTED: tuple[str, ...] = ("p95_latency", "serving_cost_per_task")

Row = dict[str, Any]


def sweep(seed: int = 7, *, servers: Sequence[int] = (1, 2, 4),
          batch_sizes: Sequence[int] = (1, 4, 8), concurrency: Sequence[int] = (4, 16, 64),
          replications: int = 1, experiment_backend: str = "sequential",
          experiment_workers: int | None = None, **params: Any) -> list[Row]:
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
                        max_workers=experiment_workers, progress=False)
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
