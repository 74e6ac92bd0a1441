"""The Gai-Kapadia contagion example: right, deterministic, and the same on every backend."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from simulacra import ConfigError, ProcessPoolBackend, ThreadPoolBackend

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
if str(EXAMPLES) not in sys.path:  # worker processes inherit sys.path: they import it too
    sys.path.insert(0, str(EXAMPLES))

from contagion import model as gk  # noqa: E402


def direct_cascade(borrowers: list[tuple[int, ...]], shocked: int, *, capital: float,
                   interbank: float, recovery: float) -> set[int]:
    """The cascade's end state computed directly on the graph, without agents.

    Failure is monotone (a failed borrower never recovers), so repeating
    sweeps in any order reaches the same closure as the lockstep engine.
    """
    failed = {shocked}
    changed = True
    while changed:
        changed = False
        for bank, loans in enumerate(borrowers):
            if bank in failed or not loans:
                continue
            exposure = interbank / len(loans)
            losses = sum(1 for j in loans if j in failed) * exposure * (1.0 - recovery)
            if losses > capital:
                failed.add(bank)
                changed = True
    return failed


@pytest.mark.parametrize(("seed", "degree", "capital_ratio", "recovery"), [
    (0, 4.0, 0.04, 0.0), (1, 2.0, 0.04, 0.0), (3, 1.0, 0.04, 0.0), (7, 4.0, 0.04, 0.0),
    (2, 6.0, 0.02, 0.3), (5, 3.0, 0.0, 0.0), (4, 3.0, 1.0, 0.0),
])
def test_the_cascade_is_the_closure_of_the_failure_rule(seed: int, degree: float,
                                                        capital_ratio: float,
                                                        recovery: float) -> None:
    banks = 60
    result = gk.run(seed, banks=banks, degree=degree, capital_ratio=capital_ratio,
                    recovery=recovery)
    run, shocked = gk.simulate(seed, banks=banks, degree=degree, capital_ratio=capital_ratio,
                               recovery=recovery)

    expected = direct_cascade(gk.network(seed, banks, degree), shocked,
                              capital=capital_ratio * 100, interbank=20.0, recovery=recovery)

    assert result["shocked"] == shocked
    assert set(gk.failed_banks(run)) == expected
    assert result["failures"] == len(expected)
    assert result["digest"] == run.digest
    assert len(run.agents) == banks


def test_capital_decides_how_far_the_cascade_goes() -> None:
    assert gk.run(0, banks=50, degree=4.0, capital_ratio=1.0)["failures"] == 1
    fragile = gk.run(0, banks=50, degree=4.0, capital_ratio=0.0)
    assert fragile["failures"] > 1
    assert fragile["rounds"] >= 1


def test_a_run_is_deterministic_and_depends_on_its_seed() -> None:
    first = gk.run(3, banks=80, degree=3.0)

    assert gk.run(3, banks=80, degree=3.0) == first
    assert gk.run(4, banks=80, degree=3.0)["digest"] != first["digest"]


def test_local_threads_and_processes_give_the_same_cascades() -> None:
    seeds = (0, 1, 2)
    local = [gk.run(seed, banks=60, degree=4.0) for seed in seeds]
    with ProcessPoolBackend(max_workers=2) as processes:
        remote = [gk.run(seed, banks=60, degree=4.0, backend=processes) for seed in seeds]
    threads = ThreadPoolBackend(3)
    try:
        threaded = [gk.run(seed, banks=60, degree=4.0, backend=threads) for seed in seeds]
    finally:
        threads.close()

    assert remote == local
    assert threaded == local
    assert any(r["failures"] > 1 for r in local)  # some cascade did spread


def test_the_cascade_distribution() -> None:
    distribution = gk.cascade_distribution(range(8), banks=60, degree=3.0)

    assert distribution == gk.cascade_distribution(range(8), banks=60, degree=3.0)
    sizes = distribution["sizes"]
    assert len(sizes) == 8
    assert sum(distribution["histogram"].values()) == 8
    contagious = [s for s in sizes if s > gk.CONTAGION_THRESHOLD]
    assert distribution["contagion_frequency"] == len(contagious) / 8
    assert all(1 / 60 <= s <= 1.0 for s in sizes)


def test_contagion_happens_in_a_window_of_degrees() -> None:
    """Gai and Kapadia's finding: sparse and dense networks both resist contagion."""
    def frequency(degree: float) -> Any:
        return gk.cascade_distribution(range(12), banks=80, degree=degree)["contagion_frequency"]

    sparse, middle, dense = frequency(0.3), frequency(3.0), frequency(30.0)

    assert middle > sparse
    assert middle > dense


@pytest.mark.parametrize(("params", "name"), [
    ({"banks": 1}, "banks"),
    ({"degree": -1.0}, "degree"),
    ({"capital_ratio": 1.5}, "capital_ratio"),
    ({"recovery": float("nan")}, "recovery"),
    ({"interbank_share": -0.1}, "interbank_share"),
])
def test_bad_parameters_name_the_field(params: dict[str, Any], name: str) -> None:
    with pytest.raises(ConfigError, match=f"^{name} must be"):
        gk.run(0, **params)


def test_the_script_prints_the_distribution() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    completed = subprocess.run(
        [sys.executable, str(EXAMPLES / "contagion"), "--banks", "40", "--seeds", "4",
         "--degree", "3"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        check=False)

    assert completed.returncode == 0, completed.stderr
    assert "contagion" in completed.stdout
    assert "75-100%" in completed.stdout
