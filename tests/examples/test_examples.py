"""The shipped examples run as tests: their models, their scripts and the CLI on them."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import simulacra
from simulacra._util import install_hint
from simulacra.cli import main
from simulacra.parallel import mean_interval

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SRC = ROOT / "src"

BANK_KPIS = ("mean_wait", "erlang_c_wait", "relative_error", "utilisation", "served",
             "measured_from")
FLEET_KPIS = ("requests", "served", "abandoned", "open", "abandonment_rate", "mean_wait",
              "utilisation", "charges", "mean_charger_wait", "charger_utilisation")



@pytest.fixture(scope="module")
def bank(load_module: Callable[[str, Path], ModuleType]) -> ModuleType:
    return load_module("_example_bank", EXAMPLES / "bank.py")


@pytest.fixture(scope="module")
def fleet_model(load_module: Callable[[str, Path], ModuleType]) -> ModuleType:
    return load_module("_example_ride_hailing_model", EXAMPLES / "ride_hailing" / "model.py")


def _script(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=60, check=False,
    )


#: Runs a script as `python SCRIPT ARGS...` does, with some modules missing (as on a plain
#: install): sys.modules[name] = None makes `import name` raise ImportError.
_WITHOUT = """\
import os, runpy, sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
path = sys.argv[2]
sys.argv = sys.argv[2:]
if os.path.isfile(path):  # run_path puts a directory on sys.path, but not a file's own
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
runpy.run_path(path, run_name="__main__")
"""


def script_without(modules: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run `python ARGS...` with the comma-separated *modules* unimportable."""
    return _script("-c", _WITHOUT, modules, *args, cwd=cwd)


# --------------------------------------------------------------------------- bank


def test_erlang_c_formula_known_values(bank: ModuleType) -> None:
    # M/M/1: Wq = rho / (mu - lambda) = 0.5 / 0.5.
    assert math.isclose(bank.erlang_c_wait(1, 0.5, 1.0), 1.0)
    # M/M/2, a = 1: C = 1/3, Wq = C / (2 - 1).
    assert math.isclose(bank.erlang_c_wait(2, 1.0, 1.0), 1.0 / 3.0)


def test_bank_defaults(bank: ModuleType) -> None:
    start = time.perf_counter()
    kpis = bank.run()
    assert time.perf_counter() - start < 5.0
    assert set(BANK_KPIS) <= set(kpis)
    assert kpis["served"] == 20000
    assert kpis["relative_error"] == abs(kpis["mean_wait"] - kpis["erlang_c_wait"]) / kpis[
        "erlang_c_wait"]
    assert bank.run() == kpis  # same seed, same KPIs


def test_bank_mean_wait_matches_erlang_c(bank: ModuleType) -> None:
    """The simulated mean wait of M/M/3 at load 0.8 is within 12% of Erlang C.

    Why 12%: waits of successive customers are strongly correlated, so the
    error of the mean is much larger than s / sqrt(n) suggests. Over 30 seeds
    with these parameters (100 000 customers, lambda 2.4, mu 1, c 3) the
    relative error had a standard deviation of 3.9% (largest 9.0%), so 12% is
    about three standard deviations: a correct kernel passes for practically
    every seed. It still fails for a wrong model: with 4 tellers Wq is 0.18,
    and with 2 the queue is unstable. (The 30 seeds were measured from the
    opening; the default warm-up takes out a bias below 0.1%, far below that noise.
    Where the warm-up matters is tested below, on short runs.)
    """
    kpis = bank.run(seed=42, arrival_rate=2.4, customers=100_000)
    wq = bank.erlang_c_wait(3, 2.4, 1.0)
    assert kpis["erlang_c_wait"] == wq
    assert kpis["relative_error"] < 0.12, kpis
    # The check has power: the neighbouring model is far outside the tolerance.
    assert abs(kpis["mean_wait"] / bank.erlang_c_wait(4, 2.4, 1.0) - 1.0) > 0.12
    # Utilisation converges much faster (sd 0.0034 over the same 30 seeds).
    assert abs(kpis["utilisation"] - 0.8) < 0.015, kpis
    assert kpis["served"] == 100_000


