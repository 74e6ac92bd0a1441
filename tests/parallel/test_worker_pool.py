"""One WorkerPool serves several runs: the same processes, the sequential results.

``Experiment.run(pool=...)`` and ``ShardedSim(pool=...)`` borrow a pool's
workers and give them back; the next run starts with no process start-up.
These tests check that the very same worker processes (by pid) served each
run, that every run equals its sequential reference, and that a pool is left
whole by a crash, a failed run and a run stopped early. Bad input: a closed
pool, a pool two runs want at once, a pool with options it does not take,
more workers than CPUs.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # worker processes inherit sys.path and import the models
    sys.path.insert(0, str(HERE))

import _lean_models as lean  # noqa: E402

from simulacra import (  # noqa: E402
    ConfigError,
    Experiment,
    OversubscribedWarning,
    PoolBusy,
    PoolClosed,
    ReplicationFailed,
    ShardedSim,
    UnshardedSim,
    WorkerPool,
    assert_equivalent,
)
from simulacra.executors import ProcessExecutor, available_cpus  # noqa: E402

pytestmark = pytest.mark.determinism


def draws(results: object) -> list[tuple[tuple[int, int], float]]:
    return [(record.key, record.kpis["x"]) for record in results]  # type: ignore[attr-defined]


def pids(results: object) -> set[int]:
    return {int(record.kpis["pid"]) for record in results}  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def pool() -> object:
    with WorkerPool(2) as shared:
        yield shared


def test_one_pool_serves_two_studies_and_sharded_runs_with_the_same_processes(
    pool: WorkerPool,
) -> None:
    study = Experiment(lean.slow, [{"sleep": 0.01}, {"sleep": 0.02}], master_seed=21)
    reference = study.run(4, backend="sequential")
    workers = set(pool.pids)

    first = study.run(4, pool=pool)
    second = study.run(4, pool=pool)

    assert draws(first) == draws(second) == draws(reference)
    assert first.backend == "processes"
    assert pids(first) == pids(second) == workers  # both workers, the same two, each time

    expected = UnshardedSim(lean.build, seed=8, trace=True)
    expected.run(until=6)
    for _ in range(2):
        with ShardedSim(lean.build, shards=2, seed=8, trace=True, pool=pool) as sim:
            sim.run(until=2.5)
            sim.run(until=6)
            assert_equivalent(expected.trace(), sim.trace())
            assert {pid for _, pid in sim.call(lean.shard_modules)} == workers

    third = study.run(4, pool=pool)
    assert draws(third) == draws(reference)
    assert pids(third) == workers
    assert set(pool.pids) == workers


def test_a_sharded_run_may_use_fewer_shards_than_the_pool_has_workers(pool: WorkerPool) -> None:
    expected = UnshardedSim(lean.build, seed=2, trace=True)
    expected.run(until=4)
    with ShardedSim(lean.build, shards=1, seed=2, trace=True, pool=pool) as sim:
        sim.run(until=4)
        assert_equivalent(expected.trace(), sim.trace())


def test_a_crash_in_a_pooled_run_is_retried_and_the_pool_stays_whole(
    pool: WorkerPool, tmp_path: Path,
) -> None:
    configs = [{"crash": 2, "markers": str(tmp_path)}]
    study = Experiment(lean.crash_once, configs, master_seed=4)
    before = pool.pids

    crashed = study.run(5, pool=pool)

    assert (tmp_path / "crashed-2").exists()  # a worker really died
    assert draws(crashed) == draws(study.run(5, backend="sequential"))
    assert len(set(pool.pids) & set(before)) == 1  # the dead worker alone was replaced
    assert pids(study.run(4, pool=pool)) == set(pool.pids)


def test_a_run_stopped_by_a_failure_leaves_no_stale_answer_behind(pool: WorkerPool) -> None:
    failing = Experiment(lean.slow, [{"sleep": 0.3, "fail": 0}], master_seed=99)
    with pytest.raises(ReplicationFailed, match="replication 0 fails"):
        failing.run(4, pool=pool)  # replication 1 is still running when 0 fails

    study = Experiment(lean.slow, [{"sleep": 0.0}], master_seed=6)
    assert draws(study.run(6, pool=pool)) == draws(study.run(6, backend="sequential"))


def test_the_executor_of_a_pool_leaves_it_open(pool: WorkerPool) -> None:
    with ProcessExecutor(pool=pool) as executor:
        assert executor.workers == pool.workers
    assert not pool.closed
    assert len(dict(ProcessExecutor(pool=pool).map_units(lean.shard_modules, [None, None]))) == 2


# -- bad input -------------------------------------------------------------------------


def test_a_closed_pool_is_one_clear_error() -> None:
    closed = WorkerPool(1)
    closed.close()
    closed.close()  # harmless
    study = Experiment(lean.slow, master_seed=1)

    with pytest.raises(PoolClosed, match="WorkerPool is closed"):
        study.run(1, pool=closed)
    with pytest.raises(PoolClosed, match="WorkerPool is closed"):
        ShardedSim(lean.build, shards=1, pool=closed)
    with pytest.raises(PoolClosed, match="WorkerPool is closed"):
        next(iter(ProcessExecutor(pool=closed).map_units(lean.shard_modules, [None])))


def test_two_runs_at_once_on_one_pool_is_one_clear_error(pool: WorkerPool) -> None:
    study = Experiment(lean.slow, master_seed=1)
    with ShardedSim(lean.build, shards=2, seed=1, pool=pool) as sim:
        with pytest.raises(PoolBusy, match=r"held by ShardedSim\(2 shards\)"):
            study.run(1, pool=pool)
        with pytest.raises(PoolBusy, match="one pool serves one run at a time"):
            ShardedSim(lean.build, shards=1, pool=pool)
        sim.run(until=3)

    # Two threads: the second run finds the pool held by the first.
    slow = Experiment(lean.slow, [{"sleep": 0.5}], master_seed=1)
    errors: list[BaseException] = []

    def second() -> None:
        try:
            slow.run(1, pool=pool)
        except BaseException as exc:
            errors.append(exc)

    with ShardedSim(lean.build, shards=2, seed=1, pool=pool):
        thread = threading.Thread(target=second)
        thread.start()
        thread.join()
    assert [type(e) for e in errors] == [PoolBusy]
    assert len(study.run(2, pool=pool)) == 2  # free again once the holder closed


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"backend": "threads"}, "does not go with backend='threads'"),
        ({"max_workers": 2}, "max_workers and scheduler_address do not go with pool="),
        ({"pool": "pool"}, "pool must be a WorkerPool, got str"),
    ],
)
def test_a_pool_with_options_it_does_not_take_is_refused(
    pool: WorkerPool, options: dict[str, object], message: str,
) -> None:
    study = Experiment(lean.slow, master_seed=1)
    with pytest.raises(ConfigError, match=message):
        study.run(1, **{"pool": pool, **options})  # type: ignore[arg-type]


def test_a_sharded_run_checks_the_pool(pool: WorkerPool) -> None:
    with pytest.raises(ConfigError, match="pool has 2 workers and the run has 3 shards"):
        ShardedSim(lean.build, shards=3, pool=pool)
    with pytest.raises(ConfigError, match="goes with mode='processes' and no start_method"):
        ShardedSim(lean.build, shards=2, mode="threads", pool=pool)
    with pytest.raises(ConfigError, match="goes with mode='processes' and no start_method"):
        ShardedSim(lean.build, shards=2, start_method="spawn", pool=pool)
    with pytest.raises(ConfigError, match="max_workers, start_method and preload are the pool's"):
        ProcessExecutor(2, pool=pool)
    # The pool was not taken by any of them.
    with ShardedSim(lean.build, shards=2, pool=pool) as sim:
        sim.run(until=1)


def test_more_workers_than_cpus_warns_once_with_the_count() -> None:
    cpus = available_cpus()
    study = Experiment(lean.slow, [{"sleep": 0.0}], master_seed=1)
    with pytest.warns(OversubscribedWarning) as record:
        study.run(3, backend="processes", max_workers=cpus + 1)
    assert len(record) == 1
    message = str(record[0].message)
    assert f"max_workers={cpus + 1} is more than the {cpus} CPU" in message

    with pytest.warns(OversubscribedWarning, match=f"the {cpus} CPU"):
        WorkerPool(cpus + 1).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        WorkerPool(cpus).close()  # one per CPU: no warning
        WorkerPool(cpus + 1, oversubscribe=True).close()


UNGUARDED = r"""
import sys
sys.path[:0] = sys.argv[1:3]
import _lean_models as lean
from simulacra import Experiment
Experiment(lean.slow, [{"sleep": 0.0}], master_seed=1).run(2, backend="processes", max_workers=2)
"""


def test_a_script_without_the_main_guard_ends_in_worker_lost_with_the_hint(
    tmp_path: Path,
) -> None:
    """Workers import the main script again: unguarded, each dies as it starts, none hangs."""
    script = tmp_path / "study.py"
    script.write_text(UNGUARDED, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script), str(HERE.parents[1] / "src"), str(HERE)],
                          capture_output=True, text=True, timeout=120, check=False)

    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("simulacra.WorkerLost: the processes worker running config 0")
    assert "exited with code 1" in last
    assert "must guard it with `if __name__ == '__main__':`" in last
