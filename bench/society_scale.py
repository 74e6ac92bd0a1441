"""Society scale: the social demo from 10,000 to 1,000,000 agents, by the real CLI.

Each size runs ``simulacra run examples/social/config.yaml`` (the scripted
model, sequential, a fresh run directory) in a child process and reports
what a user would see: agents, the share of them that act in a step,
agent-steps per second and microseconds per agent-step (the whole command's
wall time over the agent-steps: engine, calls, events, telemetry, recordings,
checkpoints, build and digests included; and the run's own figure from its
summary), the peak memory of the child (its max RSS), the calls made and
served from recordings, and the whole command's seconds. ``--replay`` also
replays each run directory (``simulacra replay``: 0 calls expected) and
``--report`` renders ``simulacra report`` on it.

    python bench/society_scale.py                      # 10k x 10, 100k x 1, 1M x 1 at 0.05
    python bench/society_scale.py --sizes 10k          # one size
    python bench/society_scale.py --sizes 10k,1m --replay --report

Sizes: ``10k`` (10 steps, every agent acts), ``100k`` (1 step, every agent),
``1m`` (1 step, participation 0.05); or ``AGENTSxSTEPS@SHARE`` (``20000x5@0.5``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "social" / "config.yaml"

PRESETS = {"10k": (10_000, 10, 1.0), "100k": (100_000, 1, 1.0), "1m": (1_000_000, 1, 0.05)}


def _size(text: str) -> tuple[int, int, float]:
    text = text.strip().lower()
    if text in PRESETS:
        return PRESETS[text]
    agents, _, rest = text.partition("x")
    steps, _, share = rest.partition("@")
    return int(agents), int(steps or 1), float(share or 1.0)


def _child(argv: list[str]) -> tuple[float, int, subprocess.CompletedProcess[str]]:
    """Run *argv*; its wall seconds, its peak RSS in bytes (alone), and the finished process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    script = ("import resource, subprocess, sys, time\n"
              "start = time.perf_counter()\n"
              "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
              "took = time.perf_counter() - start\n"
              "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
              "sys.stdout.write(done.stdout)\n"
              "sys.stderr.write(done.stderr)\n"
              "print(f'\\n@@bench {took} {rss * 1024}')\n"
              "sys.exit(done.returncode)\n")
    done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True,
                          text=True, env=env, check=False)
    marker = done.stdout.rstrip().rsplit("\n", 1)[-1]
    _, took, rss = marker.split()
    return float(took), int(rss), done


def run_one(agents: int, steps: int, share: float, where: Path, *, replay: bool,
            report: bool) -> dict[str, Any]:
    out = where / f"social-{agents}x{steps}@{share}"
    argv = [sys.executable, "-m", "simulacra", "run", str(CONFIG), f"sim.agents={agents}",
            f"sim.steps={steps}", f"sim.engine.participation={share}",
            "sim.engine.mode=sequential", "--out", str(out), "--no-progress", "--json"]
    took, rss, done = _child(argv)
    if done.returncode != 0:
        raise SystemExit(f"run failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    llm = summary["llm"]
    throughput = llm.get("throughput", {})
    turns = int(summary.get("turns", 0))
    row: dict[str, Any] = {
        "agents": agents, "steps": steps, "participation": share,
        "active_share": round(turns / (agents * steps), 4) if agents * steps else 0.0,
        "agent_steps": turns,
        "agent_steps_per_s": round(turns / took, 1),
        "us_per_agent_step": round(took / turns * 1e6, 1) if turns else None,
        "run_us_per_agent_step": throughput.get("us_per_agent_step"),
        "peak_rss_mb": round(rss / 2**20, 1),
        "calls_made": llm.get("recorded_this_session", llm.get("calls")),
        "calls_from_recordings": llm.get("served_from_recordings", 0),
        "whole_command_s": round(took, 2),
        "digest": summary["digest"],
        "run_dir": str(out),
    }
    if replay:
        took, rss, done = _child([sys.executable, "-m", "simulacra", "replay", str(out),
                                  "--no-progress"])
        text = done.stdout + done.stderr
        row["replay_s"] = round(took, 2)
        row["replay_peak_rss_mb"] = round(rss / 2**20, 1)
        row["replay_matches"] = done.returncode == 0 and "digest matches" in text
        row["replay_calls"] = _replay_calls(text)
    if report:
        took, rss, done = _child([sys.executable, "-m", "simulacra", "report", str(out)])
        row["report_s"] = round(took, 2)
        row["report_ok"] = done.returncode == 0
        page = out / "report.html"
        row["report_mb"] = round(page.stat().st_size / 2**20, 2) if page.exists() else None
    return row


def _replay_calls(text: str) -> int | None:
    """The model calls a replay says it made ("..., 0 model calls")."""
    for line in text.splitlines():
        if "model calls" in line:
            words = line.replace(",", " ").split()
            at = words.index("model")
            try:
                return int(words[at - 1])
            except ValueError:
                return None
    return None


COLUMNS = ("agents", "steps", "active_share", "agent_steps", "agent_steps_per_s",
           "us_per_agent_step", "run_us_per_agent_step", "peak_rss_mb", "calls_made",
           "calls_from_recordings", "whole_command_s", "replay_s", "replay_calls",
           "replay_matches", "report_s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10k,100k,1m",
                        help="comma-separated: 10k, 100k, 1m or AGENTSxSTEPS@SHARE")
    parser.add_argument("--replay", action="store_true", help="replay each run too")
    parser.add_argument("--report", action="store_true", help="render its report too")
    parser.add_argument("--out", default=None, help="where the run directories go")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    where = Path(args.out or tempfile.mkdtemp(prefix="society-scale-"))
    where.mkdir(parents=True, exist_ok=True)
    rows = []
    for size in args.sizes.split(","):
        agents, steps, share = _size(size)
        row = run_one(agents, steps, share, where, replay=args.replay, report=args.report)
        rows.append(row)
        shown = {k: row[k] for k in COLUMNS if k in row}
        print(json.dumps(shown) if args.json else
              "  ".join(f"{k}={v}" for k, v in shown.items()), flush=True)
    if not args.json:
        print(f"\n{sys.executable} {' '.join(sys.argv)}; run directories in {where}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
