"""The fleet-sizing study (examples/ride_hailing/fleet_sizing.py) runs as a test."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))

from ride_hailing import fleet_sizing  # noqa: E402

from simulacra import BackendUnavailable, ConfigError  # noqa: E402
from simulacra._util import install_hint  # noqa: E402

SMALL = {"fleet_sizes": (15, 40), "demand_rates": (2.0, 4.0), "replications": 3,
         "horizon": 120.0}


def test_study_rows_have_means_and_intervals() -> None:
    rows = fleet_sizing.study(**SMALL)
    assert [(r["vehicles"], r["demand_rate"]) for r in rows] == [
        (15, 2.0), (15, 4.0), (40, 2.0), (40, 4.0)]
    for row in rows:
        assert row["replications"] == 3
        for kpi in fleet_sizing.KPIS:
            assert math.isfinite(row[kpi])
            assert row[f"{kpi}_ci"] >= 0.0
    # More vehicles never wait longer at the same demand (a sanity check that can fail).
    by = {(r["vehicles"], r["demand_rate"]): r for r in rows}
    for demand in (2.0, 4.0):
        assert by[(40, demand)]["mean_wait"] < by[(15, demand)]["mean_wait"]


@pytest.mark.slow
def test_study_is_the_same_on_worker_processes() -> None:
    """Same seed, same rows: sequential reference vs 2 worker processes."""
    reference = fleet_sizing.study(**SMALL)
    parallel = fleet_sizing.study(**SMALL, backend="processes", max_workers=2)
    assert parallel == reference
    assert fleet_sizing.study(**{**SMALL, "replications": 3}, seed=8) != reference


def test_plot_and_csv_are_written(tmp_path: Path) -> None:
    rows = fleet_sizing.study(**{**SMALL, "replications": 2})
    png = fleet_sizing.plot(rows, tmp_path / "fleet.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from matplotlib.image import imread
    assert imread(png).shape[1] == 1000  # 10 in x 100 dpi
    csv_text = fleet_sizing.write_csv(rows, tmp_path / "fleet.csv").read_text()
    assert csv_text.splitlines()[0].startswith("vehicles,demand_rate,replications,mean_wait")
    assert len(csv_text.splitlines()) == 1 + len(rows)


def test_script_prints_the_table_and_writes_files(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples/ride_hailing/fleet_sizing.py"), str(tmp_path),
         "--replications", "2", "--horizon", "60"],
        capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "mean wait" in done.stdout
    assert (tmp_path / "fleet_sizing.png").exists()
    assert (tmp_path / "fleet_sizing.csv").exists()


@pytest.mark.parametrize(("options", "field"), [
    ({"replications": 1}, "replications"),
    ({"replications": True}, "replications"),
    ({"backend": "thread_pool"}, "did you mean .threads."),
    ({"max_workers": 0}, "workers"),
    ({"horizon": 0.0}, "horizon"),
    ({"fleet_sizes": (0,)}, "vehicles"),
    ({"patience": float("nan")}, "patience"),
])
def test_check_refuses_what_the_study_would_refuse_late(options: dict[str, object],
                                                        field: str) -> None:
    """Every option is checked at once, before the first replication (and any progress bar)."""
    with pytest.raises(ConfigError, match=field):
        fleet_sizing.check(**options)
    fleet_sizing.check(replications=2, backend="processes", max_workers=2, horizon=60.0)
    fleet_sizing.check(backend="threaded")  # the agent backends' word for threads


def test_check_names_the_dask_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = fleet_sizing.importlib.util.find_spec
    monkeypatch.setattr(fleet_sizing.importlib.util, "find_spec",
                        lambda name, *a: None if name == "distributed" else real(name, *a))
    with pytest.raises(BackendUnavailable, match=re.escape(install_hint("dask"))):
        fleet_sizing.check(backend="dask")
