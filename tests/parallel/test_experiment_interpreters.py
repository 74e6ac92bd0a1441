"""Experiment on the ``interpreters`` backend, on a Python that has sub-interpreters.

The suite runs on Python 3.11, which has none: these tests run a study in a
Python 3.13 (or 3.14+) in a subprocess: this interpreter when it is one (as in
the 3.13 section of ``.ci/run``), else one from pyenv or PATH; they are skipped
when there is none. A replication's worker imports nothing that refuses
sub-interpreters (pydantic's extension module did, through the scenarios), so
the study runs and equals the sequential one; a model whose own module imports
such a package fails before any result with one line that names the package
and the backends that can run it.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"


def _python_with_sub_interpreters() -> str | None:
    if sys.version_info >= (3, 13):
        return sys.executable
    home = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    candidates = sorted(glob.glob(f"{home}/versions/3.1[3-9]*/bin/python"))
    candidates += [shutil.which(f"python3.{minor}") for minor in (13, 14, 15)]
    for candidate in candidates:
        # pyenv's shims exist for every installed version but fail unless selected.
        if candidate and "shims" not in Path(candidate).parts and Path(candidate).exists():
            return candidate
    return None


PYTHON = _python_with_sub_interpreters()
pytestmark = pytest.mark.skipif(PYTHON is None, reason="no Python 3.13+ installed")

STUDY = r"""
import json, sys
sys.path[:0] = sys.argv[1:3]
from simulacra import Experiment
import _lean_models as lean

if __name__ == "__main__":
    study = Experiment(lean.modules, [{}, {"label": "b"}], master_seed=17)
    sub = study.run(3, backend="interpreters", max_workers=2)
    ref = study.run(3, backend="sequential")
    print(json.dumps({
        "same": [sub[k]["x"] for k in sub.keys()] == [ref[k]["x"] for k in ref.keys()],
        "heavy": sorted({sub[k]["heavy"] for k in sub.keys()}),
        "pids": sorted({sub[k]["pid"] for k in sub.keys()}),
        "parent": __import__("os").getpid(),
        "backend": sub.backend,
    }))
"""

REFUSED = r"""
import sys
sys.path[:0] = sys.argv[1:3]
from simulacra import BackendUnavailable, Experiment
import _refusing_model as refusing

if __name__ == "__main__":
    try:
        Experiment(refusing.model, master_seed=1).run(2, backend="interpreters", max_workers=2)
    except BackendUnavailable as exc:
        print(f"{type(exc).__name__}: {exc}")
"""


def _run(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    assert PYTHON is not None
    path = tmp_path / "study.py"
    path.write_text(script, encoding="utf-8")
    return subprocess.run(
        [PYTHON, str(path), str(SRC), str(HERE)], capture_output=True, text=True,
        timeout=170, check=False, env={**os.environ, "PYTHONPATH": ""},
    )


@pytest.mark.timeout(180)
def test_a_study_on_sub_interpreters_equals_the_sequential_one(tmp_path: Path) -> None:
    done = _run(STUDY, tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)

    assert out["same"]
    assert out["backend"] == "interpreters"
    assert out["pids"] == [out["parent"]], "sub-interpreters run in this process"
    assert out["heavy"] == [""], "no pydantic, rich or yaml in a sub-interpreter"


@pytest.mark.timeout(180)
def test_a_model_that_imports_a_refusing_package_is_one_line_naming_it(tmp_path: Path) -> None:
    assert PYTHON is not None
    has = subprocess.run([PYTHON, "-c", "import pydantic"], capture_output=True, check=False)
    if has.returncode != 0:
        pytest.skip(f"{PYTHON} has no pydantic to refuse sub-interpreters")
    done = _run(REFUSED, tmp_path)

    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    assert lines[0].startswith(
        "BackendUnavailable: backend 'interpreters' cannot run model _refusing_model:model: "
        "it needs pydantic_core._pydantic_core (package pydantic")
    assert "refuses to load in sub-interpreters" in lines[0]
    assert "'processes'" in lines[0]
