"""Grounded scenarios: the default carries the documents' numbers, and check re-reads them.

Two small documents with known numbers (data/grounded: an emergency-department
surge memo and a warehouse fire-drill report, with their tiny targets in
models.py) and the ride-hailing documents give artifacts whose values and
windows are exactly the documents' numbers; ``check`` fails a planted value
that its quote does not state; a document with nothing to ground is one line
and exit 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulacra.cli import main
from simulacra.errors import ScenarioError
from simulacra.scenarios import (
    EXTRACTOR,
    Scenario,
    check_artifacts,
    extract_scenarios,
    find_quantities,
    grounds,
    load_scenario,
    read_documents,
)

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
DATA = "tests/scenarios/data"
GROUNDED = f"{DATA}/grounded"
sys.path.insert(0, str(ROOT / GROUNDED))

import models  # noqa: E402


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def windows(folder: Path) -> dict[str, tuple[object, float, float | None]]:
    """knob -> (value, at, duration) over every artifact of *folder*."""
    out = {}
    for path in sorted(folder.glob("*.json")):
        for item in load_scenario(path).interventions:
            out[item.knob] = (item.value, item.at, item.duration)
    return out


def test_the_surge_memo_gives_exactly_its_numbers(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios", "generate", f"{GROUNDED}/ed-surge-memo.md", "--target",
                 f"{GROUNDED}/models.py:ED", "--out", str(tmp_path)]) == 0
    capsys.readouterr()

    assert windows(tmp_path) == {"arrival_rate": (15.0, 180.0, 360.0),  # 15 patients/h, t=180-540
                                 "nurses": (4, 300.0, None),            # 4 nurses from t=300
                                 "ct_up": (False, 390.0, 100.0)}         # CT down t=390-490
    for path in tmp_path.glob("*.json"):
        scenario = load_scenario(path)
        assert scenario.provenance["generator"] == EXTRACTOR
        [item] = scenario.interventions
        assert item.grounding is not None
        assert set(item.grounding) == {"value", "at"} | ({"duration"} if item.duration else set())
        texts = {f: g.text for f, g in item.grounding.items()}
        assert texts["value"] in {"15 patients/h", "4 nurses", "down"}
    assert main(["scenarios", "check", str(tmp_path), "--docs", f"{GROUNDED}/ed-surge-memo.md",
                 "--target", f"{GROUNDED}/models.py:ED", "--until", "600"]) == 0
    assert "grounding" in capsys.readouterr().out


def test_the_fire_drill_report_gives_exactly_its_numbers(tmp_path: Path) -> None:
    documents = read_documents([f"{GROUNDED}/warehouse-fire-drill.md"])
    made, _ = extract_scenarios(documents, models.WAREHOUSE, target="w")
    for scenario in made:
        scenario.save(tmp_path)

    assert windows(tmp_path) == {
        "dock_open": (False, 120.0, 90.0),       # closed from 02:00 to 03:30
        "pickers": (6, 120.0, 90.0),             # 6 pickers, during the drill
        "conveyor_speed": (0.4, 120.0, 120.0),   # 40 percent, for two hours
    }


def test_the_ride_hailing_documents_give_their_own_numbers(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str],
                                                           ) -> None:
    docs = "examples/ride_hailing/scenarios/docs"
    target = "examples/ride_hailing/model.py:KNOBS"
    assert main(["scenarios", "generate", docs, "--target", target, "--until", "600",
                 "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err

    # 60 % of rated power; stations 0 and 1 down 150 minutes in, for four hours
    assert windows(tmp_path) == {"charge_rate": (0.6, 0.0, None),
                                 "station_0": (False, 150.0, 240.0),
                                 "station_1": (False, 150.0, 240.0)}
    assert "left out '150 kW'" in err  # said, not silently dropped
    assert main(["scenarios", "check", str(tmp_path), "--docs", docs, "--target", target,
                 "--until", "600"]) == 0
    err = capsys.readouterr().err
    assert "knob 'charge_rate'): at 0.0 assumed: the passage states no start time" in err


def planted(tmp_path: Path, value: float) -> Path:
    """The surge memo's arrival scenario, its value edited by hand and the hash re-made."""
    documents = read_documents([f"{GROUNDED}/ed-surge-memo.md"])
    made, _ = extract_scenarios(documents, models.ED, target="ed")
    data = next(s for s in made if s.interventions[0].knob == "arrival_rate").content()
    data["interventions"][0]["value"] = value
    return Scenario(**data).save(tmp_path / "out")


