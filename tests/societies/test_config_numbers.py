"""Numbers in a run config: ``1e-3`` is a number, as in YAML 1.2, in a file and on the command line.

PyYAML reads YAML 1.1, whose floats need a dot, so ``1e-3`` used to reach the
config as the string ``'1e-3'``: a number field refused it ("should be a valid
number (got '1e-3')"), and a step option said it was not a number.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from simulacra import load_config

CONFIG = Path(__file__).resolve().parents[2] / "examples" / "social" / "config.yaml"


@pytest.mark.parametrize(("text", "value"), [
    ("1e-1", 0.1), ("2E-1", 0.2), ("+5e-1", 0.5), ("1_0e-2", 0.1), ("0.25", 0.25),
    ("1.5e-1", 0.15), (".5", 0.5), ("1", 1.0)])
def test_a_number_in_exponent_form_is_a_number_on_the_command_line(text: str,
                                                                  value: float) -> None:
    config = load_config(CONFIG, [f"sim.llm.temperature={text}"])
    assert config.sim.llm.temperature == pytest.approx(value)
    assert type(config.sim.llm.temperature) is float


def test_a_number_in_exponent_form_is_a_number_in_a_file(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "run.yaml").write_text(
        "sim:\n  llm:\n    temperature: 5e-1\n  engine:\n    step:\n"
        "      built_in: async_event\n      options: {window: 25E-2}\n"
        "run:\n  budget:\n    cost: 2e-2\n", encoding="utf-8")
    config = load_config(loose / "run.yaml")
    assert config.sim.llm.temperature == pytest.approx(0.5)
    assert config.sim.engine.step.options["window"] == pytest.approx(0.25)
    assert config.run.budget.cost == pytest.approx(0.02)


@pytest.mark.parametrize("text", ["1e", "e5", "v1e3", "1e-", "1.2.3", "1e3x"])
def test_what_is_not_a_number_stays_text(text: str) -> None:
    config = load_config(CONFIG, [f"sim.llm.model={text}"])
    assert config.sim.llm.model == text
