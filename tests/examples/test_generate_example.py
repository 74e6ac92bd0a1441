"""The worked example, examples/ride_hailing/scenarios: it checks, it replays, it runs.

Its README's commands, as a newcomer runs them: ``check`` passes on the shipped
artifacts, a replay of the shipped recordings writes them again byte for byte
with no model call, and each scenario runs on the ride-hailing model.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from simulacra.cli import main
from simulacra.scenarios import load_scenarios

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = "examples/ride_hailing/scenarios"
TARGET = "examples/ride_hailing/model.py:KNOBS"


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def test_the_readme_check_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios", "check", f"{EXAMPLE}/artifacts", "--docs", f"{EXAMPLE}/docs",
                 "--target", TARGET, "--until", "600"]) == 0
    assert capsys.readouterr().out.startswith(f"ok: 4 artifacts in {EXAMPLE}/artifacts")


def test_the_readme_replay_writes_the_artifacts_again_byte_for_byte(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["scenarios", "generate", f"{EXAMPLE}/docs", "--target", TARGET,
                   "--until", "600", "--count", "4", "--replay", f"{EXAMPLE}/recordings.sqlite",
                   "--out", str(tmp_path)])

    assert status == 0, capsys.readouterr().err
    shipped = {p.name: p.read_bytes() for p in (ROOT / EXAMPLE / "artifacts").glob("*.json")}
    assert {p.name: p.read_bytes() for p in tmp_path.glob("*.json")} == shipped
    assert not list((ROOT / EXAMPLE).glob("recordings.sqlite-*"))  # no -wal, no -shm left


def test_every_artifact_cites_the_documents_and_fits_the_model() -> None:
    sys.path.insert(0, str(ROOT / "examples"))
    from ride_hailing import model

    scenarios = load_scenarios(ROOT / EXAMPLE / "artifacts")
    assert [s.name for s in scenarios] == ["dual-outage-reduced-service-area",
                                           "dual-station-outage", "heat-wave-derating",
                                           "single-station-outage"]
    for scenario in scenarios:
        scenario.check(model.KNOBS, end=600.0)
        assert scenario.target == TARGET
        assert scenario.provenance["recording"]["file"] == "recordings.sqlite"


@pytest.mark.slow
def test_the_heat_wave_makes_riders_wait_longer() -> None:
    sys.path.insert(0, str(ROOT / "examples"))
    from ride_hailing import model

    [heat] = list((ROOT / EXAMPLE / "artifacts").glob("heat-wave-derating-*.json"))
    base, hot = model.run(seed=7), model.run(seed=7, scenario=str(heat))

    assert hot["mean_charger_wait"] > base["mean_charger_wait"]
    assert hot["abandonment_rate"] > base["abandonment_rate"]
