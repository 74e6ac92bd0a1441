"""Same seed, same results: every backend against the sequential reference, for real.

Real worker processes (spawn) and a real Dask ``LocalCluster`` on loopback; a
model that kills its own worker checks that a crash costs nothing. One
LocalCluster is shared by the module.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # workers inherit sys.path and import the models by this name
    sys.path.insert(0, str(HERE))

import _experiment_models as models  # noqa: E402

from simulacra import (  # noqa: E402
    Experiment,
    ExperimentResults,
    SpoolError,
    WorkerLost,
    config_grid,
)
from simulacra.executors import Done, Lost, Raised, SequentialExecutor  # noqa: E402

pytestmark = pytest.mark.determinism

BANK = f"{models.BANK}:run"
BANK_CONFIGS = config_grid(servers=[3, 4], customers=[2000])
REPLICATIONS = 3
SEED = 2025


def bank_study(master_seed: int = SEED) -> Experiment:
    return Experiment.from_run(BANK, BANK_CONFIGS, master_seed=master_seed)


@pytest.fixture(scope="module")
def reference() -> ExperimentResults:
    """The sequential reference every other backend must equal."""
    return bank_study().run(REPLICATIONS, "sequential")


@pytest.fixture(scope="module")
def dask_address() -> Iterator[str]:
    """One LocalCluster (2 worker processes, loopback) for the whole module."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
    ) as cluster:
        yield cluster.scheduler_address


def assert_same(candidate: ExperimentResults, reference: ExperimentResults) -> None:
    assert candidate.keys() == reference.keys()
    assert [r.kpis for r in candidate] == [r.kpis for r in reference]
    assert candidate.table().equals(reference.table())


def test_reference_is_complete_and_in_identity_order(reference: ExperimentResults) -> None:
    assert reference.keys() == [(c, r) for c in range(2) for r in range(REPLICATIONS)]
    assert reference.backend == "sequential"
    assert reference.table().columns[:4] == ["config_index", "replication", "servers", "customers"]
    assert all(r.kpis["served"] == 2000 for r in reference)
    # Replications differ from each other: each has its own stream.
    assert len({r.kpis["mean_wait"] for r in reference}) == len(reference)


@pytest.mark.parametrize(
    ("backend", "workers"), [("threads", 2), ("processes", 1), ("processes", 2)]
)
def test_backend_gives_the_sequential_table(
    reference: ExperimentResults, backend: str, workers: int
) -> None:
    results = bank_study().run(REPLICATIONS, backend, workers)

    assert results.backend == backend
    assert_same(results, reference)


@pytest.mark.slow
def test_dask_on_a_shared_local_cluster_gives_the_sequential_table(
    reference: ExperimentResults, dask_address: str
) -> None:
    results = bank_study().run(REPLICATIONS, "dask", scheduler_address=dask_address)

    assert results.backend == "dask"
    assert_same(results, reference)


@pytest.mark.slow
def test_dask_local_cluster_started_and_closed_by_the_experiment(
    reference: ExperimentResults,
) -> None:
    pytest.importorskip("distributed")
    results = bank_study().run(REPLICATIONS, "dask", 2)

    assert_same(results, reference)


def test_auto_picks_processes_on_a_gil_build_and_says_so(
    reference: ExperimentResults, caplog: pytest.LogCaptureFixture
) -> None:
    if not getattr(sys, "_is_gil_enabled", lambda: True)():
        pytest.skip("free-threaded build: auto picks threads")
    with caplog.at_level(logging.INFO, logger="simulacra.parallel"):
        results = bank_study().run(REPLICATIONS, max_workers=2)

    assert results.backend == "processes"
    assert results.backend_reason.startswith("auto:")
    assert "GIL" in results.backend_reason
    assert "on processes (2 workers; auto:" in caplog.text
    assert_same(results, reference)


def test_different_master_seeds_give_different_results(reference: ExperimentResults) -> None:
    other = bank_study(master_seed=SEED + 1).run(REPLICATIONS, "sequential")

    assert other.keys() == reference.keys()
    for a, b in zip(other, reference, strict=True):
        assert a.kpis["mean_wait"] != b.kpis["mean_wait"]
        assert a.kpis["erlang_c_wait"] == b.kpis["erlang_c_wait"]  # analytic: seed-free


class ReversedExecutor:
    """A fake executor that reports outcomes in reverse order: completion order != identity."""

    name = "reversed"
    workers = 1

    def map_units(
        self, fn: Callable[[Any], Any], units: Sequence[Any], /
    ) -> Iterator[tuple[int, Done[Any] | Raised | Lost]]:
        outcomes = list(SequentialExecutor().map_units(fn, units))
        return iter(outcomes[::-1])

    def close(self) -> None:
        pass


