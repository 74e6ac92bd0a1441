"""`simulacra run` and `simulacra replay` fit an 80-column terminal (a real pseudo-terminal)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "social" / "config.yaml"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def _in_terminal(args: list[str], cwd: Path, columns: int = 80) -> tuple[int, list[str]]:
    """Run simulacra on a pseudo-terminal *columns* wide; return its status and its lines."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TERM": "xterm"}
    env.pop("COLUMNS", None)
    process = subprocess.Popen([sys.executable, "-m", "simulacra", *args], stdin=follower,
                               stdout=follower, stderr=follower, env=env, close_fds=True,
                               cwd=cwd)
    os.close(follower)
    chunks: list[bytes] = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    code = process.wait(timeout=120)
    text = ANSI.sub("", b"".join(chunks).decode("utf-8", "replace"))
    lines = [part for line in text.split("\n") for part in line.split("\r")]
    return code, lines


@pytest.mark.timeout(180)
@pytest.mark.parametrize("engine", ["round", "async_event"])
def test_run_and_replay_fit_80_columns(tmp_path: Path, engine: str) -> None:
    # A user's path: relative, as typed (a path longer than the terminal cannot fit).
    code, lines = _in_terminal(["run", str(CONFIG), "--out", "runs/first",
                                f"sim.engine.step.built_in={engine}"], tmp_path)
    assert code == 0, "\n".join(lines)
    assert any("digest" in line for line in lines)
    assert any("sample threads" in line for line in lines)
    too_long = [line for line in lines if len(line.rstrip()) > 80]
    assert not too_long, too_long
    code, lines = _in_terminal(["replay", "runs/first"], tmp_path)
    assert code == 0, "\n".join(lines)
    assert not [line for line in lines if len(line.rstrip()) > 80]


@pytest.mark.timeout(300)
def test_a_study_with_scenarios_fits_80_columns(tmp_path: Path) -> None:
    pytest.importorskip("polars")
    from simulacra.scenarios import Scenario

    Scenario(name="rush-hour", interventions=[
        {"knob": "demand", "at": 20, "value": 1.3, "duration": 100}]).save(tmp_path / "sc")
    Scenario(name="slow-tellers", interventions=[
        {"knob": "service_speed", "at": 0, "value": 0.8}]).save(tmp_path / "sc")
    (tmp_path / "study.toml").write_text(
        f'model = "{ROOT / "examples" / "bank.py"}:run"\nmaster_seed = 4\nreplications = 3\n'
        'backend = "sequential"\nscenarios = "sc"\n[base]\ncustomers = 300\n'
        "[grid]\nservers = [3, 4]\n", encoding="utf-8")

    code, lines = _in_terminal(["experiment", "study.toml", "--no-progress"], tmp_path)

    assert code == 0, "\n".join(lines)
    assert any("vs base" in line for line in lines)
    assert any("rush-hour" in line for line in lines)
    # every name whole on its line: not folded into "slow-tel" / "lers"
    assert sum(" slow-tellers " in line for line in lines) == 2  # once per config
    assert sum(" baseline " in line for line in lines) == 2
    assert sum(line.startswith("servers=") for line in lines) == 2
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    assert not [line for line in lines if "…" in line]  # no value cut short
    assert (tmp_path / "study-results" / "effects.csv").is_file()


@pytest.mark.timeout(300)
def test_the_example_study_fits_80_columns_and_cuts_no_value(tmp_path: Path) -> None:
    pytest.importorskip("polars")
    import shutil

    # The example names the checkout's bank by its absolute path (it runs from anywhere);
    # a copy beside the study, named relative to it, is what a user moving it would do.
    shutil.copy(ROOT / "examples" / "bank.py", tmp_path / "bank.py")
    code, lines = _in_terminal(["experiment", "--example"], tmp_path)
    text = "\n".join(lines).replace(str(ROOT / "examples" / "bank.py"), "bank.py")
    (tmp_path / "study.toml").write_text(text.replace("replications = 5", "replications = 2")
                                         .replace('backend = "auto"', 'backend = "sequential"'),
                                         encoding="utf-8")

    code, lines = _in_terminal(["experiment", "study.toml", "--no-progress"], tmp_path)

    assert code == 0, "\n".join(lines)
    assert any(line.startswith("for customers=2000") for line in lines)
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    assert not [line for line in lines if "…" in line]


def test_experiment_help_and_example_fit_80_columns(tmp_path: Path) -> None:
    for args in (["experiment", "--help"], ["experiment", "--example"]):
        code, lines = _in_terminal(args, tmp_path)
        assert code == 0
        assert max(len(line) for line in lines) <= 80, (args, max(lines, key=len))
