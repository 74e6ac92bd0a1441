"""``python examples/llm_workflow`` runs the LLM agentic workflow and prints its KPIs.

Options: ``--seed N``, ``--servers N``, ``--batch-size N``, ``--concurrency N``,
``--arrival-rate X``, ``--horizon T``, ``--planner-work N``, ``--backend
inline|threads|processes`` and ``--workers N`` (where the planner's scoring
runs: the KPIs are the same on every backend), ``--sweep DIR`` (run the
capacity sweep instead and write ``capacity_sweep.csv`` and ``.png`` to DIR;
``--servers``, ``--batch-size`` and ``--concurrency`` are its axes, so they
are refused with it), ``--replications N``, ``--sweep-backend NAME`` and
``--sweep-workers N`` (how the sweep's :class:`simulacra.parallel.Experiment`
runs), ``--plot/--no-plot`` (the sweep's PNG needs matplotlib, ``python -m pip
install '.[plot]'``; by default it is drawn when matplotlib is installed, and
otherwise the sweep says so in one line and writes the CSV only), ``--plain``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if importlib.util.find_spec("simulacra") is None:  # a source checkout without `pip install`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from simulacra import ConfigError

try:
    from rich import box
    from rich.console import Console
    from rich.table import Table
except ImportError:  # rich is a dependency, but the text report needs nothing
    HAVE_RICH = False
else:
    HAVE_RICH = True

if __package__:
    from .model import Params, run
    from .sweep import run_sweep
else:  # `python examples/llm_workflow`: this directory is on sys.path, not its parent
    from model import Params, run  # type: ignore[no-redef,import-not-found,unused-ignore]
    from sweep import run_sweep  # type: ignore[no-redef,import-not-found,unused-ignore]

#: The sweep's axes: options that a run without --sweep takes and the sweep refuses.
AXES = (("servers", "--servers"), ("batch_size", "--batch-size"),
        ("concurrency", "--concurrency"))

#: KPI name, how to show its value, what it means.
ROWS: list[tuple[str, str, str]] = [
    ("tasks", "int", "tasks that arrived"),
    ("completed", "int", "tasks answered"),
    ("failed", "int", "tasks failed by a tool that kept failing"),
    ("mean_latency", "s", "arrival to answer"),
    ("p95_latency", "s", "arrival to answer, 95th percentile"),
    ("mean_queue_depth", "num", "inference requests waiting for a server (time average)"),
    ("max_queue_depth", "int", "most inference requests waiting at once"),
    ("mean_batch_size", "num", "requests per served batch"),
    ("server_utilisation", "pct", "LLM servers busy"),
    ("cost_per_task", "usd", "tokens and tool calls"),
    ("serving_cost_per_task", "usd", "server time"),
    ("tokens_per_task", "int", "prompt + output tokens"),
    ("tool_calls_per_task", "num", "tool calls, retries included"),
    ("tool_failures", "int", "failed tool calls"),
    ("planner_calls", "int", "offloaded plan rankings"),
]


def _show(value: float, how: str) -> str:
    if how == "int":
        return f"{round(value):,}"
    if how == "pct":
        return f"{value:.1%}"
    if how == "usd":
        return f"${value:.4f}"
    if how == "s":
        return f"{value:,.2f} s"
    return f"{value:.2f}"


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    defaults = Params()
    parser = argparse.ArgumentParser(
        prog="python examples/llm_workflow",
        description="Simulate agentic tasks on batching LLM servers and print the KPIs.",
    )
    parser.add_argument("--seed", type=int, default=7, help="master seed (default 7)")
    parser.add_argument("--servers", type=int, help=f"default {defaults.servers}")
    parser.add_argument("--batch-size", type=int, help=f"default {defaults.batch_size}")
    parser.add_argument("--concurrency", type=int, help=f"default {defaults.concurrency}")
    parser.add_argument("--arrival-rate", type=float, default=defaults.arrival_rate,
                        help="tasks per second")
    parser.add_argument("--horizon", type=float, default=defaults.horizon, help="seconds")
    parser.add_argument("--planner-work", type=int, default=defaults.planner_work,
                        help="CPU cost of one planning call")
    parser.add_argument("--backend", choices=("inline", "threads", "processes"),
                        default="inline", help="where the planner runs (same KPIs)")
    parser.add_argument("--workers", type=int, help="pool workers (default: one per CPU)")
    parser.add_argument("--sweep", metavar="DIR", help="run the capacity sweep, write to DIR")
    parser.add_argument("--replications", type=int, default=1,
                        help="sweep: replications per configuration (default 1)")
    parser.add_argument("--sweep-backend", default="sequential",
                        help="sweep: where replications run (sequential, processes, auto...)")
    parser.add_argument("--sweep-workers", type=int, help="sweep: workers of that backend")
    parser.add_argument("--plot", action=argparse.BooleanOptionalAction, default=None,
                        help="sweep: draw capacity_sweep.png (needs matplotlib; default: "
                             "when it is installed)")
    parser.add_argument("--plain", action="store_true", help="plain text, even with rich")
    args = parser.parse_args(argv)
    if not args.sweep:
        for name, _ in AXES:
            if getattr(args, name) is None:
                setattr(args, name, getattr(defaults, name))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo and print its report; return the exit status."""
    args = _parse(argv)
    params: dict[str, Any] = {"arrival_rate": args.arrival_rate, "horizon": args.horizon,
                              "planner_work": args.planner_work}
    pool: dict[str, Any] = {"backend": args.backend, "workers": args.workers}
    if args.sweep:
        given = [option for name, option in AXES if getattr(args, name) is not None]
        if given:
            print(f"error: {given[0]} is an axis of the capacity sweep (which runs 1, 2, 4 "
                  "servers x batch 1, 4, 8 x 4, 16, 64 agents): drop it, or run without "
                  "--sweep", file=sys.stderr)
            return 2
        return run_sweep(args.sweep, seed=args.seed, replications=args.replications,
                         experiment_backend=args.sweep_backend,
                         experiment_workers=args.sweep_workers, plot_it=args.plot,
                         **params, **pool)
    try:
        start = time.perf_counter()
        kpis = run(args.seed, servers=args.servers, batch_size=args.batch_size,
                   concurrency=args.concurrency, **params, **pool)
        seconds = time.perf_counter() - start
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    title = "simulacra: agentic tasks on batching LLM servers (simulated; no model is called)"
    settings = [
        ("seed", str(args.seed)),
        ("capacity", f"{args.servers} servers x batch {args.batch_size}, "
                     f"{args.concurrency} agents at once"),
        ("demand", f"{args.arrival_rate:g} tasks/s for {args.horizon:g} s"),
        ("planner", f"work {args.planner_work} on the {args.backend} pool"
                    + (f" ({args.workers} workers)" if args.workers else "")),
    ]
    rows = [[name, _show(kpis[name], how), meaning] for name, how, meaning in ROWS]
    footer = f"wall time {seconds:.2f} s. Same seed, same KPIs on every backend."
    if HAVE_RICH and not args.plain:
        _print_rich(title, settings, rows, footer)
    else:
        _print_plain(title, settings, rows, footer)
    return 0


def _print_plain(title: str, settings: list[tuple[str, str]], rows: list[list[str]],
                 footer: str) -> None:
    print(title)
    print("=" * len(title))
    print()
    width = max(len(key) for key, _ in settings)
    for key, value in settings:
        print(f"  {key:<{width}}  {value}")
    print()
    header = ["KPI", "value", "meaning"]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(3)]
    for row in [header, ["-" * w for w in widths], *rows]:
        print(f"{row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]}".rstrip())
    print()
    print(footer)


def _print_rich(title: str, settings: list[tuple[str, str]], rows: list[list[str]],
                footer: str) -> None:
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
    kpis.add_column("value", justify="right", no_wrap=True)
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
