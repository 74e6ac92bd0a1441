"""Fixtures of the report's tests: run directories, a study, a monitor file, a browser.

The run directories are real runs of the social example (scripted model, a
few agents and steps): one on the round engine with prices and some malformed
replies (failed turns), one on the event-driven engine. The study and the
monitor file come from a post office of our own (``_report_models.py``).

``browser`` is headless Chromium (Debian's ``chromium`` package) driven by
Playwright. Without it the browser tests are skipped, unless the environment
variable ``CI`` is set: then they fail, so that CI never passes by skipping.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import simulacra
from simulacra.errors import ProviderTimeout, RateLimited
from simulacra.llm import CompletionRequest, ScriptedModel, default_rules

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SOCIAL = ROOT / "examples" / "social"
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import _report_models  # noqa: E402


def _malformed(request: CompletionRequest) -> bool:
    """About one reply in nine is not JSON, decided by the request alone."""
    return sum(map(ord, request.messages[-1].content)) % 9 == 0


def society_config(out: Path, *, engine: str = "round", agents: int = 12,
                   steps: int = 4) -> dict[str, Any]:
    """A config mapping of the social example."""
    return {
        "name": f"report-{engine}",
        "seed": 3,
        "sim": {
            "steps": steps, "agents": agents,
            "world": {"factory": f"{SOCIAL / 'model.py'}:build"},
            "engine": {"step": {"built_in": engine}, "mode": "sequential"},
            "llm": {"pricing": {"prompt_per_mtok": 0.5, "completion_per_mtok": 1.5}},
        },
        "run": {"out": str(out), "max_failed_fraction": 0.9},
    }


class FlakyModel:
    """The scripted model, with some calls failing as a provider's do (decided by the call site).

    About one call in seven times out (``ProviderTimeout``), one in eleven is
    rate limited (``RateLimited``): each fails its turn, and ``calls.jsonl``
    records it as a failed call.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def _check(self, site: Any) -> None:
        if site is None:
            return
        code = sum(map(ord, site.agent)) + 3 * site.n
        if code % 7 == 0:
            raise ProviderTimeout(f"POST http://llm.test/v1/chat/completions: timed out after "
                                  f"3 attempts (call {site.n} of {site.agent})")
        if code % 11 == 0:
            raise RateLimited("POST http://llm.test/v1/chat/completions: HTTP 429 after 3 "
                              "attempts")

    def complete(self, request: CompletionRequest, *, site: Any = None) -> Any:
        self._check(site)
        return self.inner.complete(request, site=site)

    async def acomplete(self, request: CompletionRequest, *, site: Any = None) -> Any:
        self._check(site)
        return await self.inner.acomplete(request, site=site)


def make_society_run(out: Path, *, engine: str = "round", agents: int = 12,
                     steps: int = 4, failures: bool = True, flaky: bool = False) -> Path:
    """Run the social example into *out* and return it (*flaky*: some model calls fail)."""
    rules = [("malformed", _malformed, lambda r, rng: "I'd rather not {say"),
             *default_rules()] if failures else None
    model: Any = ScriptedModel(seed=3, rules=rules)
    if flaky:
        model = FlakyModel(model)
    simulacra.run_society(society_config(out, engine=engine, agents=agents, steps=steps),
                          model=model)
    return out


@pytest.fixture(scope="session")
def society_run_maker() -> Any:
    """:func:`make_society_run`, for a test that needs a run of its own size."""
    return make_society_run


@pytest.fixture(scope="session")
def round_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished round-engine run with prices and failed turns."""
    return make_society_run(tmp_path_factory.mktemp("report") / "round")


@pytest.fixture(scope="session")
def event_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run of the event-driven engine (windows, queue depth, calls in flight)."""
    return make_society_run(tmp_path_factory.mktemp("report") / "events", engine="async_event",
                            steps=5)


@pytest.fixture(scope="session")
def flaky_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished round-engine run in which some model calls failed (timeouts, HTTP 429)."""
    return make_society_run(tmp_path_factory.mktemp("report") / "flaky", flaky=True)


@pytest.fixture(scope="session")
def flaky_event_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same on the event-driven engine."""
    return make_society_run(tmp_path_factory.mktemp("report") / "flaky-events",
                            engine="async_event", steps=5, flaky=True)


