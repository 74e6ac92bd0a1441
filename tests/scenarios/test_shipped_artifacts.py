"""Every scenario artifact shipped under examples/ passes ``scenarios check --require-grounding``.

An artifact is any ``*.json`` under ``examples/`` with a ``provenance``; its
directory is checked as a whole, against the documents beside it (``../docs``)
and the knobs it names (``target``), so a value or time that states no
grounding, or that its quote does not state, fails here. Regenerate them with
their ``record.py`` when the prompt changes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulacra.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _shipped() -> list[Path]:
    folders = set()
    for path in (ROOT / "examples").rglob("*.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(data, dict) and "provenance" in data:
            folders.add(path.parent)
    return sorted(folders)


FOLDERS = _shipped()


def test_the_examples_ship_scenario_artifacts() -> None:
    assert [f.relative_to(ROOT).as_posix() for f in FOLDERS] == [
        "examples/ride_hailing/scenarios/artifacts", "examples/social/scenarios/artifacts"]


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: f.relative_to(ROOT).as_posix())
def test_every_shipped_artifact_passes_check_require_grounding(
        folder: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(ROOT)  # artifacts name their target relative to the repository
    targets = {json.loads(p.read_text(encoding="utf-8"))["target"] for p in folder.glob("*.json")}
    [target] = targets
    rel = folder.relative_to(ROOT).as_posix()

    status = main(["scenarios", "check", rel, "--docs", f"{rel}/../docs", "--target", target,
                   "--require-grounding"])

    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert "not grounded" not in captured.err
    assert captured.out.startswith(f"ok: {len(list(folder.glob('*.json')))} artifacts in {rel} ")
