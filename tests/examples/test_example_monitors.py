"""The bank and ride-hailing examples write monitor files (``--monitors FILE``).

Monitoring changes no KPI and no trace digest; the file is in the
``simulacra.monitors.v1`` format and agrees with the KPIs the examples print.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

import simulacra
from simulacra import MonitorSet, read_monitors

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"



@pytest.fixture(scope="module")
def bank(load_module: Callable[[str, Path], ModuleType]) -> ModuleType:
    return load_module("_monitored_example_bank", EXAMPLES / "bank.py")


@pytest.fixture(scope="module")
def fleet(load_module: Callable[[str, Path], ModuleType]) -> ModuleType:
    return load_module("_monitored_example_ride_hailing", EXAMPLES / "ride_hailing" / "model.py")


def _script(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_the_bank_writes_its_monitors_and_keeps_its_kpis(bank: ModuleType,
                                                         tmp_path: Path) -> None:
    """Series from the warm-up on: their time-weighted utilisation is the KPI."""
    path = tmp_path / "bank.json"
    kpis = bank.run(seed=5, customers=3000, monitors=path)
    assert kpis == bank.run(seed=5, customers=3000)
    data = read_monitors(path)
    assert list(data["series"]) == ["tellers.utilisation", "tellers.queue"]
    busy = data["series"]["tellers.utilisation"]
    assert busy["kind"] == "utilisation"
    assert busy["t"][0] == kpis["measured_from"]
    assert busy["time_weighted_mean"] == pytest.approx(kpis["utilisation"], rel=1e-9)
    waits = data["samples"]["wait"]
    assert len(waits) == kpis["served"]
    assert math.fsum(waits) / len(waits) == kpis["mean_wait"]
    # Little's law over the measured window, loosely: queue length = arrival rate x wait.
    queue = data["series"]["tellers.queue"]["time_weighted_mean"]
    assert queue == pytest.approx(2.7 * kpis["mean_wait"], rel=0.1)


def test_the_bank_script_writes_a_monitor_file(tmp_path: Path) -> None:
    path = tmp_path / "bank.json"
    done = _script("examples/bank.py", "--customers", "1000", "--monitors", str(path))
    assert done.returncode == 0, done.stderr
    assert f"monitors        {path}" in done.stdout
    assert read_monitors(path)["format"] == "simulacra.monitors.v1"


@pytest.mark.parametrize(("script", "args", "message"), [
    ("bank.py", ("--replications", "2"), "--monitors writes the monitors of one run"),
    ("bank.py", (), "does not exist"),
    ("ride_hailing", (), "does not exist"),
])
def test_monitor_options_are_checked_before_the_run(script: str, args: tuple[str, ...],
                                                    message: str, tmp_path: Path) -> None:
    target = tmp_path / ("missing" if "does not exist" in message else ".") / "m.json"
    done = _script(f"examples/{script}", "--monitors", str(target), *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ")
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert message in done.stderr
    assert done.stdout == ""
    assert not target.exists()


def test_the_fleet_monitors_change_no_kpi_and_no_trace(fleet: ModuleType) -> None:
    collected = MonitorSet()
    kpis = fleet.run(seed=3, horizon=150.0, policy="power_of_d", monitors=collected)
    assert kpis == fleet.run(seed=3, horizon=150.0, policy="power_of_d")
    names = list(collected)
    assert names[:3] == ["power_of_d.idle.items", "power_of_d.idle.getters",
                         "power_of_d.idle.putters"]
    assert "power_of_d.station-2.queue" in names
    assert names[-1] == "power_of_d.wait"
    stations = [collected.series[f"power_of_d.station-{k}.utilisation"] for k in range(3)]
    assert math.fsum(s.time_weighted_mean() for s in stations) / 3 == pytest.approx(
        kpis["charger_utilisation"], rel=1e-9)
    waits = collected.samples["power_of_d.wait"]
    assert waits.mean() == pytest.approx(kpis["mean_wait"])

    digests = []
    for monitored in (False, True):
        sim = simulacra.Sim(seed=3, trace=True)
        model = fleet.build(sim, horizon=150.0)
        if monitored:
            model.monitor()
        sim.run(until=150.0)
        digests.append(simulacra.digest(sim))
    assert digests[0] == digests[1]


def test_the_fleet_script_writes_every_policy(tmp_path: Path) -> None:
    path = tmp_path / "fleet.json"
    done = _script("examples/ride_hailing", "--plain", "--horizon", "120", "--monitors", str(path))
    assert done.returncode == 0, done.stderr
    assert "abandonment_rate" in done.stdout  # the usual table, then one line more
    assert done.stdout.rstrip().endswith(f"written to {path} (simulacra report)")
    data = json.loads(path.read_text())
    assert set(data["samples"]) == {"closest.wait", "power_of_d.wait"}
    kinds = {name.split(".", 1)[0] for name in data["series"]}
    assert kinds == {"closest", "power_of_d"}
    assert read_monitors(path) == data