#: The endpoints :func:`add_endpoints` gives a run, as ``summary.json``'s ``llm.endpoints``.
ENDPOINTS = {
    "local": {"provider": "openai", "model": "llama-3.1-8b",
              "base_urls": ["http://127.0.0.1:8000/v1"]},
    "hosted": {"provider": "openai", "model": "gpt-4o-mini",
               "base_urls": ["https://llm.test/v1"]},
}


def add_endpoints(run: Path) -> Path:
    """Rewrite *run*'s ``calls.jsonl`` as a run with the two :data:`ENDPOINTS` writes it.

    (Until runs route calls to endpoints themselves, issue 28.) An agent whose
    number is even is routed to ``local``, an odd one to ``hosted``; the
    first call of an even agent that returned, and the first one that failed,
    were moved to ``hosted`` by the fallback (``fallback_from: "local"``).
    ``summary.json`` declares both endpoints. Costs, tokens and latencies stay
    as the run wrote them.
    """
    lines = [json.loads(line) for line in (run / "calls.jsonl").read_text().splitlines()]
    moved: set[bool] = set()
    for line in lines:
        local = int(re.sub(r"\D", "", line["agent"]) or 0) % 2 == 0
        line["endpoint"] = "local" if local else "hosted"
        if local and line["ok"] not in moved:
            moved.add(line["ok"])
            line["endpoint"], line["fallback_from"] = "hosted", "local"
    (run / "calls.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    summary = json.loads((run / "summary.json").read_text())
    summary["llm"]["endpoints"] = ENDPOINTS
    (run / "summary.json").write_text(json.dumps(summary))
    return run


@pytest.fixture(scope="session")
def endpoint_maker() -> Any:
    """:func:`add_endpoints`, for a test that rewrites a run of its own."""
    return add_endpoints


@pytest.fixture(scope="session")
def endpoint_run(flaky_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`add_endpoints` of a copy of ``flaky_run`` (some calls failed)."""
    out = tmp_path_factory.mktemp("report") / "endpoints"
    shutil.copytree(flaky_run, out)
    (out / "report.html").unlink(missing_ok=True)
    return add_endpoints(out)


@pytest.fixture(scope="session")
def study_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A study directory of the post office: 2 x 2 configs, 4 replications."""
    out = tmp_path_factory.mktemp("report") / "study"
    configs = simulacra.config_grid(clerks=[1, 2], rate=[0.6, 0.9])
    experiment = simulacra.Experiment(f"{HERE / '_report_models.py'}:run", configs,
                                      master_seed=11, spool_dir=out, convention="run")
    experiment.run(4, "sequential")
    return out


@pytest.fixture(scope="session")
def scenario_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A study of the bank example with a scenarios axis: 2 configs x (baseline + 2), 4 reps."""
    from simulacra.scenarios import Scenario

    rush = Scenario(name="rush", description="A lunch-time rush: 30% more customers.",
                    interventions=[{"knob": "demand", "at": 20, "value": 1.3, "duration": 100}],
                    citations=[{"passage": "branch-report.md#0-120:abcdef012345",
                                "quote": "queues doubled at lunch time"}])
    slow = Scenario(name="slow-tellers", interventions=[{"knob": "service_speed", "at": 0,
                                                         "value": 0.9, "ramp": 30}])
    out = tmp_path_factory.mktemp("report") / "scenario-study"
    experiment = simulacra.Experiment.from_run(
        f"{ROOT / 'examples' / 'bank.py'}:run",
        [{"customers": 200, "warmup": 0.0}, {"customers": 200, "warmup": 0.0, "servers": 4}],
        master_seed=9, scenarios=[rush, slow], spool_dir=out)
    experiment.run(4, "sequential")
    return out


@pytest.fixture(scope="session")
def monitors_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ``monitors.json`` of the post office."""
    out = tmp_path_factory.mktemp("report") / "office"
    out.mkdir()
    return _report_models.write_monitors(out)


# -- the browser ------------------------------------------------------------------------


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium under Playwright; skipped when missing, a failure when CI is set."""
    executable = _chromium()
    why = None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        why = "playwright is not installed (it is in the dev extra)"
    if why is None and executable is None:
        why = "chromium is not installed (Debian: apt-get install chromium)"
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and the browser tests cannot run: {why}")
        pytest.skip(why)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable,
                                              args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()