def test_bank_rejects_unstable_and_bad_parameters(bank: ModuleType) -> None:
    with pytest.raises(simulacra.ConfigError, match="arrival_rate"):
        bank.run(arrival_rate=3.0)
    with pytest.raises(simulacra.ConfigError, match="servers"):
        bank.run(servers=0)
    with pytest.raises(simulacra.ConfigError, match="customers"):
        bank.run(customers=0)


def test_bank_script() -> None:
    result = _script(str(EXAMPLES / "bank.py"))
    assert result.returncode == 0, result.stderr
    for name in ("mean_wait", "erlang_c_wait", "utilisation", "served"):
        assert name in result.stdout


def test_cli_runs_bank(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(EXAMPLES / "bank.py"), "--seed", "3"]) == 0
    out = capsys.readouterr().out
    for name in BANK_KPIS:
        assert name in out


# --------------------------------------------------------------------------- ride hailing


def test_fleet_defaults_run_fast_and_are_deterministic(fleet_model: ModuleType) -> None:
    start = time.perf_counter()
    first = fleet_model.run()
    assert time.perf_counter() - start < 5.0
    assert tuple(first) == FLEET_KPIS
    assert fleet_model.run() == first
    assert first["served"] > 0
    assert 0.0 < first["utilisation"] < 1.0
    assert first["charges"] > 0


def test_fleet_different_seeds_differ(fleet_model: ModuleType) -> None:
    assert fleet_model.run(seed=1) != fleet_model.run(seed=2)


def _traced(fleet_model: ModuleType, seed: int, **params: Any) -> tuple[str, dict[str, Any]]:
    sim = simulacra.Sim(seed, trace=True)
    fleet = fleet_model.build(sim, **params)
    sim.run(until=fleet.params.horizon)
    sim._check_invariants()
    return simulacra.Trace.of(sim).digest(), fleet.kpis()


def test_fleet_trace_digest_is_reproducible(fleet_model: ModuleType) -> None:
    params = {"horizon": 200.0, "policy": "power_of_d"}
    digest, kpis = _traced(fleet_model, 7, **params)
    assert _traced(fleet_model, 7, **params) == (digest, kpis)
    assert _traced(fleet_model, 8, **params)[0] != digest
    # Tracing does not change the model.
    assert kpis == fleet_model.run(seed=7, **params)


@pytest.mark.parametrize("vehicles", [40, 22])
def test_fleet_accounting(fleet_model: ModuleType, vehicles: int) -> None:
    sim = simulacra.Sim(11)
    fleet = fleet_model.build(sim, vehicles=vehicles, horizon=300.0)
    sim.run(until=300.0)
    kpis = fleet.kpis()
    outcomes = [request.outcome for request in fleet.requests]
    finished = sum(outcome is not None for outcome in outcomes)
    assert kpis["served"] == outcomes.count("served")
    assert kpis["abandoned"] == outcomes.count("abandoned")
    assert kpis["served"] + kpis["abandoned"] == finished
    assert kpis["requests"] == finished + kpis["open"] == len(fleet.requests)
    # An abandoned request never had a vehicle; a pickup takes at least one drive.
    for request in fleet.requests:
        if request.outcome == "abandoned":
            assert request.vehicle is None
        if request.picked_up is not None:
            assert request.picked_up - request.arrived >= fleet.params.min_travel - 1e-9
    if vehicles == 22:  # an undersized fleet: the abandonment path is exercised
        assert kpis["abandoned"] > 0
        assert 0.0 < kpis["abandonment_rate"] < 1.0


def test_fleet_policies(fleet_model: ModuleType) -> None:
    closest = fleet_model.run(policy="closest")
    sampled = fleet_model.run(policy="power_of_d", d=2)
    everyone = fleet_model.run(policy="power_of_d", d=1000)
    assert sampled != closest
    # Sampling fewer vehicles can only lengthen pickups on average here.
    assert sampled["mean_wait"] > closest["mean_wait"]
    # d larger than the fleet samples every idle vehicle: the same choice as closest,
    # up to which of equally close vehicles is picked.
    assert everyone["mean_wait"] == pytest.approx(closest["mean_wait"], rel=0.05)


