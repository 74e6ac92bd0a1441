"""``simulacra experiment STUDY``: run a study of replications described in a TOML or JSON file.

A study file (TOML shown; JSON has the same keys)::

    model = "examples/bank.py:run"  # or "package.module:function"
    convention = "run"              # the default: model(seed=..., **config)
                                    # "stream": model(stream, config)
    master_seed = 2025              # int or str
    replications = 20
    backend = "auto"                # or sequential, threads, processes,
                                    # interpreters (Python 3.13+), dask
    max_workers = 4                 # optional: one per CPU
    scheduler_address = "tcp://..." # optional, dask only
    retries = 3                     # optional: re-runs after a worker died
    common_random_numbers = false   # optional
    confidence = 0.95               # optional: of the printed intervals
    output = "bank-study"           # optional: <study file stem>-results
    scenarios = "scenarios/"        # optional: scenario artifacts; every
                                    # config also runs under each one

    [base]                          # optional: fields shared by every config
    customers = 2000

    [grid]                          # every combination, first key slowest
    servers = [3, 4]
    arrival_rate = [2.0, 2.7]

    # or a list of configs:
    # [[configs]]
    # servers = 3

Relative paths in the file (``model`` as a file, ``output``) are read
relative to the study file's directory; ``--output`` relative to the working
directory. The output directory is also the study directory:
results are spooled there as they finish (``study.json``,
``results.jsonl``), so ``--resume`` finishes an interrupted study. At the end
it holds ``results.csv``, ``results.parquet`` and ``summary.csv``, and the
summary (mean and confidence interval per config and KPI) is printed. With
``scenarios``, each config runs as its baseline and under each scenario (the
model takes ``scenario=``; see docs/scenarios.md), and ``effects.csv`` and
the printed table give each scenario's difference from its baseline.

Layer 7: uses the public front door ``simulacra`` only, imported lazily.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import sys
import textwrap
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from simulacra._util import install_hint, plural

__all__ = ["add_experiment_command"]

EXIT_OK = 0
EXIT_SIM_ERROR = 1
EXIT_USAGE = 2

#: Every key a study file may hold, with what it must be.
_KEYS: dict[str, str] = {
    "model": "a str 'path/to/file.py:function' or 'package.module:function'",
    "convention": "'run' or 'stream'",
    "master_seed": "an int or a str",
    "replications": "an int >= 1",
    "backend": "a backend name such as 'auto', 'processes' or 'dask'",
    "max_workers": "an int >= 1",
    "scheduler_address": "a Dask scheduler address such as 'tcp://host:8786'",
    "retries": "an int >= 0",
    "common_random_numbers": "true or false",
    "confidence": "a number strictly between 0 and 1",
    "output": "a directory path",
    "base": "a table of parameters shared by every config",
    "grid": "a table mapping each parameter to a list of values",
    "configs": "a list of tables, one per config",
    "scenarios": "a directory of scenario artifacts (<name>-<hash>.json)",
}


class StudyError(Exception):
    """A study file that cannot be used; the message names the field."""


#: What :class:`~simulacra.Experiment` says in the Python API's words (``spool_dir``,
#: ``resume=True``, ``model_fn``), and what the command line says instead: the flags
#: and study keys its user typed. Whole phrases of simulacra's own messages, anchored
#: where they can be, so that a model's own error text quoted in a message is left as
#: it is. tests/cli/test_cli_experiment_words.py runs a study into each of them.
_CLI_WORDS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), words) for pattern, words in (
        # results already in the output directory, and no --resume
        (r"^resume is False, but spool_dir (?=['\"])", "the output directory "),
        (r"; pass resume=True to keep them and run only the rest, or use an empty spool_dir$",
         "; add --resume to keep them and run only the rest, or give another --output DIR"),
        # a replication failed, or its worker died too often
        (r"; once the cause is fixed, run again with resume=True \(simulacra experiment "
         r"--resume\) to finish the study, or in another spool_dir if the model changed",
         "; once the cause is fixed, the same command with --resume finishes the study "
         "(with another --output DIR if the model changed)"),
        # advice for a script that runs a study: here simulacra is the main module
        (r"\. If no replication can finish, the workers may die as they start: a script that "
         r"runs a study must guard it with `if __name__ == '__main__':`, because spawned "
         r"workers import the main module again$", ""),
        # an output directory that holds another study, or is damaged
        (r"^spool_dir (?=['\"])", "the output directory "),
        (r"; use another spool_dir for this study$", "; give this study another --output DIR"),
        (r"; use another spool_dir$", "; give this study another --output DIR"),
        (r"; run the study again in another spool_dir, or empty this one to run it there "
         r"afresh$",
         "; run the study again with another --output DIR, or empty this one to run it "
         "there afresh"),
        (r"^spool_dir must be a directory simulacra can create and write",
         "the output directory (output in the study file, or --output DIR) must be a "
         "directory simulacra can create and write"),
        # the model's reference (model = "..." in the study file)
        (r"^model_fn\b", "model"),
    ))


def _in_cli_words(message: str) -> str:
    """*message* of the Python API, in the words of ``simulacra experiment``."""
    for pattern, words in _CLI_WORDS:
        message = pattern.sub(words, message, count=1)
    return message


#: What ``simulacra experiment --example`` prints: a study of the bank of
#: ``examples/bank.py``, small enough to take seconds. ``{model}`` is the bank's
#: absolute path where simulacra runs from a checkout (see :func:`_example_study`),
#: so the study runs from any directory.
EXAMPLE_STUDY = """\
# simulacra experiment study.toml   (the format: simulacra experiment --help)
# the model: "file.py:function" (relative to this file) or "module:function"
model = {model}
master_seed = 2025
replications = 5
backend = "auto"                # or sequential, threads, processes,
                                # interpreters (Python 3.13+), dask
