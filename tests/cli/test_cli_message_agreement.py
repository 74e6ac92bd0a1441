"""Messages say a path once, and a count agrees with its noun.

A tester read "died 1 times", "the study's results is damaged" and lines that named
the same file twice ("X: X is not a recording store", "cannot read config file 'X':
[Errno 21] Is a directory: 'X'"). Each case runs ``python -m simulacra`` in a
subprocess, except the helpers every such message is written with.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from simulacra._util import naming, os_problem, plural

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "social" / "config.yaml"

pytestmark = pytest.mark.timeout(180)

MODEL = """\
def run(seed=0, x=1):
    return {"y": (seed % 7) * x}
"""


def _simulacra(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "simulacra", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=150, check=False)


def _one_line(done: subprocess.CompletedProcess[str], status: int = 2) -> str:
    assert done.returncode == status, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: "), done.stderr
    return lines[0]


def _study(tmp_path: Path, *, replications: int = 1) -> Path:
    (tmp_path / "model.py").write_text(MODEL, encoding="utf-8")
    study = tmp_path / "study.toml"
    study.write_text(f'model = "model.py:run"\nmaster_seed = 1\nreplications = {replications}\n'
                     'backend = "sequential"\noutput = "out"\n', encoding="utf-8")
    return study


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("finished") / "run"
    done = _simulacra("run", str(CONFIG), "sim.agents=6", "sim.steps=3", "--out", str(where),
                      "--no-progress", cwd=where.parent)
    assert done.returncode == 0, done.stderr
    return where


def test_the_helpers() -> None:
    assert [plural(n, "step") for n in (0, 1, 2)] == ["0 steps", "1 step", "2 steps"]
    assert plural(1, "entry", "entries") == "1 entry"
    assert plural(3, "entry", "entries") == "3 entries"
    assert plural(12000, "call", grouped=True) == "12,000 calls"
    with pytest.raises(OSError) as info:
        Path("/").read_text()
    assert os_problem(info.value) == "Is a directory"
    assert os_problem(OSError("no errno")) == "no errno"
    message = Exception("/x/store is not a recording store: file is not a database")
    assert naming("/x/store", message) == str(message)
    assert naming("/x/file", ValueError("bad")) == "/x/file: bad"


def test_one_config_and_one_replication_agree_in_number(tmp_path: Path) -> None:
    study = _study(tmp_path)
    done = _simulacra("experiment", str(study), "--no-progress", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "model.py:run: 1 config x 1 replication on sequential" in done.stdout
    line = _one_line(_simulacra("experiment", str(study), "--no-progress", cwd=tmp_path))
    assert "already holds 1 finished replication of this study; add --resume" in line


def test_a_damaged_study_results_file_is_named_in_good_grammar(tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    study = _study(tmp_path, replications=2)
    assert _simulacra("experiment", str(study), "--no-progress", cwd=tmp_path).returncode == 0
    results = tmp_path / "out" / "results.jsonl"
    results.write_text(results.read_text(encoding="utf-8") + "not json\n", encoding="utf-8")
    line = _one_line(_simulacra("report", str(tmp_path / "out"), cwd=tmp_path))
    assert line == f"error: {results}: line 3 is not JSON; the study's results file is damaged"


def test_a_study_json_that_is_a_directory_is_named_once(tmp_path: Path) -> None:
    study = _study(tmp_path)
    (tmp_path / "out" / "study.json").mkdir(parents=True)
    line = _one_line(_simulacra("experiment", str(study), "--no-progress", cwd=tmp_path))
    where = str(tmp_path / "out" / "study.json")
    assert line == f"error: {where!r} cannot be read as a study: Is a directory"


def test_a_run_config_that_is_a_directory_is_named_once(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").mkdir()
    line = _one_line(_simulacra("run", "config.yaml", "--no-progress", cwd=tmp_path))
    assert line == "error: cannot read config file 'config.yaml': Is a directory"


def test_a_report_that_cannot_be_written_is_named_once(finished: Path, tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    (run / "report.html").mkdir()
    line = _one_line(_simulacra("report", str(run), cwd=tmp_path))
    assert line == f"error: cannot write the report {str(run / 'report.html')!r}: Is a directory"


def test_a_resume_with_a_log_missing_says_missing(finished: Path, tmp_path: Path) -> None:
    """It said "-1 bytes, shorter than the N the checkpoint was taken at"."""
    run = tmp_path / "run"
    done = _simulacra("run", str(CONFIG), "sim.agents=6", "sim.steps=6",
                      "run.checkpoint_every=1", "run.budget.tokens=3000", "--out", str(run),
                      "--no-progress", cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    (run / "telemetry.jsonl").unlink()
    line = _one_line(_simulacra("run", "--resume", str(run), "run.budget.tokens=100000",
                                "--no-progress", cwd=tmp_path))
    assert line == (f"error: {run / 'telemetry.jsonl'}: missing; the run directory was "
                    "changed")


def test_a_run_directory_that_cannot_be_written_is_named_once(tmp_path: Path) -> None:
    (tmp_path / "run" / "telemetry.jsonl").mkdir(parents=True)
    line = _one_line(_simulacra("run", str(CONFIG), "sim.agents=6", "sim.steps=3", "--out",
                                "run", "--no-progress", cwd=tmp_path))
    assert line == "error: cannot write run directory 'run': Is a directory (telemetry.jsonl)"

    (tmp_path / "a-file").write_text("", encoding="utf-8")
    line = _one_line(_simulacra("run", str(CONFIG), "--out", "a-file/run", "--no-progress",
                                cwd=tmp_path))
    assert line == "error: cannot write run directory 'a-file/run': Not a directory"
