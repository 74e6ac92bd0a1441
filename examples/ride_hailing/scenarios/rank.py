"""Rank the ride-hailing scenarios by their effect on wait time and abandonment.

Runs the fleet as its baseline and under every scenario of ``artifacts/`` (a study
with a scenarios axis: replication *r* of every scenario uses the seeds of the
baseline's replication *r*, so each difference is paired), then prints the
scenarios ranked by the increase in abandonment they cause, with the increase in
mean wait beside it and their 95 % intervals, writes ``ranking.csv`` and, when
matplotlib is installed, ``ranking.png``::

    python examples/ride_hailing/scenarios/rank.py [OUT_DIR] [--replications N]

Nothing here calls a language model: the scenarios are artifacts, and a run with
one is a pure function of its seed, its config and the scenario's hash.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
if importlib.util.find_spec("simulacra") is None:  # a source checkout without `pip install`
    sys.path.insert(0, str(HERE.parents[2] / "src"))

from simulacra import Experiment, SimError  # noqa: E402

MODEL = f"{HERE.parent / 'model.py'}:run"
KPIS = ("abandonment_rate", "mean_wait")


def rank(replications: int, seed: int = 11, vehicles: int = 30) -> list[dict[str, object]]:
    """One row per scenario, most harmful first: each KPI's difference from the baseline."""
    study = Experiment.from_run(MODEL, [{"vehicles": vehicles}], master_seed=seed,
                                scenarios=HERE / "artifacts")
    results = study.run(replications, "auto", progress=None)
    effects = results.scenario_effects()
    rows: dict[str, dict[str, object]] = {}
    for row in effects.iter_rows(named=True):
        if row["kpi"] in KPIS and row["scenario"] != "baseline":
            entry = rows.setdefault(str(row["scenario"]), {"scenario": row["scenario"]})
            entry[row["kpi"]] = row["mean"]
            entry[f"{row['kpi']}_difference"] = row["difference"]
            entry[f"{row['kpi']}_halfwidth"] = row["diff_halfwidth"]
    return sorted(rows.values(), key=lambda r: (-float(r["abandonment_rate_difference"]),  # type: ignore[arg-type]
                                                str(r["scenario"])))


def _plot(rows: Sequence[dict[str, object]], path: Path) -> bool:
    if importlib.util.find_spec("matplotlib") is None:
        return False
    import matplotlib  # noqa: PLC0415  (optional: the plot extra)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    names = [str(r["scenario"]) for r in rows]
    figure, axes = plt.subplots(1, 2, figsize=(10, 0.6 * len(rows) + 1.5), sharey=True)
    for ax, kpi, label in ((axes[0], "abandonment_rate", "abandonment rate (vs baseline)"),
                           (axes[1], "mean_wait", "mean wait, minutes (vs baseline)")):
        ax.barh(names, [float(r[f"{kpi}_difference"]) for r in rows],  # type: ignore[arg-type]
                xerr=[float(r[f"{kpi}_halfwidth"]) for r in rows],  # type: ignore[arg-type]
                color="#c0504d", capsize=3)
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_xlabel(label)
    axes[0].invert_yaxis()
    figure.suptitle("ride-hailing scenarios, ranked by the abandonment they cause (95% CI)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """Rank the scenarios; write ranking.csv (and ranking.png); return the exit status."""
    parser = argparse.ArgumentParser(prog="python examples/ride_hailing/scenarios/rank.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", default="scenario-ranking",
                        help="output directory (default: scenario-ranking)")
    parser.add_argument("--replications", type=int, default=10,
                        help="replications per scenario and baseline (default 10)")
    args = parser.parse_args(argv)
    if args.replications < 2:
        parser.error(f"--replications must be at least 2 for an interval, got {args.replications}")
    if importlib.util.find_spec("polars") is None:
        print("error: the study's tables need polars: "
              "python -m pip install '.[parallel]' in a clone of simulacra",
              file=sys.stderr)
        return 2
    try:
        rows = rank(args.replications)
    except SimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "ranking.csv").open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print("scenarios ranked by the abandonment they cause, as differences from the baseline")
    print(f"({args.replications} replications each, paired; 95% intervals):")
    for place, row in enumerate(rows, 1):
        print(f"  {place}. {row['scenario']}")
        print(f"       abandonment {float(row['abandonment_rate_difference']):+.1%} "  # type: ignore[arg-type]
              f"± {float(row['abandonment_rate_halfwidth']):.1%}, mean wait "  # type: ignore[arg-type]
              f"{float(row['mean_wait_difference']):+.2f} ± "  # type: ignore[arg-type]
              f"{float(row['mean_wait_halfwidth']):.2f} min")  # type: ignore[arg-type]
    plotted = _plot(rows, out / "ranking.png")
    plot_hint = "python -m pip install '.[plot]' in a clone of simulacra"
    print(f"wrote {out / 'ranking.csv'}" + (f" and {out / 'ranking.png'}" if plotted else
                                            f" (the plot needs {plot_hint})"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
