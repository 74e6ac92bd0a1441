"""A process backend whose workers cannot import the agents says why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """\
from simulacra import Agent, Model, Sequence

class Voter(Agent):
    def vote(self, ctx):
        pass

model = Model(seed=1, backend="processes")   # no `if __name__ == "__main__":` guard
for i in range(4):
    model.add(Voter, i)
model.run(Sequence(Voter.vote), steps=1)
"""


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_agents_defined_in_an_unguarded_main_get_a_hint(tmp_path: Path) -> None:
    script = tmp_path / "voters.py"
    script.write_text(SCRIPT, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=150, env=env, cwd=tmp_path, check=False)

    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("simulacra.WorkerLost: worker ")
    assert "while starting" in last
    assert "if __name__ == '__main__':" in last
