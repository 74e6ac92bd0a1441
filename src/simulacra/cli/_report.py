"""``simulacra report PATH [-o FILE]`` and ``simulacra run CONFIG.yaml --report``.

``report`` writes one self-contained HTML file (default ``PATH/report.html``)
of a society run directory, a study directory of ``simulacra experiment`` or
a kernel model's ``monitors.json``: see ``docs/report.md``. ``run --report``
writes the run directory's report when the run ends, however it ended
(finished, stopped by a budget or Ctrl-C, or failed).

The charts need plotly (``python -m pip install '.[report]'``): without it both
say so in one line, exit 2, before any work.

Layer 7: uses the public front door ``simulacra`` only, imported lazily.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from simulacra._util import install_hint

__all__ = ["add_report_arguments", "add_report_command", "with_report"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

#: The one line a command that needs plotly prints when it is missing.
PLOTLY_MISSING = ("simulacra report draws its charts with plotly, which is not installed: "
                  f"{install_hint('report')}")


def _plotly_missing() -> bool:
    try:
        import plotly  # type: ignore[import-untyped]  # noqa: F401, PLC0415
    except ImportError:
        return True
    return False


def add_report_command(commands: Any) -> None:
    """Add ``report PATH [-o FILE]`` to the ``simulacra`` subcommands."""
    parser = commands.add_parser(
        "report",
        help="write an HTML report of a run directory, a study or a monitor file",
        description=("Write one self-contained HTML file (it opens offline) of a run "
                     "directory of `simulacra run CONFIG.yaml`, a study directory of "
                     "`simulacra experiment` or a kernel model's monitors.json: charts, "
                     "the action log, conversations and a page per agent."),
    )
    parser.add_argument("path", metavar="PATH",
                        help="a run directory, a study directory, or monitors.json")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="the HTML file to write (default: PATH/report.html)")
    parser.add_argument("--llm-calls", type=int, default=None, metavar="N",
                        help="embed at most N recorded model calls with their prompts "
                             "(default 2000; 0: none)")
    parser.set_defaults(command_fn=_cmd_report)


def _cmd_report(args: argparse.Namespace) -> int:
    if _plotly_missing():
        print(f"error: {PLOTLY_MISSING}", file=sys.stderr)
        return EXIT_USAGE
    import simulacra  # noqa: PLC0415  (layer 7 uses the front door, and only when needed)

    options: dict[str, Any] = {}
    if args.llm_calls is not None:
        options["llm_calls"] = args.llm_calls
    try:
        written = simulacra.build_report(args.path, args.output, **options)
    except simulacra.ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"report: {written} ({_size(written)})")
    return EXIT_OK


def _size(path: Path) -> str:
    size = path.stat().st_size
    return f"{size / 1e6:.1f} MB" if size >= 1e5 else f"{size / 1e3:.0f} kB"


def add_report_arguments(run: argparse.ArgumentParser) -> None:
    """Add ``--report`` to ``simulacra run``."""
    run.add_argument("--report", action="store_true",
                     help="with CONFIG.yaml or --resume: write RUN_DIR/report.html when the "
                          "run ends (also when it stopped)")


def _run_dir(args: argparse.Namespace) -> str | None:
    """The run directory ``simulacra run`` will write: --resume, --out, run.out or the default.

    The default one (``runs/<name>-seed<seed>-<time>``) is chosen here and given
    to the run as ``--out``, so that the report finds it. None when the config
    cannot be read: the run then says why.
    """
    if args.resume is not None:
        return str(args.resume)
    if args.out is not None:
        return str(args.out)
    import simulacra  # noqa: PLC0415
    from simulacra.societies import default_run_dir  # noqa: PLC0415

    items = list(args.overrides)
    if args.seed is not None:
        items.append(f"seed={args.seed}")
    try:
        config = simulacra.load_config(args.target, items)
    except simulacra.ConfigError:
        return None
    return str(config.run.out or default_run_dir(config.name, config.seed))


def with_report(command: Callable[[argparse.Namespace], int]) -> Callable[
        [argparse.Namespace], int]:
    """``simulacra run`` with ``--report``: the run, then its report, whatever its exit status."""

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        if not getattr(args, "report", False):
            return command(args)
        from simulacra.cli._society import is_config_target  # noqa: PLC0415

        if args.resume is None and (args.target is None or not is_config_target(args.target)):
            print("error: --report writes the report of a society run: give a run config "
                  "(CONFIG.yaml) or --resume RUN_DIR", file=sys.stderr)
            return EXIT_USAGE
        if _plotly_missing():  # before any work
            print(f"error: {PLOTLY_MISSING}", file=sys.stderr)
            return EXIT_USAGE
        where = _run_dir(args)
        if where is not None and args.resume is None:
            args.out = where
        closed: BrokenPipeError | None = None
        try:
            status = command(args)
        except BrokenPipeError as exc:  # the reader of stdout went away: the report still
            status, closed = EXIT_FAILED, exc  # is written before the CLI stops quietly
        if where is None or not (Path(where) / "manifest.json").is_file():
            if closed is not None:
                raise closed
            return status  # nothing was written: the run has said why
        import simulacra  # noqa: PLC0415

        try:
            written = simulacra.build_report(where)
        except simulacra.ConfigError as exc:
            print(f"error: report: {exc}", file=sys.stderr)
            return status or EXIT_FAILED
        if closed is not None:
            raise closed
        print(f"report: {written} ({_size(written)})",
              file=sys.stderr if args.json or status else sys.stdout)
        return status

    return run
