"""The README's first command, run as a newcomer runs it: a fresh virtual environment.

It copies the repository (as a clone would have it), makes a new virtual
environment, and runs the Quick start's install-and-demo command exactly as the
README writes it, in an 80-column terminal's width. The demo must finish, print
its summary within 80 columns, and leave a run directory that ``simulacra
replay`` reproduces. The README's second command (the dev install and the test
suite) is what ``.ci/run`` runs; that is checked here too, as text.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

#: What a clean clone does not have.
_NOT_IN_A_CLONE = (".git", ".venv", "runs", "build", "dist", "__pycache__", ".hypothesis",
                   ".mypy_cache", ".ruff_cache", ".pytest_cache", "*.egg-info")


def quick_start_commands() -> list[str]:
    """The commands of the README's first bash block, comments dropped."""
    text = README.read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", text, re.DOTALL)
    assert block is not None, "the README has no bash block"
    return [line for line in block.group(1).splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def test_the_readme_gives_two_commands_and_ci_runs_the_second() -> None:
    commands = quick_start_commands()

    assert len(commands) == 2
    assert commands[0] == "python -m pip install . && python examples/social"
    assert commands[1] in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_first_command_works_in_a_fresh_virtual_environment(tmp_path: Path) -> None:
    clone = tmp_path / "simulacra"
    shutil.copytree(ROOT, clone, ignore=shutil.ignore_patterns(*_NOT_IN_A_CLONE))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    env = {key: value for key, value in os.environ.items()
           if key not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv),
               COLUMNS="80", LINES="24", PYTHONDONTWRITEBYTECODE="1")

    done = subprocess.run(quick_start_commands()[0], shell=True, cwd=clone, env=env,  # noqa: S602
                          capture_output=True, text=True, timeout=840, check=False)

    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    summary = done.stdout[done.stdout.index("social: 50 agents"):]
    assert re.search(r"failed turns +0 *\n", summary)
    assert re.search(r"digest +[0-9a-f]{64}", summary)
    assert max(len(line) for line in summary.splitlines()) <= 80
    run_dirs = sorted((clone / "runs").iterdir())
    assert len(run_dirs) == 1
    replay = subprocess.run([str(bin_dir / "simulacra"), "replay", str(run_dirs[0])], cwd=clone,
                            env=env, capture_output=True, text=True, timeout=300, check=False)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "all 250 events of action_events.jsonl match" in replay.stdout