def test_results_come_back_in_identity_order_whatever_the_completion_order(
    reference: ExperimentResults, tmp_path: Path
) -> None:
    study = Experiment.from_run(BANK, BANK_CONFIGS, master_seed=SEED, spool_dir=tmp_path)
    results = study.run(REPLICATIONS, ReversedExecutor())
    spooled = (tmp_path / "results.jsonl").read_text(encoding="utf-8").splitlines()

    assert results.backend == "reversed"
    assert '"config_index":1,"replication":2' in spooled[0]  # arrived first, listed last
    assert_same(results, reference)


@pytest.mark.slow
def test_stream_models_agree_across_backends(dask_address: str) -> None:
    configs = [{"servers": 1, "rate": 0.5}, {"servers": 2}, {"servers": 3, "customers": 100}]
    study = Experiment(models.queue, configs, master_seed="study-7")
    reference = study.run(2, "sequential")
    for results in (
        study.run(2, "threads", 2),
        study.run(2, "processes", 2),
        study.run(2, "dask", scheduler_address=dask_address),
    ):
        assert_same(results, reference)
    assert reference[1, 1] == study.run_one(1, 1)


def crash_configs(markers: Path, how: str) -> list[dict[str, Any]]:
    crash = [[0, 1], [1, 0], [1, 2]]
    return [{"index": i, "markers": str(markers), "crash": crash, "how": how} for i in range(2)]


@pytest.mark.parametrize("how", ["exit", "sigkill"])
@pytest.mark.slow
def test_killed_worker_processes_lose_nothing(tmp_path: Path, how: str) -> None:
    study = Experiment(models.crash_once, crash_configs(tmp_path, how), master_seed=5)

    crashed = study.run(4, "processes", 2)
    markers = sorted(p.name for p in tmp_path.iterdir())
    # Every crash has happened now, so a sequential run is the uncrashed reference.
    reference = study.run(4, "sequential")

    assert markers == ["crashed-0-1", "crashed-1-0", "crashed-1-2"]  # the workers did die
    assert_same(crashed, reference)


@pytest.mark.slow
def test_lost_dask_worker_loses_nothing(tmp_path: Path, dask_address: str) -> None:
    study = Experiment(models.crash_once, crash_configs(tmp_path, "exit"), master_seed=6)

    crashed = study.run(4, "dask", scheduler_address=dask_address)
    markers = sorted(p.name for p in tmp_path.iterdir())
    reference = study.run(4, "sequential")

    assert markers == ["crashed-0-1", "crashed-1-0", "crashed-1-2"]
    assert_same(crashed, reference)


def test_a_unit_that_always_kills_its_worker_is_lost_after_its_retries(tmp_path: Path) -> None:
    spool = tmp_path / "study"
    study = Experiment(models.always_crash, [{"label": "x"}], master_seed=1, spool_dir=spool)

    with pytest.raises(WorkerLost, match=r"config 0, replication 1 died 2 times") as info:
        study.run(4, "processes", 2, retries=1)

    assert info.value.unit == (0, 1)
    assert info.value.crashes == 2
    assert "kept in" in str(info.value)
    # Innocent units that shared the pool with it were re-run alone and kept.
    kept = (spool / "results.jsonl").read_text(encoding="utf-8")
    assert kept.count("\n") >= 1
    assert '"replication":1,' not in kept


def test_resumed_study_equals_an_uninterrupted_one(
    reference: ExperimentResults, tmp_path: Path
) -> None:
    study = Experiment.from_run(BANK, BANK_CONFIGS, master_seed=SEED, spool_dir=tmp_path)
    study.run(REPLICATIONS, "processes", 2)
    lines = (tmp_path / "results.jsonl").read_bytes().splitlines(keepends=True)
    # Interrupt it half-way: keep 2 results and half of a third line, torn by the kill.
    (tmp_path / "results.jsonl").write_bytes(b"".join(lines[:2]) + lines[2][:15])

    resumed = study.run(REPLICATIONS, "processes", 2, resume=True)

    assert resumed.resumed == 2
    assert_same(resumed, reference)
    with pytest.raises(SpoolError, match="holds a different study: its master_seed is 2025"):
        Experiment.from_run(BANK, BANK_CONFIGS, master_seed=SEED + 1, spool_dir=tmp_path).run(
            REPLICATIONS, "sequential", resume=True
        )