def test_fleet_travel_times_are_never_zero(fleet_model: ModuleType) -> None:
    sim = simulacra.Sim(0)
    fleet = fleet_model.build(sim, zones=9, min_travel=0.5, hop_time=0.25)
    assert fleet.params.lookahead == 0.5
    assert min(min(row) for row in fleet.travel) == 0.5
    assert fleet.travel[0][4] == fleet.travel[0][5] == 0.5 + 4 * 0.25  # the short way round


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("vehicles", 0),
        ("vehicles", 2.5),
        ("zones", 0),
        ("demand_rate", 0.0),
        ("horizon", -1.0),
        ("policy", "nearest"),
        ("d", 0),
        ("patience", float("nan")),
        ("min_travel", 0.0),
        ("hop_time", -1.0),
        ("stations", 13),
        ("chargers", 0),
        ("recharge_below", 1.5),
        ("recharge_below", 0.01),
    ],
)
def test_fleet_bad_parameters_name_the_field(fleet_model: ModuleType, field: str,
                                             value: object) -> None:
    with pytest.raises(simulacra.ConfigError) as info:
        fleet_model.run(**{field: value})
    message = str(info.value)
    assert field in message
    assert repr(value) in message
    assert "must be" in message


def test_fleet_policy_error_lists_the_choices(fleet_model: ModuleType) -> None:
    with pytest.raises(simulacra.ConfigError, match="'closest', 'power_of_d'"):
        fleet_model.run(policy="random")


def test_fleet_build_rejects_unknown_parameters(fleet_model: ModuleType) -> None:
    with pytest.raises(simulacra.ConfigError, match="'fleet_size'"):
        fleet_model.build(simulacra.Sim(0), fleet_size=3)


def test_fleet_script() -> None:
    result = _script(str(EXAMPLES / "ride_hailing"))
    assert result.returncode == 0, result.stderr
    for name in FLEET_KPIS:
        assert name in result.stdout
    assert "closest" in result.stdout
    assert "power_of_d" in result.stdout


def test_fleet_script_plain_text_and_errors() -> None:
    result = _script(str(EXAMPLES / "ride_hailing"), "--plain", "--policy", "closest")
    assert result.returncode == 0, result.stderr
    assert "mean_wait" in result.stdout
    bad = _script(str(EXAMPLES / "ride_hailing"), "--vehicles", "0")
    assert bad.returncode == 2
    assert "vehicles" in bad.stderr


def test_cli_runs_fleet_directory(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(EXAMPLES / "ride_hailing"), "--seed", "3",
                 "--set", "horizon=120"]) == 0
    out = capsys.readouterr().out
    for name in FLEET_KPIS:
        assert name in out


# --------------------------------------------------------------------------- ride hailing on SimPy


class _SimPySim:
    """Just enough of the Sim API, on SimPy 4, to run the ride-hailing model unchanged.

    Random streams come from a simulacra Sim with the same seed, so both
    kernels see the same draws; everything else is SimPy's.
    """

    def __init__(self, seed: int) -> None:
        import simpy

        self.env = simpy.Environment()
        self._streams = simulacra.Sim(seed)

    @property
    def now(self) -> float:
        return float(self.env.now)

    def rng(self, name: str) -> Any:
        return self._streams.rng(name)

    def event(self) -> Any:
        return self.env.event()

    def delay(self, delay: float, value: Any = None) -> Any:
        return self.env.timeout(delay, value)

    def record(self, kind: str, who: str, payload: object = None) -> None:
        pass

    def spawn(self, fn: Any, *args: Any, name: str | None = None) -> Any:
        return self.env.process(fn if hasattr(fn, "send") else fn(self, *args))

    def run(self, until: float) -> None:
        self.env.run(until)


def _fleet_state(fleet: Any) -> tuple[Any, ...]:
    return (fleet.served, fleet.abandoned, fleet.charges, fleet.busy_time, tuple(fleet.waits),
            tuple((r.outcome, r.picked_up, r.vehicle and r.vehicle.index)
                  for r in fleet.requests),
            tuple((v.zone, v.battery, v.state) for v in fleet.vehicles))


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("params", [
    {"policy": "closest"},
    {"policy": "power_of_d"},
    {"vehicles": 15, "chargers": 1, "patience": 3.0},
], ids=["closest", "power_of_d", "starved"])
def test_fleet_matches_simpy(seed: int, params: dict[str, Any],
                             load_module: Callable[[str, Path], ModuleType]) -> None:
    """The fleet model gives bit-identical results on SimPy: the kernel is SimPy's."""
    pytest.importorskip("simpy")
    import simpy

    model = EXAMPLES / "ride_hailing" / "model.py"
    ours_model = load_module("_example_ride_hailing_model_a", model)
    simpy_model = load_module("_example_ride_hailing_model_b", model)
    # The model looks these names up in its module globals when it builds.
    setattr(simpy_model, "FilterStore", lambda sim: simpy.FilterStore(sim.env))  # noqa: B010
    setattr(simpy_model, "Resource",  # noqa: B010
            lambda sim, capacity: simpy.Resource(sim.env, capacity=capacity))

    ours = simulacra.Sim(seed)
    ours_fleet = ours_model.build(ours, horizon=300.0, **params)
    ours.run(until=300.0)
    theirs = _SimPySim(seed)
    theirs_fleet = simpy_model.build(theirs, horizon=300.0, **params)
    theirs.run(until=300.0)
    assert ours_fleet.served > 0
    assert _fleet_state(ours_fleet) == _fleet_state(theirs_fleet)


