"""``examples/social/endpoints.yaml``: the demo over two routed endpoints, as its comment says."""

from __future__ import annotations

import json
from pathlib import Path

import simulacra
from simulacra.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "social" / "endpoints.yaml"


def test_the_endpoints_example_runs_with_no_server_and_gives_the_demos_digest(
        tmp_path: Path) -> None:
    """Both endpoints are scripted, so routing changes who answers and nothing else."""
    small = ["sim.agents=7", "sim.steps=2"]  # another size than the file's: the glob holds
    assert main(["run", str(EXAMPLE), "--out", str(tmp_path / "run"), "--no-progress",
                 *small]) == 0
    plain = simulacra.run_society(simulacra.load_config(ROOT / "examples" / "social" /
                                                        "config.yaml", small))
    assert (tmp_path / "run" / "digest.txt").read_text().split()[0] == plain.result.digest
    lines = [json.loads(line) for line in
             (tmp_path / "run" / "calls.jsonl").read_text().splitlines()]
    hosted = {line["agent"] for line in lines if line["endpoint"] == "hosted"}
    assert hosted == {line["agent"] for line in lines if line["agent"][0] in "abc"}
    assert hosted
    assert len(hosted) < len({line["agent"] for line in lines})
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())["llm"]
    priced = sum(line["cost"] for line in lines)
    assert summary["cost"] > 0
    assert abs(summary["cost"] - priced) < 1e-6