def test_check_fails_a_planted_value_with_one_line(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = planted(tmp_path, 4.5)  # what the old default invented for "15 patients/h"

    assert main(["scenarios", "check", str(path.parent), "--docs", GROUNDED]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"error: {path}: intervention 0 (knob 'arrival_rate'): value 4.5 "
                          "matches nothing in its quote ")
    assert "15 patients/h" in err


def test_check_fails_an_intervention_whose_grounding_was_removed(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str],
                                                               ) -> None:
    documents = read_documents([f"{GROUNDED}/ed-surge-memo.md"])
    made, _ = extract_scenarios(documents, models.ED, target="ed")
    data = made[0].content()
    del data["interventions"][0]["grounding"]["duration"]
    path = Scenario(**data).save(tmp_path)

    assert main(["scenarios", "check", str(tmp_path)]) == 2
    assert "duration 360.0 states no grounding" in capsys.readouterr().err
    assert path.exists()


def test_a_ground_of_another_text_than_the_quote_fails(tmp_path: Path) -> None:
    path = planted(tmp_path, 15.0)
    data = json.loads(path.read_text(encoding="utf-8"))
    del data["hash"]
    data["interventions"][0]["grounding"]["value"]["text"] = "45 patients/h"
    path.unlink()
    Scenario(**data).save(path.parent)

    with pytest.raises(ScenarioError, match="is grounded in '45 patients/h', which is not in "
                                            "its quote"):
        check_artifacts(path.parent)


def test_nothing_to_report_is_exit_2_and_one_line(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["scenarios", "generate", f"{DATA}/nothing.md", "--target",
                   f"{GROUNDED}/models.py:ED", "--out", str(tmp_path / "out")])

    captured = capsys.readouterr()
    assert status == 2
    assert captured.err.count("\n") == 1
    assert captured.err.startswith("error: documents nothing.md: nothing to ground")
    assert not (tmp_path / "out").exists()


def test_legacy_artifacts_pass_with_a_note_unless_grounding_is_required(
        capsys: pytest.CaptureFixture[str]) -> None:
    # data/legacy holds an artifact of generator v1, made before grounding existed.
    assert main(["scenarios", "check", f"{DATA}/legacy"]) == 0
    assert "not grounded: made by simulacra.scenarios.generate.v1" in capsys.readouterr().err
    assert main(["scenarios", "check", f"{DATA}/legacy", "--require-grounding"]) == 2
    assert "states no grounding" in capsys.readouterr().err


def test_generated_artifacts_are_grounded_and_pass_require_grounding(
        capsys: pytest.CaptureFixture[str]) -> None:
    # Generator v2 accepts no reply that leaves a value ungrounded.
    assert main(["scenarios", "check", f"{DATA}/artifacts", "--docs", f"{DATA}/docs",
                 "--require-grounding"]) == 0
    captured = capsys.readouterr()
    assert "not grounded" not in captured.err
    assert "assumed: invented by the scripted stand-in model" in captured.err


# -- the parser, generated -------------------------------------------------------------------

_WORDS = {2: "two", 3: "three", 4: "four", 6: "six", 15: "fifteen", 90: "ninety"}


@given(st.integers(1, 500), st.sampled_from(["patients/h", "percent", "%", "minutes", "hours",
                                             "nurses"]),
       st.booleans())
def test_a_number_with_its_unit_reads_back(number: int, unit: str, as_word: bool) -> None:
    said = _WORDS.get(number, str(number)) if as_word else str(number)
    text = f"From now on, {said} {unit} are expected."
    [quantity] = find_quantities(text)

    assert quantity.number == number
    assert quantity.text in text
    assert grounds(float(number), quantity.text)
    assert not grounds(number + 0.5, quantity.text)


@given(st.integers(0, 1000), st.integers(1, 1000), st.sampled_from(["t={a}-{b}",
                                                                     "from t={a} to t={b}"]))
def test_a_window_reads_back_as_its_start_and_length(a: int, length: int, form: str) -> None:
    text = f"The pump is down {form.format(a=a, b=a + length)}."
    documents_text = [text]
    [quantity, *_] = find_quantities(documents_text[0])

    assert quantity.number == a
    assert grounds(float(length), text, field="duration")
    assert grounds(False, text)


@given(st.integers(0, 23), st.integers(0, 59), st.integers(1, 600))
def test_a_clock_window_reads_back_in_minutes(hour: int, minute: int, length: int) -> None:
    end = (hour * 60 + minute + length) % 1440
    text = f"Closed from {hour:02d}:{minute:02d} to {end // 60:02d}:{end % 60:02d}."

    assert grounds(float(hour * 60 + minute), text, field="at")
    if length < 1440:
        assert grounds(float(length), text, field="duration")
