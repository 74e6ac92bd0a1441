"""A study without polars: it says so before its first replication, not at summary().

A stranger's study ran every replication, then ``summary()`` said polars was missing.
Real subprocesses with polars made unimportable (``sys.modules["polars"] = None``, what
an environment without it gives ``import polars``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(120)

SCRIPT = """
import sys, warnings
if sys.argv[1] == "hidden":
    sys.modules["polars"] = None  # as if not installed
from simulacra import Experiment

def model(seed, rate=1.0):
    print("replication", seed, flush=True)
    return {"x": rate * (seed % 7)}

warnings.simplefilter("always")
warnings.showwarning = lambda message, category, *rest, **kw: print(
    "warning:", category.__name__, str(message).split(";")[0], flush=True)
if __name__ == "__main__":
    study = Experiment.from_run(model, [{"rate": 1.0}], master_seed=3)
    results = study.run(replications=2, backend="sequential")
    print("records", len(results.records))
"""


def _run(tmp_path: Path, mode: str) -> list[str]:
    script = tmp_path / "study.py"
    script.write_text(SCRIPT, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=100,
                          check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_study_without_polars_says_so_before_its_first_replication(tmp_path: Path) -> None:
    lines = _run(tmp_path, "hidden")
    warned = [i for i, line in enumerate(lines) if line.startswith("warning: TablesNeedPolars")]
    assert len(warned) == 1, lines
    assert "need polars, which is not installed" in lines[warned[0]]
    first = next(i for i, line in enumerate(lines) if line.startswith("replication"))
    assert warned[0] < first, lines  # before any replication ran
    assert "records 2" in lines  # the study ran: its records are kept


def test_a_study_with_polars_says_nothing_of_it(tmp_path: Path) -> None:
    pytest.importorskip("polars")
    lines = _run(tmp_path, "present")
    assert not any(line.startswith("warning: TablesNeedPolars") for line in lines), lines
