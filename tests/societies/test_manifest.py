"""manifest.json: versions, provider, hashes, seed, where completions came from; no API key
anywhere in a run directory; and a run directory moved to another folder still replays."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import simulacra
from simulacra.cli import main
from simulacra.llm import ScriptedServer

ROOT = Path(__file__).resolve().parents[2]
SOCIAL = ROOT / "examples" / "social"
SECRET = "sk-test-0123456789abcdef-never-written"  # noqa: S105 (a fake key)


def test_the_manifest_says_what_the_run_was_and_no_key_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SIMULACRA_TEST_KEY", SECRET)
    run_dir = tmp_path / "run"
    with ScriptedServer(api_key=SECRET) as server:
        code = main(["run", str(SOCIAL / "config.yaml"), "--out", str(run_dir), "--no-progress",
                     "sim.agents=6", "sim.steps=2", "sim.llm.provider=openai_compatible",
                     f"sim.llm.base_url={server.base_url}", "sim.llm.model=scripted",
                     "sim.llm.api_key_env=SIMULACRA_TEST_KEY"])
        assert code == 0, capsys.readouterr().err
        assert server.calls > 0
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["simulacra"] == simulacra.__version__
    assert manifest["python"].count(".") == 2
    assert manifest["seed"] == 0
    assert manifest["provider"] == {"name": "openai_compatible", "model": "scripted",
                                    "base_url": server.base_url,
                                    "api_key_env": "SIMULACRA_TEST_KEY"}
    assert manifest["completions"] == "live"
    assert manifest["finished"] is True
    recordings = (run_dir / "llm_recordings.sqlite").read_bytes()
    assert manifest["recordings_sha256"] == hashlib.sha256(recordings).hexdigest()
    source = (SOCIAL / "model.py").read_bytes()
    assert manifest["world_factory"]["sha256"] == hashlib.sha256(source).hexdigest()
    config = simulacra.load_config(run_dir / "config.yaml")
    from simulacra.societies._manifest import config_sha256

    assert manifest["config_sha256"] == config_sha256(config.data)
    for file in run_dir.rglob("*"):
        if file.is_file():
            assert SECRET.encode() not in file.read_bytes(), file


def test_a_run_directory_moved_with_its_model_replays(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = tmp_path / "project"
    shutil.copytree(SOCIAL, project / "bazaar_files",
                    ignore=shutil.ignore_patterns("__pycache__"))
    config = project / "society.yaml"
    config.write_text((SOCIAL / "config.yaml").read_text().replace(
        "factory: model.py:build", "factory: bazaar_files/model.py:build"))
    assert "bazaar_files/model.py:build" in config.read_text()
    run_dir = project / "runs" / "first"
    assert main(["run", str(config), "--out", str(run_dir), "--no-progress", "sim.agents=6",
                 "sim.steps=2"]) == 0
    assert str(project / "bazaar_files" / "model.py") in (run_dir / "config.yaml").read_text()

    moved = tmp_path / "elsewhere"
    project.rename(moved)  # the absolute path in config.yaml no longer exists
    replay = [sys.executable, "-m", "simulacra", "replay", str(moved / "runs" / "first"),
              "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(replay, capture_output=True, text=True, env=env, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "digest matches" in done.stdout

    shutil.rmtree(moved / "bazaar_files")  # without the model's files: one clear line
    done = subprocess.run(replay, capture_output=True, text=True, env=env, timeout=120,
                          check=False)
    assert done.returncode == 2
    assert "copy the model's files along with the run directory" in done.stderr


def test_a_key_put_in_the_config_by_mistake_is_not_echoed(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(SOCIAL / "config.yaml"), f"sim.llm.api_key={SECRET}",
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "sim.llm.api_key is not a known setting" in err
    assert SECRET not in err
