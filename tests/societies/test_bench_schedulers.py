"""``bench/society_schedulers.py`` runs end to end, its server in a process or in threads.

A tiny workload (8 agents, 2 turns each, a hundredth of the latency): every
scheduler makes every call, the four event-engine schedulers end on one digest
(the script exits 1 otherwise), and bad numbers are refused with one line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "society_schedulers.py"

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("server", ["process", "thread"])
def test_the_schedulers_bench_runs_and_its_schedulers_agree(server: str) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--agents", "8", "--turns", "2", "--repeat", "1",
         "--scale", "0.01", "--capacity", "4", "--concurrency", "4", "--follows", "1",
         "--server", server],
        capture_output=True, text=True, timeout=280, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "warning" not in done.stdout
    assert "global sync, lookahead, dependencies and out of order: one digest" in done.stdout
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 8 |")]
    assert [row.split("|")[2].strip() for row in rows] == [
        "global sync", "lookahead", "dependencies", "out of order", "round"]
    assert all(row.split("|")[4].strip() == "16" for row in rows)  # 8 agents x 2 calls


@pytest.mark.parametrize(("flag", "value"), [("--capacity", "0"), ("--scale", "-1")])
def test_the_schedulers_bench_refuses_bad_numbers(flag: str, value: str) -> None:
    done = subprocess.run([sys.executable, str(BENCH), flag, value],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert f"{flag} must be" in done.stderr
