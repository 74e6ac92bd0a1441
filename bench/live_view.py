"""What the live view costs a society run: the social example without it, with it, and with a
browser watching it.

Three ways of running ``simulacra run examples/social/config.yaml`` (each a fresh process,
alternating in order round after round):

- ``off``: no view;
- ``view``: ``--view``, no browser attached (the server waits in its child process);
- ``browser``: ``--view`` with headless Chromium (Playwright) on the page from the moment
  the URL is printed until the run has ended: charts redrawn, events listed, cost counted.

Two measures of each: the wall time of the whole command (start to exit: Python's start,
the view's child process, the run, the summary) and the run's own time, the sum of its
steps' wall clock (``summary.json["wall_s"]``). The overhead is the ratio of medians to
``off``, minus one. The digest of every run is checked against the first: the view never
changes a run.

    python bench/live_view.py [--rounds 3] [--no-browser] [KEY.PATH=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "social" / "config.yaml"
URL = re.compile(r"(http://\S+/\?token=\S+)")


def _chromium_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of each chromium process this script started, alive now."""
    ticks = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        pid = int(stat.parent.name)
        parent[pid] = int(fields[1])
        if text[text.index("(") + 1:text.rindex(")")].startswith(("chrom", "headless")):
            cpu[pid] = (int(fields[11]) + int(fields[12])) / ticks
    mine = os.getpid()

    def ours(pid: int) -> bool:
        while pid > 1:
            if pid == mine:
                return True
            pid = parent.get(pid, 0)
        return False

    return {pid: seconds for pid, seconds in cpu.items() if ours(pid)}


def _chromium_spent(before: dict[int, float]) -> float:
    """What chromium spent since *before* (processes that ended meanwhile are not counted)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in _chromium_cpu().items())


def _tree_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run_once(mode: str, overrides: list[str], browser: Any) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix="live-view-bench-")) / "run"
    command = [sys.executable, "-m", "simulacra", "run", str(CONFIG), "--no-progress",
               "--out", str(out), *overrides]
    if mode != "off":
        command.append("--view")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    page = None
    cpu0, chromium0 = _tree_cpu(), _chromium_cpu()
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, env=env)
    assert process.stderr is not None
    attached = None
    if mode != "off":
        line = process.stderr.readline()
        found = URL.search(line)
        assert found, line
        if mode == "browser":
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(found.group(1))
            attached = time.perf_counter() - start
    err = process.communicate()[1]
    wall = time.perf_counter() - start
    cpu, chromium = _tree_cpu() - cpu0, _chromium_spent(chromium0)
    assert process.returncode == 0, err
    if page is not None:
        # The page followed the run to its end (it was attached, not only opened).
        page.wait_for_function(
            "() => document.getElementById('state').dataset.state === 'ended'", timeout=10_000)
        page.close()
    summary = json.loads((out / "summary.json").read_text())
    shutil.rmtree(out.parent, ignore_errors=True)
    return {"wall": wall, "steps": float(summary["wall_s"]), "digest": summary["digest"],
            "attached": attached, "cpu": cpu, "chromium": chromium}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("overrides", nargs="*", default=["sim.agents=200", "sim.steps=40"])
    args = parser.parse_args()
    modes = ["off", "view"]
    context = None
    browser = None
    if not args.no_browser:
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            print("playwright is not installed: no browser runs", flush=True)
        else:
            executable = shutil.which("chromium") or shutil.which("chromium-browser")
            if executable is None:
                print("chromium is not installed: no browser runs", flush=True)
            else:
                context = sync_playwright().start()
                browser = context.chromium.launch(executable_path=executable,
                                                  args=["--no-sandbox"])
                modes.append("browser")
    results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    digests = set()
    try:
        for index in range(args.rounds):
            order = modes if index % 2 == 0 else modes[::-1]
            for mode in order:
                result = _run_once(mode, args.overrides, browser)
                results[mode].append(result)
                digests.add(result["digest"])
                more = (f", page loaded {result['attached']:.2f} s after the start"
                        if result["attached"] is not None else "")
                print(f"round {index + 1} {mode:>7}: command {result['wall']:.3f} s, steps "
                      f"{result['steps']:.3f} s, CPU {result['cpu']:.2f} s (+ chromium "
                      f"{result['chromium']:.2f} s){more}", flush=True)
    finally:
        if browser is not None:
            browser.close()
        if context is not None:
            context.stop()
    assert len(digests) == 1, f"the view changed a run: {digests}"
    base_wall = statistics.median(r["wall"] for r in results["off"])
    base_steps = statistics.median(r["steps"] for r in results["off"])
    base_cpu = statistics.median(r["cpu"] for r in results["off"])
    print(f"{' '.join(args.overrides)}, {args.rounds} rounds, one digest; medians:")
    for mode in modes:
        wall = statistics.median(r["wall"] for r in results[mode])
        steps = statistics.median(r["steps"] for r in results[mode])
        cpu = statistics.median(r["cpu"] + r["chromium"] for r in results[mode])
        print(f"  {mode:>7}: command {wall:.3f} s ({100 * (wall / base_wall - 1):+.1f}%), "
              f"steps {steps:.3f} s ({100 * (steps / base_steps - 1):+.1f}%), CPU with "
              f"chromium {cpu:.2f} s ({100 * (cpu / base_cpu - 1):+.1f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
