"""``simulacra`` on the command line: run in-process through ``main(argv)``."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from simulacra._version import __version__
from simulacra.cli import main

SRC = Path(__file__).resolve().parents[2] / "src"

MODEL = """\
import simulacra
from simulacra import Sim


def customer(sim, bank, served):
    with bank.request() as req:
        yield req
        yield sim.delay(sim.rng("service").expovariate(1.0))
    served.append(sim.now)


def run(seed: int = 0, customers: int = 5, servers: int = 2, label: str = "bank"):
    sim = Sim(seed=seed)
    bank = simulacra.Resource(sim, capacity=servers)
    served = []
    for _ in range(customers):
        sim.spawn(customer, bank, served)
    sim.run()
    return {"served": len(served), "makespan": sim.now, "label": label}


def echo(**params):
    return {key: f"{type(value).__name__} {value!r}" for key, value in params.items()}


def listy(seed: int = 0):
    return [1, 2]


def nested(seed: int = 0):
    return {"histogram": [1, 2]}


def sim_error(seed: int = 0):
    Sim(seed=seed).delay(-1.0)


def buggy(seed: int = 0):
    return {"x": 1 / 0}


def inner_type_error(seed: int = 0):
    return len(seed)


NOT_A_FUNCTION = 3
"""


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """A small bank model on the real kernel, in a file of its own."""
    path = tmp_path / "bank" / "model.py"
    path.parent.mkdir()
    path.write_text(MODEL, encoding="utf-8")
    return path


def _call_directly(path: Path, name: str = "run", **kwargs: Any) -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location("direct_model_for_test", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result: dict[str, Any] = getattr(module, name)(**kwargs)
    return result


def _table(text: str) -> dict[str, str]:
    """Read the KPI table back: name -> printed value (rich or plain layout)."""
    rows = {}
    for line in text.splitlines():
        cells = [cell for cell in re.split(r"[\s│┃|]+", line) if cell]
        if len(cells) == 2 and cells != ["KPI", "value"]:
            rows[cells[0]] = cells[1]
    return rows


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0

    assert capsys.readouterr().out == f"simulacra {__version__}\n"


def test_version_through_python_dash_m() -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-m", "simulacra", "--version"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )

    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        f"simulacra {__version__}\n",
        "",
    )


@pytest.mark.parametrize("rich_installed", [True, False])
def test_run_prints_the_kpis_the_model_returns(
    model: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    rich_installed: bool,
) -> None:
    """The table shows every KPI with the value a direct call returns, floats to 4 figures."""
    if not rich_installed:
        monkeypatch.setitem(sys.modules, "rich", None)  # the plain-text fallback
    expected = _call_directly(model, seed=7, customers=6)

    status = main(["run", str(model), "--seed", "7", "--set", "customers=6"])
    out = capsys.readouterr().out

    assert status == 0
    printed = _table(out)
    assert set(printed) == set(expected)
    for name, value in expected.items():
        if isinstance(value, float):
            assert printed[name] == f"{value:.4g}", name  # --json keeps every digit
        else:
            assert type(value)(printed[name]) == value, name
    assert expected["served"] == 6


def test_run_json_prints_exactly_the_returned_mapping(
    model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = _call_directly(model, seed=3)

    assert main(["run", str(model), "--seed", "3", "--json"]) == 0

    assert json.loads(capsys.readouterr().out) == expected


def test_same_seed_same_output_and_the_seed_matters(
    model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs = []
    for seed in ("11", "11", "12"):
        assert main(["run", str(model), "--seed", seed, "--json"]) == 0
        outputs.append(capsys.readouterr().out)

    assert outputs[0] == outputs[1]
    assert outputs[0] != outputs[2]


def test_set_values_are_json_or_else_strings(
    model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = [
        "n=3",
        "rate=0.5",
        "name=fleet",
        "flag=true",
        "nothing=null",
        "ids=[1, 2]",
        'quoted="7"',
        "empty=",
        "formula=a=b",
    ]
    argv = ["run", f"{model}:echo", "--json"]
    for item in settings:
        argv += ["--set", item]

    assert main(argv) == 0

    assert json.loads(capsys.readouterr().out) == {
        "n": "int 3",
        "rate": "float 0.5",
        "name": "str 'fleet'",
        "flag": "bool True",
        "nothing": "NoneType None",
        "ids": "list [1, 2]",
        "quoted": "str '7'",
        "empty": "str ''",
        "formula": "str 'a=b'",
    }


def test_seed_is_passed_only_when_given(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", f"{model}:echo", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {}

    assert main(["run", f"{model}:echo", "--json", "--seed", "5"]) == 0
    assert json.loads(capsys.readouterr().out) == {"seed": "int 5"}


def test_targets_file_directory_and_module(
    model: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A file, file:func, a directory with model.py and package.module:func all work."""
    package = tmp_path / "cli_test_models_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "bank.py").write_text(MODEL, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    path_before = list(sys.path)
    expected = _call_directly(model, seed=2)

    outputs = []
    try:
        for target in (
            str(model),
            f"{model}:run",
            str(model.parent),
            "cli_test_models_pkg.bank:run",
            "cli_test_models_pkg.bank",
        ):
            assert main(["run", target, "--seed", "2", "--json"]) == 0, target
            outputs.append(json.loads(capsys.readouterr().out))
    finally:
        for name in ("cli_test_models_pkg", "cli_test_models_pkg.bank"):
            sys.modules.pop(name, None)

    assert outputs == [expected] * 5
    assert sys.path == path_before
    assert "__simulacra_model__" not in sys.modules