def test_the_sharded_run_of_docs_parallel_runs_as_written(tmp_path: Path) -> None:
    """The ShardedSim example of docs/parallel.md, saved as branches.py and run as a script."""
    text = (ROOT / "docs" / "parallel.md").read_text()
    start = text.index("```python", text.index("# Sharded runs")) + len("```python\n")
    (tmp_path / "branches.py").write_text(text[start:text.index("```", start)])
    done = subprocess.run([sys.executable, "branches.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "'ties_across_shards'" in done.stdout


@pytest.mark.parametrize("script", ["pdes_models.py", "ride_hailing/sharded.py"])
def test_the_pdes_examples_run_as_scripts_and_agree(script: str, tmp_path: Path) -> None:
    """`python examples/...` prints each partition's verdict against the unpartitioned run."""
    path = ROOT / "examples" / script
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, check=False, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("equal") >= 3
    assert "DIFFERENT" not in done.stdout


def test_the_readme_bank_model_runs_with_the_readme_commands(tmp_path: Path) -> None:
    """The README's bank.py, saved as written, runs with the commands shown under it."""
    text = (ROOT / "README.md").read_text()
    start = text.index("```python\n# bank.py") + len("```python\n")
    (tmp_path / "bank.py").write_text(text[start:text.index("```", start)])
    commands = text[text.index("```bash", start) + len("```bash\n"):]
    commands = commands[:commands.index("```")]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    ran = 0
    for line in commands.splitlines():
        args = line.split("#")[0].split()
        if len(args) < 3 or args[:2] != ["simulacra", "run"] or "bank.py" not in args[2]:
            continue
        done = subprocess.run([sys.executable, "-m", "simulacra", *args[1:]], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120, check=False, env=env)
        assert done.returncode == 0, (line, done.stderr)
        assert "mean_wait" in done.stdout, line
        ran += 1
    assert ran == 3


# ------------------------------------------------------------- every example, as a newcomer


def _named_examples() -> set[str]:
    """The examples README.md and docs/*.md name: a .py file, or an example's directory."""
    named: set[str] = set()
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        # (not tests/examples/..., which the docs cite as the tests of an example)
        for mention in re.findall(r"(?<![\w/])examples/[\w./]+", doc.read_text(encoding="utf-8")):
            parts = mention.rstrip("./").split("/")[1:]
            named.add("/".join(parts) if parts[-1].endswith(".py") else parts[0])
    return named


#: Each example as a newcomer runs it (small arguments), and what its output must hold.
#: "{out}" is a fresh output directory.
NEWCOMER_RUNS: dict[str, tuple[tuple[str, ...], str]] = {
    "bank.py": ((), "erlang_c_wait"),
    "clinic": (("--patients", "25", "--mode", "threads"), "left without being seen"),
    "contagion": (("--banks", "40", "--seeds", "3", "--degree", "3"), "75-100%"),
    "llm_workflow": (("--plain", "--horizon", "200"), "p95_latency"),
    "llm_workflow/sweep.py": (("{out}", "--horizon", "60", "--no-plot"),
                              "capacity sweep: 27 configurations"),
    "pausable": (("--seed", "1", "--writers", "2"), "async fan-in"),
    "pausable/newsroom.py": (("--seed", "1", "--writers", "2"), "async fan-in"),
    "pregel": (("--vertices", "200", "--edges", "600"), "identical: True"),
    "ride_hailing": (("--plain", "--horizon", "120"), "abandonment_rate"),
    "ride_hailing/fleet_sizing.py": (("{out}", "--replications", "2", "--horizon", "60"),
                                     "means with 95% CI"),
    "sir": (("--people", "150", "--steps", "10"), "final size"),
}


#: Examples the docs name that run as scripts in a test of their own.
RUN_ELSEWHERE = {
    "social": "tests/societies/test_social.py::test_python_examples_social_runs",
    "pdes_models.py": "test_the_pdes_examples_run_as_scripts_and_agree",
    "ride_hailing/sharded.py": "test_the_pdes_examples_run_as_scripts_and_agree",
    # A module that docs/scenarios.md names for its knobs, not a script.
    "ride_hailing/model.py": "tests/examples/test_ride_hailing_scenarios.py",
    "social/model.py": "tests/examples/test_social_scenarios_example.py",
    # The social demo's agents, named by docs/social.md as an example of AgentMemory.
    "social/agents.py": "tests/societies/test_memory_budget.py",
}


def test_every_example_the_docs_name_is_run_as_a_script() -> None:
    named = _named_examples()
    assert {"bank.py", "pregel", "ride_hailing/fleet_sizing.py", "social"} <= named  # the parse
    missing = named - set(NEWCOMER_RUNS) - set(RUN_ELSEWHERE)
    assert not missing, f"add these to NEWCOMER_RUNS: {sorted(missing)}"


@pytest.mark.parametrize("example", sorted(NEWCOMER_RUNS))
def test_each_example_runs_as_a_newcomer_runs_it(example: str, tmp_path: Path) -> None:
    """`python examples/NAME` from the repository root prints its result and exits 0."""
    args, expected = NEWCOMER_RUNS[example]
    out = tmp_path / "out"
    done = _script(f"examples/{example}", *(a.format(out=out) for a in args))
    assert done.returncode == 0, done.stderr
    assert expected in done.stdout, done.stdout
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("example", "args", "field"), [
    ("bank.py", ("--servers", "0"), "servers"),
    ("bank.py", ("--arrival-rate", "3"), "arrival_rate"),
    ("bank.py", ("--warmup", "-1"), "warmup"),
    ("contagion", ("--banks", "1"), "banks"),
    ("contagion", ("--seeds", "0"), "seeds"),
    ("llm_workflow", ("--servers", "0"), "servers"),
    ("llm_workflow", ("--sweep", "{out}", "--servers", "2"), "--servers"),
    ("llm_workflow", ("--sweep", "{out}", "--replications", "0"), "replications"),
    ("llm_workflow", ("--sweep", "{out}", "--sweep-backend", "nope"), "backend"),
    ("llm_workflow/sweep.py", ("{out}", "--horizon", "0"), "horizon"),
    ("pausable/newsroom.py", ("--writers", "0"), "writers"),
    ("pregel", ("--vertices", "0"), "vertices"),
    ("ride_hailing", ("--vehicles", "0"), "vehicles"),
    ("ride_hailing/fleet_sizing.py", ("{out}", "--replications", "0"), "replications"),
    ("ride_hailing/fleet_sizing.py", ("{out}", "--backend", "nope"), "backend"),
    ("ride_hailing/fleet_sizing.py", ("{out}", "--horizon", "-1"), "horizon"),
    ("sir", ("--people", "0"), "people"),
    ("sir", ("--backend", "nope"), "backend"),
])
def test_bad_options_are_one_error_line(example: str, args: tuple[str, ...], field: str,
                                        tmp_path: Path) -> None:
    """A bad option: one line naming it, status 2, nothing computed or written."""
    out = tmp_path / "out"
    done = _script(f"examples/{example}", *(a.format(out=out) for a in args))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.startswith("error: "), done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert field in done.stderr
    assert done.stdout == ""
    assert not out.exists()


@pytest.mark.parametrize("example", ["contagion", "sir"])
def test_an_agent_backend_without_its_extra_is_one_line(example: str) -> None:
    done = script_without("distributed,dask", f"examples/{example}", "--backend", "dask")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: "), done.stderr
    assert install_hint("dask") in done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stdout == ""


def test_pregel_without_numpy_names_the_extra_in_one_line() -> None:
    done = script_without("numpy", "examples/pregel", "--vertices", "50", "--edges", "100")
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"examples/pregel needs numpy: {install_hint('numpy')}\n"
    assert done.stdout == ""


@pytest.mark.parametrize("command", [
    ("examples/ride_hailing/fleet_sizing.py", "{out}", "--replications", "2", "--horizon", "60"),
    ("examples/llm_workflow", "--sweep", "{out}", "--horizon", "60"),
    ("examples/llm_workflow/sweep.py", "{out}", "--horizon", "60"),
], ids=["fleet_sizing", "llm_workflow --sweep", "sweep.py"])
def test_without_matplotlib_the_studies_write_their_data_and_say_so(
        command: tuple[str, ...], tmp_path: Path) -> None:
    """The plot is optional: one line names the extra before the work; the CSV is written."""
    out = tmp_path / "out"
    args = [a.format(out=out) for a in command]
    done = script_without("matplotlib", *args)
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("note: the plot needs matplotlib "
                                  f"({install_hint('plot')})"), done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    [csv_file] = out.iterdir()  # the data, and no plot
    assert csv_file.suffix == ".csv"
    assert len(csv_file.read_text().splitlines()) > 2
    assert f"wrote {csv_file}" in done.stdout
    # --plot insists: it stops at once, before any work, naming the extra.
    insisted = script_without("matplotlib", *args, "--plot")
    assert insisted.returncode == 2
    assert insisted.stderr.startswith("error: ")
    assert install_hint("plot") in insisted.stderr
    assert len(insisted.stderr.splitlines()) == 1
    assert insisted.stdout == ""


@pytest.mark.parametrize("command", [
    ("examples/ride_hailing/fleet_sizing.py", "{out}", "--replications", "2", "--horizon", "60"),
    ("examples/llm_workflow", "--sweep", "{out}", "--horizon", "60"),
], ids=["fleet_sizing", "llm_workflow --sweep"])
def test_with_matplotlib_the_studies_write_the_csv_and_the_plot(
        command: tuple[str, ...], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    done = _script(*(a.format(out=out) for a in command))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # stderr is not a terminal: no progress bar, no noise
    assert sorted(path.suffix for path in out.iterdir()) == [".csv", ".png"]
    skipped = _script(*(a.format(out=tmp_path / "bare") for a in command), "--no-plot")
    assert skipped.returncode == 0, skipped.stderr
    assert [path.suffix for path in (tmp_path / "bare").iterdir()] == [".csv"]


def _on_a_terminal(*args: str) -> tuple[int, str]:
    """Run `python ARGS...` with stderr on a pseudo-terminal; its exit status and stderr."""
    pty = pytest.importorskip("pty")
    import threading

    leader, follower = pty.openpty()
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the follower side closed
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        done = subprocess.run([sys.executable, *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=follower, timeout=60, check=False,
                              env={**os.environ, "PYTHONPATH": str(SRC), "TERM": "xterm",
                                   "COLUMNS": "100"})
    finally:
        os.close(follower)
        reader.join(5)
        os.close(leader)
    return done.returncode, b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")
@pytest.mark.parametrize(("command", "total"), [
    (("examples/ride_hailing/fleet_sizing.py", "{out}", "--replications", "2", "--horizon",
      "30", "--no-plot"), "16/16"),
    (("examples/llm_workflow", "--sweep", "{out}", "--horizon", "30", "--no-plot"), "27/27"),
], ids=["fleet_sizing", "llm_workflow --sweep"])
def test_the_studies_show_progress_on_a_terminal_after_validation(
        command: tuple[str, ...], total: str, tmp_path: Path) -> None:
    status, err = _on_a_terminal(*(a.format(out=tmp_path / "out") for a in command))
    assert status == 0, err
    assert total in err  # rich's bar, finished
    assert "ETA" in err
    # A bad option on the same terminal: the error line, and no bar was ever drawn.
    status, err = _on_a_terminal(*(a.format(out=tmp_path / "bad") for a in command),
                                 "--replications", "0")
    assert status == 2
    assert err.strip().startswith("error: "), err
    assert "ETA" not in err
    assert "\x1b" not in err


def test_an_experiment_of_the_bank_holds_erlang_c_after_the_warm_up(bank: ModuleType) -> None:
    """With the warm-up, Erlang C's Wq is inside the experiment's 95% CI; without, far below.

    150 replications of 300 measured customers at the example's load of 0.9:
    short runs, so that the start-up bias of a bank that opens empty is large
    (-29% of Wq at 300 customers, measured over 2000 seeds) and the check has
    power. Without the warm-up the interval excludes Wq for each of 30 master
    seeds tried (its upper end is 3.7 to 10 standard errors below); with the
    default warm-up (three relaxation times, t = 380) the interval held Wq for
    26 of the 30 (a t-interval under-covers a little: means of 300 customers
    are right-skewed). Master seed 1 is a typical one, 0.1 standard errors
    from Wq with the warm-up and 7.9 below without, so the verdict does not hang
    on rounding; any change to the model, the warm-up or the seed tree that
    moved it by more than two standard errors would fail here.
    """
    wq = bank.erlang_c_wait(3, 2.7, 1.0)

    def interval(warmup: float | None) -> Any:
        study = simulacra.Experiment.from_run(
            f"{EXAMPLES / 'bank.py'}:run", [{"customers": 300, "warmup": warmup}],
            master_seed=1)
        results = study.run(150, backend="sequential", progress=False)
        return mean_interval([float(r.kpis["mean_wait"]) for r in results.records])

    warm = interval(None)
    assert warm.low <= wq <= warm.high, (warm, wq)
    assert abs(warm.mean - wq) < warm.halfwidth / 2  # well inside, not on the edge
    cold = interval(0.0)
    assert cold.high < wq, (cold, wq)  # the start-up bias that the warm-up removes
    assert cold.mean < 0.8 * wq


def test_the_bank_warm_up_is_three_relaxation_times(bank: ModuleType) -> None:
    # Morse's M/M/1 relaxation time 1 / (mu (1 - sqrt(rho))^2): rho = 0.25 gives 4.
    assert math.isclose(bank.relaxation_time(1, 0.25, 1.0), 4.0)
    kpis = bank.run(customers=1000)
    assert math.isclose(kpis["measured_from"], 3 * bank.relaxation_time(3, 2.7, 1.0))
    assert 375 < kpis["measured_from"] < 385
    assert kpis["served"] == 1000  # measured customers; the warm-up's are not counted
    cold = bank.run(customers=1000, warmup=0)
    assert cold["measured_from"] == 0.0
    assert cold["mean_wait"] != kpis["mean_wait"]


def test_the_bank_script_runs_an_experiment() -> None:
    done = _script(str(EXAMPLES / "bank.py"), "--replications", "3", "--customers", "2000")
    assert done.returncode == 0, done.stderr
    assert "3 replications, master seed 42" in done.stdout
    assert "95% CI over replications" in done.stdout
    assert re.search(r"Erlang C: (inside|OUTSIDE) the interval", done.stdout)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("args", [
    ("bank.py", "--customers", "100000000"),
    ("ride_hailing", "--horizon", "1e7"),
    ("sir", "--steps", "100000000"),
])
@pytest.mark.timeout(120)
def test_ctrl_c_in_an_example_is_one_line_and_exit_130(args: tuple[str, ...]) -> None:
    import signal

    proc = subprocess.Popen([sys.executable, str(EXAMPLES / args[0]), *args[1:]], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # well inside the simulation: its imports take a fraction of this CPU time
        deadline = time.monotonic() + 90
        while proc.poll() is None and _cpu_seconds(proc.pid) < 1.5:
            assert time.monotonic() < deadline, "the example never got going"
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert err == "interrupted\n"


#: What each example folder is run with from another directory (small and fast).
FROM_ELSEWHERE: dict[str, tuple[tuple[str, ...], str]] = {
    **{name: run for name, run in NEWCOMER_RUNS.items() if "." not in name},
    "social": (("sim.steps=1", "sim.agents=4", "--out", "{out}", "--no-progress"), "digest"),
}


def test_every_example_folder_is_in_the_table() -> None:
    folders = {p.name for p in EXAMPLES.iterdir()
               if p.is_dir() and any(p.glob("*.py"))}
    assert folders == set(FROM_ELSEWHERE)


@pytest.mark.parametrize("example", sorted(FROM_ELSEWHERE))
def test_each_example_folder_runs_from_any_directory(example: str, tmp_path: Path) -> None:
    """`python examples/NAME` works for every folder, from a directory that is not the root."""
    args, expected = FROM_ELSEWHERE[example]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    done = _script(str(EXAMPLES / example), *(a.format(out=out) for a in args), cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert expected in done.stdout, done.stdout
    assert "Traceback" not in done.stderr