output = "bank-study"           # where results.csv, summary.csv... go

[base]                          # shared by every config
customers = 2000

[grid]                          # every combination, first key slowest
servers = [3, 4]
arrival_rate = [2.0, 2.7]
"""


def add_experiment_command(commands: Any) -> None:
    """Add ``experiment`` to the ``simulacra`` subcommands."""
    parser = commands.add_parser(
        "experiment",
        help="run a study of replications from a TOML or JSON file",
        description=textwrap.fill(
            "Run a model over configs x replications, as described in STUDY (.toml or "
            ".json), print the mean and confidence interval of every KPI per config, "
            "and write results.csv, results.parquet and summary.csv to the output directory.",
            width=79),
        epilog="A study file (TOML; JSON has the same keys):\n\n" + "\n".join(
            "  " + line for line in __doc__.split("::\n\n", 1)[1].split("\n\nRelative", 1)[0]
            .splitlines()) + "\n\n`simulacra experiment --example` prints one that runs as it is.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("study", metavar="STUDY", nargs="?",
                        help="the study file (.toml or .json)")
    parser.add_argument("--example", action="store_true",
                        help="print a study file that runs as it is, and exit")
    parser.add_argument("--output", metavar="DIR", help="output directory (overrides the file)")
    parser.add_argument("--backend", metavar="NAME",
                        help="auto, sequential, threads, processes, interpreters (Python 3.13+) "
                             "or dask (overrides the file)")
    parser.add_argument("--max-workers", type=int, metavar="N", help="workers (overrides)")
    parser.add_argument("--replications", type=int, metavar="N", help="replications (overrides)")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the results already in the output directory and run only the rest",
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar (default: only on a terminal)",
    )
    parser.set_defaults(command_fn=_cmd_experiment)


def _example_study() -> str:
    """The example study, its model the bank of the checkout simulacra runs from.

    The bank is found beside the package (a checkout, or an editable install); a
    package installed without its checkout falls back to ``examples/bank.py``,
    which runs where a study file is saved in the repository root.
    """
    import simulacra  # noqa: PLC0415

    bank = Path(simulacra.__file__).resolve().parents[2] / "examples" / "bank.py"
    model = f"{bank}:run" if bank.is_file() else "examples/bank.py:run"
    # A TOML basic string: JSON's escapes of a str are TOML's.
    return EXAMPLE_STUDY.format(model=json.dumps(model))


def _cmd_experiment(args: argparse.Namespace) -> int:
    import simulacra  # noqa: PLC0415  (layer 7 uses the front door, and only when needed)

    if args.example:
        print(_example_study(), end="")
        return 0
    if args.study is None:
        print("error: give a STUDY file (.toml or .json); `simulacra experiment --example` "
              "prints one", file=sys.stderr)
        return EXIT_USAGE

    path = Path(args.study)
    try:
        study = _read_study(path)
        _apply_overrides(study, args)
        settings = _check_study(study, path)
    except StudyError as exc:
        print(f"error: {path}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    output = settings["output"]
    try:  # before any replication runs: a study must not fail at its last line
        import polars  # noqa: F401, PLC0415  (checked here, used by the results)
    except ImportError:
        print("error: simulacra experiment writes its results with polars, which is not "
              f"installed: {install_hint('parallel')}", file=sys.stderr)
        return EXIT_USAGE
    with _on_sys_path(Path.cwd(), path.resolve().parent):
        try:
            experiment = simulacra.Experiment(
                settings["model"],
                settings["configs"],
                master_seed=settings["master_seed"],
                spool_dir=output,
                convention=settings["convention"],
                common_random_numbers=settings["common_random_numbers"],
                scenarios=settings["scenarios"],
            )
            results = experiment.run(
                settings["replications"],
                settings["backend"],
                settings["max_workers"],
                scheduler_address=settings["scheduler_address"],
                retries=settings["retries"],
                resume=args.resume,
                progress=args.progress,
            )
            summary = results.summary(settings["confidence"])
            effects = (results.scenario_effects(settings["confidence"])
                       if experiment.scenarios else None)
        except simulacra.ConfigError as exc:
            print(f"error: {path}: {_in_cli_words(str(exc))}", file=sys.stderr)
            return EXIT_USAGE
        except simulacra.SpoolError as exc:
            # Found before any replication ran: the output directory holds another
            # study, or its study.json or results.jsonl is damaged (bad input).
            print(f"error: {_in_cli_words(str(exc))}", file=sys.stderr)
            return EXIT_USAGE
        except simulacra.BackendUnavailable as exc:
            # A backend this Python cannot run (interpreters before 3.13, dask not
            # installed), found before anything is written, or one that cannot run
            # this model: bad input, the message says what to use instead.
            print(f"error: {_in_cli_words(str(exc))}", file=sys.stderr)
            return EXIT_USAGE
        except simulacra.SimError as exc:
            print(f"error: {type(exc).__name__}: {_in_cli_words(str(exc))}", file=sys.stderr)
            return EXIT_SIM_ERROR
    results.to_csv(output / "results.csv")
    results.to_parquet(output / "results.parquet")
    summary.write_csv(output / "summary.csv")
    out = sys.stdout
    say = _printer(out)
    say(
        f"{experiment.model}: {plural(len(results.configs), 'config')} x "
        f"{plural(results.replications, 'replication')} on {results.backend} "
        f"({results.backend_reason})"
        + (f"; {results.resumed} resumed" if results.resumed else "")
    )
    files = "results.csv, results.parquet, summary.csv"
    if effects is None:
        _print_summary(summary.rows(named=True), settings["confidence"], out)
    else:
        effects.write_csv(output / "effects.csv")
        files += ", effects.csv"
        _print_effects(effects.rows(named=True), settings["confidence"], out)
    say(f"results in {output}: {files}")
    return EXIT_OK


def _printer(out: TextIO) -> Any:
    """print() to *out*, folded at word boundaries to the width of a terminal."""
    import shutil  # noqa: PLC0415
    import textwrap  # noqa: PLC0415

    width = shutil.get_terminal_size((80, 24)).columns if out.isatty() else 0

    def say(text: str) -> None:
        lines = textwrap.wrap(text, width=width, subsequent_indent="  ",
                              break_on_hyphens=False) if width else [text]
        for line in lines:
            print(line, file=out)

    return say


def _read_study(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise StudyError(f"cannot read the study file ({exc.strerror or exc})") from None
    try:
        if path.suffix == ".json":
            data = json.loads(raw)
        elif path.suffix == ".toml":
            data = tomllib.loads(raw.decode("utf-8"))
        else:
            raise StudyError(f"the study file must end in .toml or .json, got {path.suffix!r}")
    except (ValueError, UnicodeDecodeError) as exc:  # TOMLDecodeError and JSONDecodeError
        raise StudyError(f"not valid {path.suffix[1:].upper()}: {exc}") from None
    if not isinstance(data, dict):
        raise StudyError(f"the study must be a table of settings, got {type(data).__name__}")
    return data


def _apply_overrides(study: dict[str, Any], args: argparse.Namespace) -> None:
    for key in ("output", "backend", "max_workers", "replications"):
        value = getattr(args, key)
        if value is not None:
            # --output is a command-line path: relative to the working directory.
            study[key] = str(Path(value).resolve()) if key == "output" else value


def _expect(condition: bool, key: str, value: object) -> None:
    if not condition:
        raise StudyError(f"{key} must be {_KEYS[key]}, got {type(value).__name__} {value!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_study(study: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """Check every field of *study* and return the settings to run it with."""
    unknown = sorted(set(study) - set(_KEYS))
    if unknown:
        raise StudyError(f"unknown key {unknown[0]!r}; the known keys are {', '.join(_KEYS)}")
    for key in ("model", "master_seed", "replications"):
        if key not in study:
            raise StudyError(f"{key} is missing: it must be {_KEYS[key]}")
    here = path.resolve().parent
    model = study["model"]
    _expect(isinstance(model, str) and ":" in model, "model", model)
    where, _, function = model.rpartition(":")
    if where.endswith(".py") or "/" in where or "\\" in where:
        file = (here / where).resolve()
        if not file.is_file():
            raise StudyError(f"model = {study['model']!r}: no file {str(file)!r} (a path in "
                             "the study is read relative to the study file's directory)")
        model = f"{file}:{function}"
    seed = study["master_seed"]
    _expect(_is_int(seed) or isinstance(seed, str), "master_seed", seed)
    replications = study["replications"]
    _expect(_is_int(replications) and replications >= 1, "replications", replications)
    convention = study.get("convention", "run")
    _expect(convention in ("run", "stream"), "convention", convention)
    backend = study.get("backend", "auto")
    _expect(isinstance(backend, str), "backend", backend)
    max_workers = study.get("max_workers")
    _expect(
        max_workers is None or (_is_int(max_workers) and max_workers >= 1),
        "max_workers",
        max_workers,
    )
    address = study.get("scheduler_address")
    _expect(address is None or isinstance(address, str), "scheduler_address", address)
    retries = study.get("retries", 3)
    _expect(_is_int(retries) and retries >= 0, "retries", retries)
    common = study.get("common_random_numbers", False)
    _expect(isinstance(common, bool), "common_random_numbers", common)
    confidence = study.get("confidence", 0.95)
    _expect(
        isinstance(confidence, int | float)
        and not isinstance(confidence, bool)
        and 0 < confidence < 1,
        "confidence",
        confidence,
    )
    output = study.get("output", f"{path.stem}-results")
    _expect(isinstance(output, str) and bool(output), "output", output)
    scenarios = study.get("scenarios")
    _expect(scenarios is None or (isinstance(scenarios, str) and bool(scenarios)),
            "scenarios", scenarios)
    return {
        "scenarios": None if scenarios is None else here / scenarios,
        "model": model,
        "master_seed": seed,
        "replications": replications,
        "convention": convention,
        "backend": backend,
        "max_workers": max_workers,
        "scheduler_address": address,
        "retries": retries,
        "common_random_numbers": common,
        "confidence": float(confidence),
        "output": here / output,
        "configs": _configs(study),
    }


def _configs(study: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The configs of a study: ``base`` merged under each of ``configs`` or the ``grid``."""
    import simulacra  # noqa: PLC0415

    base = study.get("base", {})
    _expect(isinstance(base, dict), "base", base)
    if "grid" in study and "configs" in study:
        raise StudyError("give either grid or configs, not both")
    if "grid" in study:
        grid = study["grid"]
        if grid == {}:
            raise StudyError("grid is empty: give each parameter a list of values "
                             "(servers = [2, 3]), or leave [grid] out for one config")
        _expect(isinstance(grid, dict), "grid", grid)
        for name, values in grid.items():
            if not isinstance(values, list) or not values:
                raise StudyError(
                    f"grid.{name} must be a non-empty list of values, got "
                    f"{type(values).__name__} {values!r}"
                )
        varying = simulacra.config_grid(grid)
    elif "configs" in study:
        configs = study["configs"]
        _expect(isinstance(configs, list) and bool(configs), "configs", configs)
        for i, config in enumerate(configs):
            if not isinstance(config, dict):
                raise StudyError(
                    f"configs[{i}] must be a table of parameters, got "
                    f"{type(config).__name__} {config!r}"
                )
        varying = configs
    else:
        varying = [{}]
    return [{**base, **config} for config in varying]


