"""Which tests a command line runs: the slow ones are left out unless asked for.

``-m "not slow"`` in pyproject.toml's addopts, and ``tests/conftest.py``, which
lets a slow test named by its node id run (and only that one). Collection only,
in a child pytest, as a contributor would type it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FILE = "tests/integration/test_readme_fresh_venv.py"
SLOW = f"{FILE}::test_the_first_command_works_in_a_fresh_virtual_environment"
FAST = f"{FILE}::test_the_readme_gives_two_commands_and_ci_runs_the_second"


def collected(*args: str) -> tuple[set[str], str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    ids = {line for line in done.stdout.splitlines() if "::" in line}
    return ids, done.stdout


def test_a_plain_file_leaves_its_slow_test_out_and_says_so() -> None:
    ids, out = collected(FILE)
    assert ids == {FAST}
    assert "1 slow test left out: add -m slow to run it" in out


def test_a_slow_test_named_by_node_id_runs_and_only_it() -> None:
    ids, _ = collected(SLOW)
    assert ids == {SLOW}
    # A folder beside it keeps its own slow tests out.
    ids, out = collected(SLOW, "tests/report")
    assert SLOW in ids
    assert not any(i.startswith("tests/report/test_calls_browser.py") for i in ids)
    left = re.search(r"(\d+) slow tests left out", out)
    assert left is not None
    assert int(left.group(1)) > 0


def test_a_typed_mark_expression_is_left_as_typed() -> None:
    ids, _ = collected("-m", "not slow", SLOW)
    assert ids == set()
    ids, _ = collected("-m", "slow", FILE)
    assert ids == {SLOW}
    ids, _ = collected("-m", "", FILE)
    assert ids == {SLOW, FAST}
