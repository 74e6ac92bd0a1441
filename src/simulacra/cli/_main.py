"""Argument parsing and the commands of ``simulacra``.

A *model function* is any callable ``run(seed: int = ..., **params)`` that
returns a mapping of KPI names to ``int``, ``float`` or ``str`` values.
``simulacra run`` finds it, calls it once and prints what it returned.

Exit status:
    0: the model ran and its KPIs were printed.
    1: the model raised a :class:`simulacra.SimError` (reported in one line).
    2: a usage error: bad arguments, a target that cannot be found or called,
       or a model that broke the KPI contract (reported in one line).
    141: stdout was closed by its reader (``| head``) before everything was
       printed; the command's files were complete by then. No message.

Any other exception raised by the model is a bug in the model (or in
simulacra) and propagates with its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import numbers
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TextIO, TypeAlias

from simulacra._version import __version__
from simulacra.cli._experiment import add_experiment_command
from simulacra.cli._report import add_report_arguments, add_report_command, with_report
from simulacra.cli._scenarios import add_scenarios_command
from simulacra.cli._society import add_replay_command, is_config_target, resume_run, run_config
from simulacra.cli._view import ViewOptions, add_view_arguments, add_view_command
from simulacra.errors import ConfigError
from simulacra.executors import RefLoader

__all__ = ["main"]

#: The value of one KPI once checked: what ``--json`` can encode exactly.
KPIValue: TypeAlias = bool | int | float | str

EXIT_OK = 0
EXIT_SIM_ERROR = 1
#: Also what argparse uses for its own usage errors.
EXIT_USAGE = 2
#: stdout was closed by its reader (``simulacra run ... | head``): 128 + SIGPIPE,
#: what the shell reports for a tool the closed pipe stopped.
EXIT_PIPE_CLOSED = 141

#: The function ``run`` calls when TARGET names none.
DEFAULT_FUNCTION = "run"
#: The file ``run`` loads when TARGET is a directory.
MODEL_FILE = "model.py"
#: The ``sys.modules`` name a model file is loaded under while it runs. A real
#: entry is needed: dataclasses and typing look their module up there.
_MODEL_MODULE = "__simulacra_model__"
#: How ``run`` (and ``scenarios``) load TARGET: a file afresh for each command
#: under :data:`_MODEL_MODULE`, a directory's ``model.py``, or a module by name.
_MODELS = RefLoader(file_module=lambda _path: _MODEL_MODULE, directory_file=MODEL_FILE)


class _UsageError(Exception):
    """A problem with what was asked for; ``main`` prints it and returns 2."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``simulacra`` command line.

    Args:
        argv: The arguments after the program name. ``None`` reads
            ``sys.argv[1:]``.

    Returns:
        The exit status: 0 on success, 1 if the model raised a
        :class:`simulacra.SimError`, 2 on a usage error.
    """
    parser = _build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        # Dotted overrides may come after options (run CONFIG --out DIR sim.steps=2),
        # which argparse cannot give to a positional list: take them here.
        if extra and getattr(args, "overrides", None) is not None and all(
                "=" in item and not item.startswith("-") for item in extra):
            args.overrides = [*args.overrides, *extra]
        elif extra:  # with the command's usage (simulacra run ... --sed 3), not the top one's
            _command_parser(parser, str(getattr(args, "command", ""))).error(
                f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # --help, --version, usage errors: argparse has printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    command: Callable[[argparse.Namespace], int] = args.command_fn
    try:
        status = command(args)
        sys.stdout.flush()  # a reader that went away shows here, not at the exit
        return status
    except BrokenPipeError:
        return _stdout_closed()
    except _UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        # A society run handles Ctrl-C itself (a checkpoint, and how to resume); any
        # other command stops here with one line instead of a traceback.
        what = {"experiment": "; the finished replications are kept in the study's output "
                              "directory: the same command with --resume finishes it",
                "replay": "; the replay wrote nothing"}.get(str(getattr(args, "command", "")),
                                                            "")
        print(f"interrupted{what}", file=sys.stderr)
        return 130


def _command_parser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of the command *name* (``run``, ``experiment``...), or *parser* itself."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found = action.choices.get(name)
            if isinstance(found, argparse.ArgumentParser):
                return found
    return parser


def _stdout_closed() -> int:
    """The reader of stdout went away (``| head``): stop quietly with EXIT_PIPE_CLOSED.

    Every file the command writes is complete before its output is printed, so
    nothing is lost but the lines nobody reads. stdout is pointed at devnull so
    that Python's own flush at the exit does not fail again (the Python docs'
    "Note on SIGPIPE").
    """
    with contextlib.suppress(OSError, ValueError):  # no real descriptor (tests): nothing to do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return EXIT_PIPE_CLOSED


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="simulacra",
        description="Deterministic simulation of many interacting actors.",
    )
    parser.add_argument("--version", action="version", version=f"simulacra {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True,
                                     dest="command")

    run = commands.add_parser(
        "run",
        help="run a model function once and print its KPIs, or a run config (YAML)",
        description=(
            "Call a model function run(seed=..., **params) and print the mapping of "
            "KPIs it returns; or run the society a run config (CONFIG.yaml) describes, "
            "write its run directory and print a summary."
        ),
    )
    run.add_argument(
        "target",
        metavar="TARGET",
        nargs="?",
        help=(
            "path/to/file.py, path/to/file.py:func, a directory holding model.py, "
            f"or package.module:func; the function defaults to {DEFAULT_FUNCTION!r}; "
            "or a run config CONFIG.yaml"
        ),
    )
    run.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY.PATH=VALUE",
        help="with CONFIG.yaml: dotted overrides, e.g. sim.steps=20 sim.llm.provider=...",
    )
    run.add_argument("--out", metavar="DIR", help="with CONFIG.yaml: the run directory")
    run.add_argument("--resume", metavar="RUN_DIR",
                     help="continue an unfinished run directory from its last checkpoint "
                          "(written with run.checkpoint_every=N)")
    run.add_argument("--from-checkpoint", type=int, metavar="STEP",
                     help="with --resume: continue from the checkpoint of this step, not the "
                          "newest")
    run.add_argument("--re-record", action="store_true",
                     help="with --resume: resume although the recordings are missing or short, "
                          "calling the model again for those calls")
    run.add_argument("--scenario", metavar="FILE",
                     help="run under this scenario artifact (docs/scenarios.md): with "
                          "CONFIG.yaml, checked against the model's knobs before the run "
                          "starts; a model function gets scenario=FILE")
    run.add_argument("--no-progress", action="store_true",
                     help="with CONFIG.yaml: no progress bar")
    run.add_argument("--seed", type=int, metavar="N", help="pass seed=N to the model")
    run.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=(
            "pass KEY=VALUE to the model as a keyword argument; VALUE is read as JSON "
            "(3, 0.5, true, null, [1, 2]) or else taken as a plain string; repeatable"
        ),
    )
    run.add_argument("--json", action="store_true",
                     help="print the KPIs (with CONFIG.yaml: the run's summary.json) as JSON")
    add_report_arguments(run)
    add_view_arguments(run, run=True)
    run.set_defaults(command_fn=with_report(_cmd_run), usage=run.format_usage())
    add_experiment_command(commands)
    add_replay_command(commands)
    add_view_command(commands)
    add_scenarios_command(commands, load=_loaded, usage_error=_UsageError)
    add_report_command(commands)
    return parser


def _cmd_run(args: argparse.Namespace) -> int:
    import simulacra  # noqa: PLC0415  (layer 7 uses the front door, and only when needed)

    try:
        view = ViewOptions.from_args(args, view=args.view)
    except ValueError as exc:
        raise _UsageError(str(exc)) from None
    if view is not None:
        if args.resume is None and (args.target is None or not is_config_target(args.target)):
            raise _UsageError("--view shows a society run: give a run config (CONFIG.yaml) or "
                              "--resume RUN_DIR")
        try:
            view.check()  # before any work: the extra is installed, the host allowed
        except simulacra.ConfigError as exc:
            raise _UsageError(str(exc)) from None
    if args.resume is not None:
        # argparse puts a first override in TARGET: `--resume DIR run.budget.cost=2`.
        items = [*([args.target] if args.target is not None else []), *args.overrides]
        if args.scenario is not None:
            raise _UsageError("--scenario starts a run; --resume RUN_DIR continues the scenario "
                              "the run started with (its scenario.json)")
        if args.target is not None and args.target.endswith((".yaml", ".yml", ".json")):
            raise _UsageError(f"--resume RUN_DIR continues the run with the config stored in "
                              f"RUN_DIR: leave out {args.target!r} (run.* overrides may "
                              "follow: run.budget.cost=...)")
        from simulacra.societies import RESUMABLE  # noqa: PLC0415

        if args.settings or any(not item.startswith(RESUMABLE) for item in items):
            bad = next((i for i in items if not i.startswith(RESUMABLE)), "--set")
            raise _UsageError(f"--resume RUN_DIR takes overrides of run.* settings "
                              f"(run.budget.cost=...), sim.engine.shards, shard_mode and "
                              f"partition, and sim.llm.endpoints and routing only, got {bad!r}: "
                              "the run continues with the simulation stored in RUN_DIR")
        return resume_run(args.resume, progress=not args.no_progress, overrides=items,
                          from_checkpoint=args.from_checkpoint, re_record=args.re_record,
                          as_json=args.json, view=view)
    if args.from_checkpoint is not None or args.re_record:
        raise _UsageError("--from-checkpoint and --re-record go with --resume RUN_DIR")
    if args.target is None:
        print(args.usage, file=sys.stderr, end="")
        raise _UsageError("give a TARGET (a model file or CONFIG.yaml), or --resume RUN_DIR")
    if is_config_target(args.target):
        if args.settings:
            raise _UsageError("--set is for model functions; give a run config dotted "
                              "overrides instead: simulacra run CONFIG.yaml sim.steps=20")
        overrides = list(args.overrides)
        if args.scenario is not None:
            # JSON is YAML: the path arrives as a string, whatever characters it holds.
            overrides.append(f"scenario={json.dumps(str(Path(args.scenario).resolve()))}")
        return run_config(args.target, overrides, seed=args.seed, out=args.out,
                          progress=not args.no_progress, usage_error=_UsageError,
                          as_json=args.json, view=view)
    if args.overrides:
        raise _UsageError(f"unexpected arguments {args.overrides}: KEY=VALUE overrides are for "
                          "run configs (CONFIG.yaml); pass model parameters with --set KEY=VALUE")
    if args.out is not None:
        raise _UsageError("--out is for run configs (CONFIG.yaml): a model function writes no "
                          "run directory; print its KPIs with --json and redirect them")
    kwargs = _parse_settings(args.settings)
    if args.seed is not None:
        if "seed" in kwargs:
            raise _UsageError("--seed and --set seed=... were both given; use --seed")
        kwargs["seed"] = args.seed
    if args.scenario is not None:
        if "scenario" in kwargs:
            raise _UsageError("--scenario and --set scenario=... were both given; use "
                              "--scenario")
        kwargs["scenario"] = args.scenario
    where, name = _split_target(args.target)
    label = f"{where}:{name}"
    try:
        with _loaded(where, label) as module:
            function = _model_function(module, where, name)
            _check_call(function, kwargs, label)
            result = function(**kwargs)
    except simulacra.SimError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_SIM_ERROR
    kpis = _checked_kpis(result, label)
    if args.json:
        print(json.dumps(kpis, indent=2), file=sys.stdout)
    else:
        _print_table(kpis, sys.stdout)
    return EXIT_OK


def _parse_settings(items: Sequence[str]) -> dict[str, object]:
    """Turn ``--set KEY=VALUE`` items into keyword arguments."""
    settings: dict[str, object] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise _UsageError(f"--set expects KEY=VALUE, got {item!r}")
        if not key.isidentifier():
            raise _UsageError(f"--set key {key!r} (in {item!r}) must be a Python identifier")
        if key in settings:
            raise _UsageError(f"--set {key}=... was given twice (again in {item!r})")
        try:
            settings[key] = json.loads(raw)
        except json.JSONDecodeError:
            settings[key] = raw
    return settings


def _split_target(target: str) -> tuple[str, str]:
    """Split ``WHERE[:FUNC]`` into WHERE and the function name."""
    where, sep, name = target.rpartition(":")
    # A drive letter (C:\models\bank.py) is not a function name.
    if not sep or not where or "/" in name or "\\" in name:
        return target, DEFAULT_FUNCTION
    if not name.isidentifier():
        raise _UsageError(f"TARGET {target!r}: function name {name!r} must be a Python identifier")
    return where, name


def _looks_like_path(where: str) -> bool:
    return where.endswith(".py") or "/" in where or "\\" in where or Path(where).exists()


@contextlib.contextmanager
def _loaded(where: str, ref: str | None = None) -> Iterator[ModuleType]:
    """Load the file or import the module WHERE names, for as long as the model runs.

    Like ``python file.py`` and ``python -m module``, the model's directory
    (for a module, the working directory) comes first on ``sys.path`` so that
    a model split over several files can import its parts. ``sys.path`` and
    ``sys.modules`` are restored afterwards, except for modules imported by
    name, which stay imported as any import would. A reference that cannot be
    found is a usage error, in the words every reference in simulacra uses.
    """
    path = Path(where)
    if path.is_file() and path.suffix != ".py":
        raise _UsageError(f"{where!r} is neither a Python file (.py) nor a run config "
                          "(.yaml): simulacra run takes a model file, module:function or "
                          "CONFIG.yaml")
    with contextlib.ExitStack() as stack:
        try:
            module = stack.enter_context(_MODELS.scoped(where, "", ref))
        except ConfigError as exc:
            raise _UsageError(f"{exc}{_config_hint(path)}") from None
        yield module


def _config_hint(path: Path) -> str:
    """For a directory without a model file: the run config it holds, if any."""
    if not path.is_dir() or (path / MODEL_FILE).is_file():
        return ""
    configs = sorted(p.name for p in path.iterdir() if is_config_target(p.name))
    return f"; it has a run config: simulacra run {path / configs[0]}" if configs else ""


def _model_function(module: ModuleType, where: str, name: str) -> Callable[..., object]:
    try:
        function: Callable[..., object] = _MODELS.lookup(module, where, name, "")
    except ConfigError as exc:
        if hasattr(module, name):  # there, but not callable
            raise _UsageError(str(exc)) from None
        configs = []
        folder = Path(where) if Path(where).is_dir() else Path(where).parent
        if _looks_like_path(where) and folder.is_dir():
            configs = sorted(p for p in folder.iterdir() if is_config_target(p.name))
        hint = f"; did you mean the run config: simulacra run {configs[0]}" if configs else ""
        # The command names the function it looked for: the user may have named none.
        raise _UsageError(f"no such function: {name!r} in {where!r} ({exc}){hint}") from None
    return function


def _check_call(function: Callable[..., object], kwargs: Mapping[str, object], label: str) -> None:
    """Report arguments the model cannot take as a usage error, before calling it.

    Checked up front so that a ``TypeError`` raised *inside* the model still
    reads as the bug it is.
    """
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # no signature to read: let the call decide
        return
    try:
        signature.bind(**kwargs)
    except TypeError as exc:
        given = ", ".join(f"{key}={value!r}" for key, value in kwargs.items()) or "no arguments"
        raise _UsageError(f"cannot call {label} with {given}: {exc}") from None


def _checked_kpis(result: object, label: str) -> dict[str, KPIValue]:
    """Check the model's result against the KPI contract and normalise it."""
    if not isinstance(result, Mapping):
        raise _UsageError(
            f"{label} returned {type(result).__name__}, expected a mapping of "
            "KPI names to int, float or str"
        )
    kpis: dict[str, KPIValue] = {}
    for key, value in result.items():
        if not isinstance(key, str):
            raise _UsageError(
                f"{label} returned KPI name {key!r} ({type(key).__name__}), expected a str"
            )
        kpis[key] = _kpi_value(value, key, label)
    return kpis