def test_a_model_split_over_files_imports_its_parts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The model's directory is on sys.path while it runs, as with `python model.py`."""
    (tmp_path / "cli_test_helper_part.py").write_text("ANSWER = 42\n", encoding="utf-8")
    (tmp_path / "model.py").write_text(
        "from cli_test_helper_part import ANSWER\n\ndef run():\n    return {'answer': ANSWER}\n",
        encoding="utf-8",
    )
    try:
        assert main(["run", str(tmp_path), "--json"]) == 0
    finally:
        sys.modules.pop("cli_test_helper_part", None)

    assert json.loads(capsys.readouterr().out) == {"answer": 42}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{tmp}/missing.py"], "error: file not found: '{tmp}/missing.py'"),
        (["{tmp}"], "error: file not found: directory '{tmp}' has no model.py"),
        (["no_such_module_for_cli_tests:run"], "error: no module named 'no_such_module_for_cli"),
        (["{model}:nope"], "error: no such function: 'nope' in '{model}'"),
        (["{model}:NOT_A_FUNCTION"], "error: {model}:NOT_A_FUNCTION is not callable: its type"),
        (["{model}:listy"], "error: {model}:listy returned list, expected a mapping"),
        (["{model}:nested"], "error: {model}:nested returned KPI 'histogram' = [1, 2] (list)"),
        (["{model}", "--set", "servers"], "error: --set expects KEY=VALUE, got 'servers'"),
        (["{model}", "--set", "2x=1"], "error: --set key '2x' (in '2x=1') must be a Python"),
        (["{model}", "--set", "a=1", "--set", "a=2"], "error: --set a=... was given twice"),
        (["{model}", "--set", "typo=1"], "error: cannot call {model}:run with typo=1: got an"),
        (["{model}", "--seed", "1", "--set", "seed=2"], "error: --seed and --set seed=..."),
        (["{model}:bad-name"], "error: TARGET '{model}:bad-name': function name 'bad-name'"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    model: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    """Each mistake is named in one line on stderr, and nothing is printed on stdout."""
    fill = {"tmp": str(tmp_path), "model": str(model)}
    argv = ["run", *(arg.format(**fill) for arg in args)]

    status = main(argv)
    captured = capsys.readouterr()

    assert status == 2
    assert captured.out == ""
    assert captured.err.startswith(message.format(**fill)), captured.err
    assert captured.err.count("\n") == 1


@pytest.mark.parametrize(
    "argv", [[], ["frobnicate"], ["run"], ["run", "model.py", "--seed", "abc"]]
)
def test_argparse_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "usage: simulacra" in capsys.readouterr().err


def test_a_simulation_error_is_reported_and_exits_1(
    model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["run", f"{model}:sim_error"])
    captured = capsys.readouterr()

    assert status == 1
    assert captured.out == ""
    assert captured.err.startswith("error: InvalidDelay: ")
    assert captured.err.count("\n") == 1


@pytest.mark.parametrize(
    ("function", "exception"), [("buggy", ZeroDivisionError), ("inner_type_error", TypeError)]
)
def test_other_exceptions_are_bugs_and_keep_their_traceback(
    model: Path, function: str, exception: type[Exception]
) -> None:
    """Only SimError is a modelling outcome; anything else propagates."""
    with pytest.raises(exception):
        main(["run", f"{model}:{function}"])


def test_the_progress_bar_of_a_partial_participation_run_ends_full() -> None:
    """With participation below 1 the bar's total is the expected turns, exact once done
    (it read 49,948/1,000,000 at the end of a million-agent run at 0.05)."""
    from types import SimpleNamespace

    from simulacra.cli._society import _progress
    from simulacra.societies import load_config

    root = Path(__file__).resolve().parents[2]
    config = load_config(root / "examples" / "social" / "config.yaml",
                         ["sim.agents=1000", "sim.steps=3", "sim.engine.participation=0.25"])
    bar = _progress(True, config, "test")
    task = bar._bar.tasks[0]
    assert task.total == 750
    done = 0
    with bar.shown():  # stops the bar's refresh thread at the end
        for step, participants in enumerate((240, 262, 251)):
            done += participants
            bar.step(SimpleNamespace(step=step, participants=participants))
            assert task.completed == done
            assert task.total == done + (2 - step) * 250
    assert task.completed == task.total == 753
    assert not bar._bar.live.is_started
