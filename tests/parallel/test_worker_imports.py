"""A worker imports what runs its unit, and nothing heavy: no pydantic, rich or yaml.

The study runs in a fresh interpreter (a script in a subprocess), as a user's
does, so that nothing the test process imported leaks into the count. Worker
processes report their own ``sys.modules``. The control replication imports
yaml itself, and the worker must then report it: the check can fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"

SCRIPT = r"""
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from simulacra import Experiment, ShardedSim
import _lean_models as lean

if __name__ == "__main__":
    study = Experiment(lean.modules, [{}, {"import_yaml": True}], master_seed=5)
    processes = study.run(2, backend="processes", max_workers=2)
    out = {"parent": lean.heavy_loaded()}
    sequential = study.run(2, backend="sequential")  # the control imports yaml here
    out["processes"] = [processes[0, r]["heavy"] for r in range(2)]
    out["control"] = [processes[1, r]["heavy"] for r in range(2)]
    out["same"] = [processes[k]["x"] for k in processes.keys()] == [
        sequential[k]["x"] for k in sequential.keys()]
    with ShardedSim(lean.build, shards=2, seed=3) as sim:
        sim.run(until=5)
        out["shards"] = [heavy for heavy, _ in sim.call(lean.shard_modules)]
    print(json.dumps(out))
"""


def test_workers_load_no_pydantic_rich_or_yaml(tmp_path: Path) -> None:
    script = tmp_path / "study.py"
    script.write_text(SCRIPT, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script), str(SRC), str(HERE)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)

    assert out["processes"] == ["", ""]
    assert out["shards"] == [[], []]
    assert out["control"] == ["yaml", "yaml"], "a model's own import is seen"
    assert out["same"]
    assert out["parent"] == []


@pytest.mark.parametrize("module", ["simulacra.parallel", "simulacra.executors"])
def test_importing_a_tier_loads_nothing_heavy(module: str) -> None:
    code = (f"import sys; import {module}; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'pydantic', 'pydantic_core', 'rich', 'yaml', 'polars', 'numpy'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True, env={"PYTHONPATH": str(SRC)})
    assert done.stdout.strip() == "[]"
