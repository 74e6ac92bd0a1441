"""How long `simulacra report` takes on a large run, and how long Chromium takes to open it.

    python bench/report.py [--agents 10000] [--steps 10] [--rounds 3] [--run-dir DIR]

1. runs the social example (scripted model) with AGENTS x STEPS into a run
   directory, timed (skipped with --run-dir DIR, which reuses one);
2. times `simulacra report DIR` as a user runs it (a fresh process: imports
   included), ROUNDS times, and build_report's parts in this process once;
3. opens the file in headless Chromium (Debian's chromium, under Playwright)
   ROUNDS times and times goto -> every chart of the first page drawn, then
   the log browser's filters over every event (an agent, then a text search),
   then an agent's page (its turns with what it saw, from calls.jsonl).

Targets (issue 15): the report in under 10 s, the page in under 3 s. The
numbers are wall clock on whatever machine runs this: the shared 2-vCPU VM
moves with its load (the load average is printed), so take the median of a
few rounds; the CPU seconds of `simulacra report` move much less with it.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIMULACRA = [sys.executable, "-m", "simulacra"]


def _run(agents: int, steps: int, out: Path) -> float:
    started = time.perf_counter()
    subprocess.run([*SIMULACRA, "run", str(ROOT / "examples" / "social" / "config.yaml"),
                    f"sim.agents={agents}", f"sim.steps={steps}", "--out", str(out),
                    "--no-progress"], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def _report_cli(run_dir: Path) -> tuple[float, float]:
    """Wall seconds of `simulacra report`, and the CPU seconds its process used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([*SIMULACRA, "report", str(run_dir)], check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _parts(run_dir: Path) -> dict[str, float]:
    from simulacra import report
    from simulacra.report import _build

    times: dict[str, float] = {}
    started = time.perf_counter()
    run = report.load_society_run(run_dir)
    times["read the run directory"] = time.perf_counter() - started
    mark = time.perf_counter()
    data = _build.society_data(run)
    times["aggregate, charts, log, threads, model calls"] = time.perf_counter() - mark
    mark = time.perf_counter()
    page = _build.render_page(data)
    times["render the page"] = time.perf_counter() - mark
    times["page size (MB)"] = len(page.encode("utf-8")) / 1e6
    return times


def _browser(path: Path, rounds: int) -> dict[str, list[float]]:
    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium")
    if executable is None:
        raise SystemExit("chromium is not installed (Debian: apt-get install chromium)")
    out: dict[str, list[float]] = {"load": [], "filter by agent": [], "text search": [],
                                   "an agent's page (turns and prompts)": []}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        for _ in range(rounds):
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            errors: list[str] = []
            page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
            started = time.perf_counter()
            page.goto(path.as_uri())
            page.wait_for_selector("body[data-ready]", timeout=120_000)
            page.wait_for_function("""() => {
                const charts = document.querySelectorAll('#page-overview div.chart');
                return charts.length > 0 && Array.from(charts).every(
                    d => d.getAttribute('data-drawn') && (d.data || []).length); }""")
            out["load"].append(time.perf_counter() - started)
            assert not errors, errors
            page.evaluate("location.hash = '#/log'")
            page.wait_for_selector("#page-log table.events tbody tr[data-row]")
            agent = page.evaluate("document.querySelector('#agent-names option').value")
            for what, field, value in (("filter by agent", "agent", agent),
                                       ("text search", "q", "patience")):
                page.click("#page-log button[type=reset]")
                page.wait_for_timeout(200)
                before = page.inner_text("#page-log p.note")
                started = time.perf_counter()
                page.fill(f"#page-log input[name={field}]", value)
                page.wait_for_function(
                    "before => document.querySelector('#page-log p.note').innerText !== before",
                    arg=before)
                took = time.perf_counter() - started
                out[what].append(took - (0.15 if field == "q" else 0.0))  # the typing pause
            # An agent's page: its calls parsed from its own script, the prompts' lines once.
            started = time.perf_counter()
            page.evaluate(f"location.hash = '#/agent/{agent}'")
            page.wait_for_selector("#page-agent table.turns tbody tr.turn pre.saw")
            out["an agent's page (turns and prompts)"].append(time.perf_counter() - started)
            assert not errors, errors
            page.close()
        browser.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--run-dir", type=Path, help="reuse this run directory")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="simulacra-report-bench-") as tmp:
        run_dir = args.run_dir
        if run_dir is None:
            run_dir = Path(tmp) / "run"
            took = _run(args.agents, args.steps, run_dir)
            print(f"simulacra run, {args.agents} agents x {args.steps} steps: {took:.1f} s")
        events = sum(1 for _ in (run_dir / "action_events.jsonl").open(encoding="utf-8"))
        print(f"run directory: {run_dir} ({events:,} events)")
        for name, value in _parts(run_dir).items():
            print(f"  {name}: {value:.2f}")
        print(f"load average before: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
        measured = [_report_cli(run_dir) for _ in range(args.rounds)]
        cli = [wall for wall, _ in measured]
        cpu = [used for _, used in measured]
        print(f"simulacra report: median {statistics.median(cli):.2f} s wall, "
              f"{statistics.median(cpu):.2f} s CPU (rounds: "
              f"{', '.join(f'{t:.2f}' for t in cli)}; target < 10 s)")
        page = run_dir / "report.html"
        print(f"report.html: {page.stat().st_size / 1e6:.1f} MB")
        for what, times in _browser(page, args.rounds).items():
            target = "; target < 3 s" if what == "load" else ""
            print(f"chromium, {what}: median {statistics.median(times):.2f} s "
                  f"(rounds: {', '.join(f'{t:.2f}' for t in times)}{target})")


if __name__ == "__main__":
    main()