@contextlib.contextmanager
def _on_sys_path(*directories: Path) -> Iterator[None]:
    """Put *directories* first on ``sys.path`` while the study runs (workers inherit it)."""
    entries = [str(d) for d in directories]
    sys.path[:0] = entries
    try:
        yield
    finally:
        for entry in entries:
            with contextlib.suppress(ValueError):
                sys.path.remove(entry)


def _number(value: object) -> str:
    """Four significant figures, never in exponent form below 1e15 (the files keep every digit)."""
    if not isinstance(value, float):
        return str(value)
    if math.isnan(value):  # one replication has no interval
        return "n/a"
    if 1e4 <= abs(value) < 1e15:
        return f"{value:.0f}"
    return f"{value:.4g}"


def _halfwidth(row: Mapping[str, Any]) -> str:
    """The CI half-width, or "constant" for a KPI that did not vary (no fake interval)."""
    half, mean = row["halfwidth"], row["mean"]
    if isinstance(half, float) and isinstance(mean, float) and half <= 1e-12 * max(1.0,
                                                                                   abs(mean)):
        return "constant"
    return _number(half)


def _varying(rows: list[dict[str, Any]], fields: list[str], out: TextIO,
             keep: tuple[str, ...] = ("kpi",)) -> list[str]:
    """The fields whose value differs between rows; the others are printed above the table.

    A column that holds one value in every row spends 80 columns on nothing.
    """
    varying = [name for name in fields
               if name in keep or len({str(row.get(name)) for row in rows}) > 1]
    same = [f"{name}={_number(rows[0][name])}" for name in fields
            if name not in varying and name != "config_index"]
    if same:
        print("for " + ", ".join(same), file=out)
    return varying


