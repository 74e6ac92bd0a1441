"""``simulacra experiment`` speaks in the flags and study keys its user typed.

Its messages came from ``Experiment`` and named the Python API: ``pass resume=True``,
``spool_dir``, ``model_fn``, words a command-line user never typed. The command line
now says ``--resume``, ``--output DIR``, ``model``; the Python API keeps its own words.
Every case runs ``python -m simulacra experiment`` in a subprocess.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from simulacra import ConfigError, Experiment

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(180)

#: Words of the Python API that no message of the command line may hold.
API_WORDS = ("spool_dir", "resume=True", "resume is False", "without resume", "model_fn")

MODEL = """\
import os

def run(seed=0, x=1):
    return {"y": (seed % 7) * x}

def buggy(seed=0, x=1):
    if seed % 2:
        raise ValueError("boom")
    return {"y": 1.0}

def dies(seed=0, x=1):
    os._exit(3)
"""


def _experiment(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "simulacra", "experiment", *args,
                           "--no-progress"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=150, check=False)


def _line(done: subprocess.CompletedProcess[str], status: int) -> str:
    assert done.returncode == status, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for word in API_WORDS:
        assert word not in lines[0], lines[0]
    return lines[0]


def _study(tmp_path: Path, name: str = "study.toml", *, model: str = "run",
           extra: str = "") -> Path:
    (tmp_path / "model.py").write_text(MODEL, encoding="utf-8")
    study = tmp_path / name
    study.write_text(f'model = "model.py:{model}"\nmaster_seed = 1\nreplications = 4\n'
                     f'backend = "sequential"\noutput = "out"\n{extra}', encoding="utf-8")
    return study


def test_a_study_run_again_without_resume_names_the_flags(tmp_path: Path) -> None:
    study = _study(tmp_path)
    assert _experiment(str(study), cwd=tmp_path).returncode == 0
    out = tmp_path / "out"
    line = _line(_experiment(str(study), cwd=tmp_path), 2)
    assert line == (f"error: {study}: the output directory {str(out)!r} already holds 4 "
                    "finished replications of this study; add --resume to keep them and run "
                    "only the rest, or give another --output DIR")
    assert _experiment(str(study), "--resume", cwd=tmp_path).returncode == 0


def test_an_output_directory_of_another_study_names_the_flag(tmp_path: Path) -> None:
    study = _study(tmp_path)
    assert _experiment(str(study), cwd=tmp_path).returncode == 0
    out = tmp_path / "out"
    other = tmp_path / "other.toml"
    other.write_text(study.read_text().replace("master_seed = 1", "master_seed = 2"),
                     encoding="utf-8")
    line = _line(_experiment(str(other), cwd=tmp_path), 2)
    assert line == (f"error: the output directory {str(out)!r} holds a different study: its "
                    "master_seed is 1, this study's is 2; give this study another --output DIR")

    (tmp_path / "model.py").write_text(MODEL + "# changed\n", encoding="utf-8")
    line = _line(_experiment(str(study), "--resume", cwd=tmp_path), 2)
    assert line.startswith(f"error: the output directory {str(out)!r} holds results of "
                           "another version of the model")
    assert line.endswith("; run the study again with another --output DIR, or empty this one "
                         "to run it there afresh")
    # Without --resume it is refused just the same (the advice once said "or without resume").
    assert _line(_experiment(str(study), cwd=tmp_path), 2) == line
    # The advice works: another --output DIR, or this one emptied.
    assert _experiment(str(study), "--output", str(tmp_path / "elsewhere"),
                       cwd=tmp_path).returncode == 0
    shutil.rmtree(out)
    out.mkdir()
    assert _experiment(str(study), cwd=tmp_path).returncode == 0
    (tmp_path / "model.py").write_text(MODEL, encoding="utf-8")

    (out / "study.json").write_text('{"format": "something else"}\n', encoding="utf-8")
    line = _line(_experiment(str(study), "--resume", cwd=tmp_path), 2)
    assert line.endswith("is not a simulacra study (simulacra.study.v1); give this study "
                         "another --output DIR")


def test_an_output_directory_that_cannot_be_made_names_the_flag(tmp_path: Path) -> None:
    study = _study(tmp_path)
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    line = _line(_experiment(str(study), "--output", str(tmp_path / "a-file" / "out"),
                             cwd=tmp_path), 2)
    assert line.startswith(f"error: {study}: the output directory (output in the study file, "
                           "or --output DIR) must be a directory simulacra can create and "
                           "write, got ")


@pytest.mark.parametrize(("model", "status", "words"), [
    ("buggy", 1, "ValueError: boom"),
    ("dies", 1, "died 1 time ("),
])
def test_a_failed_study_says_how_to_finish_it_with_the_flag(
        tmp_path: Path, model: str, status: int, words: str) -> None:
    backend = "processes" if model == "dies" else "sequential"
    study = _study(tmp_path, model=model, extra="retries = 0\n")
    study.write_text(study.read_text().replace('"sequential"', f'"{backend}"'),
                     encoding="utf-8")
    line = _line(_experiment(str(study), "--max-workers", "1", cwd=tmp_path), status)
    assert words in line
    assert line.endswith(f"are kept in {str(tmp_path / 'out')!r}; once the cause is fixed, "
                         "the same command with --resume finishes the study (with another "
                         "--output DIR if the model changed)")
    # Advice for a script that runs a study (guard it with `if __name__ == ...`) is not
    # for a command whose main module is simulacra's own.
    assert "__main__" not in line


@pytest.mark.parametrize(("model", "words"), [
    ("model.py:nowhere", "model: "),
    ("no_such_module_xyz:run", "model: no module named 'no_such_module_xyz'"),
    ("model.py:1bad", "model must look like 'module:qualname'"),
])
def test_a_model_that_cannot_be_found_says_model(tmp_path: Path, model: str,
                                                 words: str) -> None:
    study = _study(tmp_path)
    study.write_text(study.read_text().replace('"model.py:run"', f'"{model}"'),
                     encoding="utf-8")
    line = _line(_experiment(str(study), cwd=tmp_path), 2)
    assert line.startswith(f"error: {study}: {words}"), line


def test_the_python_api_keeps_its_own_words(tmp_path: Path) -> None:
    """Only the command line re-words: Experiment's own message names its arguments."""
    (tmp_path / "model.py").write_text(MODEL, encoding="utf-8")
    model = f"{tmp_path / 'model.py'}:run"
    Experiment.from_run(model, [{}], master_seed=1, spool_dir=tmp_path / "out").run(
        2, "sequential")
    with pytest.raises(ConfigError, match=r"resume is False, but spool_dir .*; pass "
                                          r"resume=True to keep them .* an empty spool_dir"):
        Experiment.from_run(model, [{}], master_seed=1, spool_dir=tmp_path / "out").run(
            2, "sequential")
