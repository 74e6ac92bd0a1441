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


@pytest.mark.parametrize(("server", "mode"), [("process", "threads"), ("thread", "threads"),
                                              ("process", "asyncio")])
def test_the_schedulers_bench_runs_and_its_schedulers_agree(server: str, mode: str) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--agents", "8", "--turns", "2", "--repeat", "1",
         "--scale", "0.01", "--capacity", "4", "--concurrency", "4", "--follows", "1",
         "--server", server, "--mode", mode],
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


def test_the_schedulers_bench_warns_of_a_stalled_or_failed_call() -> None:
    """A call that waited out a timeout is named, not silently in the wall time."""
    sys.path.insert(0, str(BENCH.parent))
    try:
        import society_schedulers as bench
    finally:
        sys.path.remove(str(BENCH.parent))
    calls = [{"wall_s": 0.5 + i / 100, "ok": True} for i in range(40)]
    assert bench.call_warnings("lookahead", calls, 40) == []
    stalled = [*calls[:-1], {"wall_s": 600.4, "ok": True}]
    (warning,) = bench.call_warnings("lookahead", stalled, 40)
    assert "slowest call took 600.4 s" in warning
    # Slow calls all round are the server's pace, not a stall.
    assert bench.call_warnings("lookahead", [{**c, "wall_s": 40 + c["wall_s"]} for c in calls],
                               40) == []
    failed = [*calls, {"wall_s": 0.1, "ok": False}]
    assert bench.call_warnings("round", failed, 40) == ["round: 1 calls failed"]
    assert bench.call_warnings("round", calls[:30], 40) == ["round made 30 calls, not 40"]