def _kpi_value(value: object, key: str, label: str) -> KPIValue:
    # numbers.Integral/Real also accept numpy scalars, which models often return.
    if isinstance(value, bool | str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    raise _UsageError(
        f"{label} returned KPI {key!r} = {value!r} ({type(value).__name__}), "
        "expected an int, float or str"
    )


def _format(value: KPIValue) -> str:
    # Four significant figures in a table; --json keeps every digit.
    if isinstance(value, float):
        return f"{value:.4g}"
    return value if isinstance(value, str) else repr(value)


def _print_table(kpis: Mapping[str, KPIValue], out: TextIO) -> None:
    """Print *kpis* as two aligned columns, with rich when it is installed."""
    rows = [(name, _format(value)) for name, value in kpis.items()]
    name_width = max([len("KPI"), *(len(name) for name, _ in rows)])
    value_width = max([len("value"), *(len(text) for _, text in rows)])
    try:
        from rich import box  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415
        from rich.console import (  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415
            Console,
        )
        from rich.table import Table  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415
    except ImportError:
        print(f"{'KPI':<{name_width}}  {'value':>{value_width}}", file=out)
        for name, text in rows:
            print(f"{name:<{name_width}}  {text:>{value_width}}", file=out)
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    table.add_column("KPI", no_wrap=True)
    table.add_column("value", justify="right", no_wrap=True)
    for name, text in rows:
        table.add_row(name, text)
    console = Console(file=out, highlight=False)
    if not console.is_terminal:
        # Never cut a value when the output goes to a file or a pipe.
        console.width = max(console.width, name_width + value_width + 8)
    console.print(table)
