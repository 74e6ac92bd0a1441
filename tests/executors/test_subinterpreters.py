"""The "interpreters" executor on a Python that has sub-interpreters, against inline.

The test suite runs on Python 3.11, which has none; this test runs the
executor in a Python 3.13 (or 3.14+) interpreter (this one when it is one,
else one from pyenv or PATH), in a subprocess, and compares its results with
the inline executor's in that same interpreter. It is skipped when no such Python is installed.
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

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from simulacra.executors import get_executor, Done, Raised
import _executor_units as units

work = [("study", r) for r in range(12)]
results = {}
for name in ("interpreters", "sequential"):
    with get_executor(name, max_workers=2) if name != "sequential" else get_executor(name) as ex:
        out = dict(ex.map_units(units.seeded_draws, work))
        results[name] = [out[i].value for i in range(len(work))]
        failed = dict(ex.map_units(units.fail_on_three, [1, 3]))
        results[name + ":failure"] = [type(failed[1]).__name__, str(failed[1].error)]
print(json.dumps(results))
"""


def _newer_python() -> str | None:
    if sys.version_info >= (3, 13):  # this one (the 3.13 section of .ci/run)
        return sys.executable
    home = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    candidates = sorted(glob.glob(f"{home}/versions/3.1[3-9]*/bin/python"))
    candidates += [shutil.which(f"python3.{minor}") for minor in (13, 14, 15)]
    for candidate in candidates:
        # pyenv's shims exist for every installed version but fail unless selected.
        if candidate and "shims" not in Path(candidate).parts and Path(candidate).exists():
            return candidate
    return None


PYTHON = _newer_python()


@pytest.mark.skipif(PYTHON is None, reason="no Python 3.13+ installed")
@pytest.mark.timeout(120)
def test_sub_interpreters_give_the_inline_results() -> None:
    assert PYTHON is not None
    done = subprocess.run(
        [PYTHON, "-c", SCRIPT, str(ROOT / "src"), str(ROOT / "tests" / "executors")],
        capture_output=True, text=True, timeout=110, check=False,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)

    in_sub = [where for where, _ in results["interpreters"]]
    assert all(in_sub), "every unit ran in a sub-interpreter"
    assert not any(where for where, _ in results["sequential"])
    draws = [values for _, values in results["interpreters"]]
    assert draws == [values for _, values in results["sequential"]]
    assert len({tuple(v) for v in draws}) == 12  # distinct streams per replication
    assert results["interpreters:failure"] == results["sequential:failure"]
    assert results["interpreters:failure"][0] == "Raised"


def test_this_python_says_what_it_has() -> None:
    from simulacra.executors import get_executor

    if sys.version_info[:2] in ((3, 11), (3, 12)):
        with pytest.raises(Exception, match=r"needs sub-interpreters.*3\.14.*3\.13"):
            get_executor("interpreters")
