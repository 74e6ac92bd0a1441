"""``simulacra experiment STUDY``: study files, outputs, resume and errors (in-process)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import _experiment_models as models  # noqa: E402

from simulacra.cli import main  # noqa: E402

pl = pytest.importorskip("polars")


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def bank_study(tmp_path: Path, backend: str = "sequential", extra: str = "") -> Path:
    # The model path is relative to the study file's directory.
    (tmp_path / "models").mkdir(exist_ok=True)
    (tmp_path / "models" / "bank.py").write_text(
        models.BANK.read_text(encoding="utf-8"), encoding="utf-8"
    )
    return write(
        tmp_path / "bank.toml",
        f"""\
        model = "models/bank.py:run"
        master_seed = 2025
        replications = 3
        backend = "{backend}"
        max_workers = 2
        {extra}
        [base]
        customers = 500
        [grid]
        servers = [3, 4]
        arrival_rate = [2.0, 2.5]
        """,
    )


def test_a_toml_grid_study_runs_and_writes_its_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = bank_study(tmp_path)

    assert main(["experiment", str(study)]) == 0

    out = capsys.readouterr().out
    output = tmp_path / "bank-results"
    assert "4 configs x 3 replications on sequential (requested)" in out
    assert "mean_wait" in out
    assert "± 95%" in out
    assert "for customers=500" in out  # one value in every row: above the table
    assert f"results in {output}" in out
    table = pl.read_csv(output / "results.csv")
    assert table.columns[:5] == [
        "config_index",
        "replication",
        "customers",
        "servers",
        "arrival_rate",
    ]
    assert table.height == 12
    assert table["servers"].to_list() == [3] * 6 + [4] * 6  # the first grid key varies slowest
    assert pl.read_parquet(output / "results.parquet").height == 12
    summary = pl.read_csv(output / "summary.csv")
    assert summary.filter(pl.col("kpi") == "served")["mean"].to_list() == [500.0] * 4
    assert {p.name for p in output.iterdir()} == {
        "study.json",
        "results.jsonl",
        "results.csv",
        "results.parquet",
        "summary.csv",
    }


def test_the_same_study_on_processes_writes_the_same_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sequential = bank_study(tmp_path)
    monkeypatch.chdir(tmp_path)  # --output is relative to the working directory
    assert main(["experiment", str(sequential), "--output", "seq"]) == 0
    assert main(["experiment", str(sequential), "--output", "proc", "--backend", "processes"]) == 0

    assert (tmp_path / "seq" / "results.csv").read_bytes() == (
        tmp_path / "proc" / "results.csv"
    ).read_bytes()


def test_a_json_study_of_configs_with_a_stream_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = tmp_path / "draws.json"
    study.write_text(
        json.dumps(
            {
                "model": "_experiment_models:draws",
                "convention": "stream",
                "master_seed": "seven",
                "replications": 2,
                "backend": "threads",
                "configs": [{"label": "x"}, {"label": "y"}],
                "output": "out",
                "confidence": 0.9,
            }
        ),
        encoding="utf-8",
    )

    assert main(["experiment", str(study)]) == 0

    assert "± 90%" in capsys.readouterr().out
    table = pl.read_csv(tmp_path / "out" / "results.csv")
    assert table["label"].to_list() == ["x", "x", "y", "y"]


def test_rerunning_needs_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = bank_study(tmp_path)
    assert main(["experiment", str(study)]) == 0
    capsys.readouterr()

    assert main(["experiment", str(study)]) == 2
    assert "add --resume to keep them and run only the rest, or give another --output DIR" in (
        capsys.readouterr().err)

    assert main(["experiment", str(study), "--resume", "--replications", "4"]) == 0
    assert "; 12 resumed" in capsys.readouterr().out
    assert pl.read_csv(tmp_path / "bank-results" / "results.csv").height == 16


def test_a_model_bug_exits_1_and_names_the_replication(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = write(
        tmp_path / "buggy.toml",
        """\
        model = "_experiment_models:buggy"
        convention = "stream"
        master_seed = 1
        replications = 3
        backend = "sequential"
        [[configs]]
        index = 0
        [[configs]]
        index = 1
        """,
    )

    assert main(["experiment", str(study)]) == 1

    err = capsys.readouterr().err
    assert err.startswith(
        "error: ReplicationFailed: model _experiment_models:buggy raised for config 1"
    )
    assert "replication 2: ZeroDivisionError" in err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'model = "m:f"\nmaster_seed = 1\nreplications = 2\nworkers = 3\n',
            "unknown key 'workers'; the known keys are model, convention",
        ),
        ("master_seed = 1\nreplications = 2\n", "model is missing: it must be a str"),
        (
            'model = "m:f"\nmaster_seed = 1\nreplications = "2"\n',
            "replications must be an int >= 1, got str '2'",
        ),
        (
            'model = "m:f"\nmaster_seed = 1.5\nreplications = 2\n',
            "master_seed must be an int or a str, got float 1.5",
        ),
        (
            'model = "m:f"\nmaster_seed = 1\nreplications = 2\nconvention = "kw"\n',
            "convention must be 'run' or 'stream'",
        ),
        (
            'model = "m:f"\nmaster_seed = 1\nreplications = 2\n[grid]\nx = 3\n',
            "grid.x must be a non-empty list of values, got int 3",
        ),
        (
            'model = "m:f"\nmaster_seed = 1\nreplications = 2\n[grid]\n',
            r"grid is empty: give each parameter a list of values \(servers = \[2, 3\]\)",
        ),
        (
            'model = "m:f"\nmaster_seed = 1\nreplications = 2\nconfigs = [{}]\n[grid]\nx = [3]\n',
            "give either grid or configs, not both",
        ),
        (
            'model = "m:f"\nmaster_seed = 1\nreplications = 2\nconfigs = [1]\n',
            r"configs\[0\] must be a table of parameters",
        ),
        (
            'model = "m:f"\nmaster_seed = 1\nreplications = 2\nconfidence = 95\n',
            "confidence must be a number strictly between 0 and 1",
        ),
        ("model = \n", "not valid TOML"),
        (
            'model = "nowhere.py:run"\nmaster_seed = 1\nreplications = 2\n',
            "model = .nowhere.py:run.: no file .*nowhere.py. \\(a path in the study",
        ),
        (
            'model = "no_such_pkg_xyz:run"\nmaster_seed = 1\nreplications = 2\n',
            "model: no module named 'no_such_pkg_xyz'",
        ),
        (
            'model = "_experiment_models:run_style"\nmaster_seed = 1\nreplications = 2\n'
            'backend = "gpu"\n',
            "backend must be one of 'auto'",
        ),
    ],
)
def test_bad_study_files_exit_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    study = write(tmp_path / "study.toml", text)

    assert main(["experiment", str(study)]) == 2

    err = capsys.readouterr().err
    assert err.startswith(f"error: {study}: ")
    assert pytest.importorskip("re").search(message, err), err


def test_a_study_file_must_be_toml_or_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = write(tmp_path / "study.yaml", "model: x\n")

    assert main(["experiment", str(study)]) == 2
    assert "must end in .toml or .json, got '.yaml'" in capsys.readouterr().err
    assert main(["experiment", str(tmp_path / "missing.toml")]) == 2
    assert "cannot read the study file" in capsys.readouterr().err


def test_a_study_with_a_scenarios_directory_writes_its_effects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from simulacra.scenarios import Scenario

    Scenario(name="rush", interventions=[{"knob": "demand", "at": 10, "value": 1.2,
                                          "duration": 50}]).save(tmp_path / "scenarios")
    study = bank_study(tmp_path, extra='scenarios = "scenarios"')

    assert main(["experiment", str(study), "--no-progress"]) == 0
    out = capsys.readouterr().out
    effects = pl.read_csv(tmp_path / "bank-results" / "effects.csv")
    assert sorted(set(effects["scenario"].to_list())) == ["baseline", "rush"]
    assert len(effects.filter(pl.col("kpi") == "mean_wait")) == 8  # 4 configs x 2
    assert "vs base" in out
    table = pl.read_csv(tmp_path / "bank-results" / "results.csv")
    assert len(table) == 4 * 2 * 3


def test_a_scenarios_path_that_is_not_a_directory_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = bank_study(tmp_path, extra='scenarios = "nowhere"')

    assert main(["experiment", str(study), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "is not a directory of scenario artifacts" in err[0]
