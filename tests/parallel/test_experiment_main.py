"""A study whose model is a function of its own script (``__main__``), as users write them.

Real scripts in subprocesses: on sequential, threads and processes the results equal the
sequential ones; the interpreters backend and a script read from stdin are refused with one
line naming the backends that can run it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

pytestmark = pytest.mark.timeout(180)

STUDY = """\
import sys
from simulacra import Experiment, BackendUnavailable

def run(seed, servers=1):
    import random
    rng = random.Random(seed)
    return {"wait": sum(rng.random() for _ in range(500)) / servers}

if __name__ == "__main__":
    study = Experiment.from_run(run, [{"servers": 1}, {"servers": 3}], master_seed=11)
    reference = study.run(replications=4, backend="sequential").table()
    try:
        got = study.run(replications=4, backend=sys.argv[1], max_workers=2).table()
    except BackendUnavailable as exc:
        print("refused:", exc)
    else:
        print(sys.argv[1], got.equals(reference), got.height)
"""


def _study(tmp_path: Path, backend: str) -> str:
    script = tmp_path / "my_study.py"
    script.write_text(STUDY, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script), backend], capture_output=True,
                          text=True, env=ENV, cwd=tmp_path, timeout=150, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("backend", ["sequential", "threads", "processes"])
def test_a_function_of_the_study_script_runs_and_equals_sequential(
        tmp_path: Path, backend: str) -> None:
    pytest.importorskip("polars")
    assert _study(tmp_path, backend) == f"{backend} True 8"


def test_the_interpreters_backend_refuses_it_in_one_line(tmp_path: Path) -> None:
    pytest.importorskip("polars")
    out = _study(tmp_path, "interpreters")
    if out.startswith("interpreters"):  # pragma: no cover  (a backend that imports it)
        pytest.fail(f"expected a refusal, got {out!r}")
    assert out.count("\n") == 0
    if sys.version_info < (3, 13):  # no sub-interpreters: the backend itself is refused first
        assert out.startswith("refused: backend 'interpreters' needs sub-interpreters"), out
        assert f"this is Python {sys.version_info[0]}.{sys.version_info[1]}" in out
        return
    assert out.startswith("refused: model_fn ")
    assert "my_study.py:run" in out
    assert "'sequential', 'threads' or 'processes'" in out


def test_a_study_read_from_stdin_is_refused_on_processes(tmp_path: Path) -> None:
    pytest.importorskip("polars")
    source = STUDY.replace('if __name__ == "__main__":', "if True:").replace(
        "sys.argv[1]", '"processes"')
    done = subprocess.run([sys.executable, "-"], input=source, capture_output=True, text=True,
                          env=ENV, cwd=tmp_path, timeout=150, check=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout.strip()
    assert out.startswith("refused: model_fn '__main__:run' is defined in an interactive "
                          "session"), out
    assert "'sequential' or 'threads'" in out