def _print_effects(rows: list[dict[str, Any]], confidence: float, out: TextIO) -> None:
    """Each scenario's KPIs beside their difference from the baseline, with rich.

    One table per config (a ``for servers=3`` line above it): config columns
    beside the scenario and KPI columns would fold names in an 80-column terminal.
    """
    from rich import box  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415
    from rich.console import Console  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415
    from rich.table import Table  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415

    stats = {"n", "mean", "halfwidth", "ci_low", "ci_high", "difference", "diff_halfwidth",
             "diff_low", "diff_high"}
    fields = _varying(rows, [name for name in (rows[0] if rows else {}) if name not in stats],
                      out, keep=("scenario", "kpi"))
    config = [name for name in fields if name not in ("scenario", "kpi", "config_index")]
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(_number(row[name]) for name in config), []).append(row)
    console = Console(file=out, highlight=False)
    if not console.is_terminal:
        console.width = max(console.width, 120)  # a file or a pipe: never fold a row
    longest = max((len(str(row.get("scenario", ""))) for row in rows), default=8)
    for number, (key, members) in enumerate(groups.items()):
        if config:
            console.print(("\n" if number else "") + ", ".join(
                f"{name}={value}" for name, value in zip(config, key, strict=True)))
        table = Table(box=box.SIMPLE_HEAD, show_edge=False)
        table.add_column("scenario", overflow="fold", min_width=min(longest, 17))
        table.add_column("kpi", no_wrap=True)
        table.add_column("mean", justify="right", no_wrap=True)
        table.add_column("±", justify="right", no_wrap=True)
        table.add_column("vs base", justify="right", no_wrap=True)
        table.add_column(f"± {confidence:.0%}", justify="right", no_wrap=True)
        names = [str(row.get("scenario", "")) for row in members]
        for index, row in enumerate(members):
            scenario = names[index]
            baseline = scenario == "baseline"
            table.add_row(
                scenario if index == 0 or names[index - 1] != scenario else "",
                _number(row["kpi"]),
                _number(row["mean"]),
                _halfwidth(row),
                "" if baseline else f"{row['difference']:+.4g}",
                "" if baseline else _halfwidth({"halfwidth": row["diff_halfwidth"],
                                                "mean": row["difference"]}),
                # a rule under each scenario's last KPI
                end_section=index + 1 < len(members) and names[index + 1] != scenario,
            )
        console.print(table)


def _print_summary(rows: list[dict[str, Any]], confidence: float, out: TextIO) -> None:
    """Print the summary rows as a table, with rich."""
    from rich import box  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415
    from rich.console import Console  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415
    from rich.table import Table  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415

    stats = {"n", "mean", "std", "halfwidth", "ci_low", "ci_high"}
    fields = _varying(rows, [name for name in (rows[0] if rows else {}) if name not in stats],
                      out)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    for name in fields:
        if name == "kpi":
            table.add_column(name, no_wrap=True)
        else:
            table.add_column("config" if name == "config_index" else name, overflow="fold")
    table.add_column("mean", justify="right", no_wrap=True)
    table.add_column(f"± {confidence:.0%}", justify="right", no_wrap=True)
    table.add_column("n", justify="right", no_wrap=True)
    for row in rows:
        table.add_row(
            *(_number(row[name]) for name in fields),
            _number(row["mean"]),
            _halfwidth(row),
            str(row["n"]),
        )
    console = Console(file=out, highlight=False)
    if not console.is_terminal:
        console.width = max(console.width, 120)  # a file or a pipe: never fold a row
    console.print(table)
