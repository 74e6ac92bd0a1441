"""Executors: the registry, the outcome contract, crashes and retries, callable references.

Process tests use real spawned worker processes; a unit that calls ``os._exit``
really kills its worker.
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # spawned workers inherit sys.path and import the units by name
    sys.path.insert(0, str(HERE))

import _executor_units as units  # noqa: E402

from simulacra import BackendUnavailable, ConfigError, RemoteError  # noqa: E402
from simulacra.executors import (  # noqa: E402
    EXECUTOR_NAMES,
    Done,
    Executor,
    Lost,
    ProcessExecutor,
    Raised,
    SequentialExecutor,
    ThreadExecutor,
    auto_backend,
    callable_ref,
    free_threaded,
    get_executor,
    process_pool,
    resolve_callable,
)


@pytest.fixture(scope="module")
def processes() -> Iterator[ProcessExecutor]:
    """Two spawned workers, shared by the tests that do not kill them."""
    with ProcessExecutor(2) as executor:
        yield executor


def collect(executor: Executor, fn: Any, items: list[Any]) -> dict[int, Any]:
    seen: dict[int, Any] = {}
    for index, outcome in executor.map_units(fn, items):
        assert index not in seen, f"index {index} reported twice"
        seen[index] = outcome
    assert sorted(seen) == list(range(len(items)))
    return seen


# -- the registry ----------------------------------------------------------------------


def test_unknown_backend_names_the_known_ones() -> None:
    with pytest.raises(ConfigError) as info:
        get_executor("gpu")

    message = str(info.value)
    assert "backend must be one of" in message
    assert "'gpu'" in message
    for name in ("auto", "sequential", "threads", "processes", "interpreters", "dask"):
        assert repr(name) in message
    assert EXECUTOR_NAMES[0] == "auto"


def test_an_option_that_does_not_apply_is_refused() -> None:
    with pytest.raises(ConfigError, match="option 'address' does not apply to backend 'threads'"):
        get_executor("threads", address="tcp://x:1")


def test_auto_picks_and_says(caplog: pytest.LogCaptureFixture) -> None:
    name, reason = auto_backend()
    with caplog.at_level(logging.INFO, logger="simulacra.executors"):
        executor = get_executor("auto", max_workers=1)
    try:
        assert executor.name == name
        assert name == ("threads" if free_threaded() else "processes")
        assert reason.startswith("auto: ")
        assert f"backend {name} ({reason})" in caplog.text
    finally:
        executor.close()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("sequential", SequentialExecutor),
        ("threads", ThreadExecutor),
        ("processes", ProcessExecutor),
    ],
)
def test_get_executor_builds_each_kind(name: str, expected: type) -> None:
    with get_executor(name, max_workers=2) as executor:  # type: ignore[attr-defined]
        assert type(executor) is expected
        assert isinstance(executor, Executor)
        assert executor.name == name
        assert executor.workers == (1 if name == "sequential" else 2)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_max_workers_is_checked(bad: object) -> None:
    with pytest.raises(ConfigError, match="max_workers must be an int >= 1 or None"):
        get_executor("threads", max_workers=bad)


def test_fork_is_refused_and_start_methods_are_checked() -> None:
    with pytest.raises(ConfigError, match="'fork' copies a parent that runs threads"):
        ProcessExecutor(1, start_method="fork")
    with pytest.raises(ConfigError, match="start_method must be one of 'spawn', 'forkserver'"):
        ProcessExecutor(1, start_method="magic")
    with pytest.raises(ConfigError, match="retries must be an int >= 0"):
        ProcessExecutor(1, retries=-1)


@pytest.mark.without_subinterpreters
def test_interpreters_say_why_they_are_unavailable() -> None:
    with pytest.raises(BackendUnavailable) as info:
        get_executor("interpreters")

    message = str(info.value)
    assert "InterpreterPoolExecutor" in message
    assert "3.14" in message
    assert ".".join(map(str, sys.version_info[:2])) in message
    assert isinstance(info.value, RuntimeError)


def test_a_closed_executor_refuses_work() -> None:
    executor = ThreadExecutor(1)
    executor.close()
    executor.close()  # harmless

    with pytest.raises(ConfigError, match="executor 'threads' is closed"):
        executor.map_units(units.square, [1])


# -- the outcome contract ------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sequential", "threads", "processes"])
def test_every_unit_is_reported_once_with_its_index(kind: str, processes: ProcessExecutor) -> None:
    executor: Executor = {
        "sequential": SequentialExecutor(),
        "threads": ThreadExecutor(3),
        "processes": processes,
    }[kind]
    outcomes = collect(executor, units.fail_on_three, list(range(8)))

    assert {i: o.value for i, o in outcomes.items() if isinstance(o, Done)} == {
        i: i for i in range(8) if i != 3
    }
    failed = outcomes[3]
    assert isinstance(failed, Raised)
    assert isinstance(failed.error, ValueError)
    assert str(failed.error) == "three is not allowed (got 3)"
    assert "fail_on_three" in failed.traceback


def test_processes_really_run_elsewhere(processes: ProcessExecutor) -> None:
    pids = {o.value for o in collect(processes, units.pid, list(range(6))).values()}

    assert os.getpid() not in pids


def test_an_exception_is_not_retried(tmp_path: Path, processes: ProcessExecutor) -> None:
    log = tmp_path / "calls"
    outcomes = collect(processes, units.count_calls, [(str(log), x) for x in range(4)])

    assert isinstance(outcomes[1], Raised)
    assert sorted(log.read_text(encoding="utf-8").split()) == ["0", "1", "2", "3"]


def test_an_unpicklable_exception_comes_back_as_a_remote_error(
    processes: ProcessExecutor,
) -> None:
    outcome = collect(processes, units.raise_unpicklable, [5])[0]

    assert isinstance(outcome, Raised)
    assert isinstance(outcome.error, RemoteError)
    assert "Unpicklable: a=5 b=6" in str(outcome.error)
    assert "raise_unpicklable" in str(outcome.error)


def test_an_unpicklable_unit_is_an_error_not_a_crash(processes: ProcessExecutor) -> None:
    outcomes = collect(processes, units.identity, [1, threading.Lock(), 3])

    assert outcomes[0] == Done(1)
    assert outcomes[2] == Done(3)
    assert isinstance(outcomes[1], Raised)


def test_processes_refuse_a_function_they_cannot_import(processes: ProcessExecutor) -> None:
    with pytest.raises(ConfigError, match="fn must be a module-level function importable"):
        processes.map_units(lambda x: x, [1])


def test_threads_take_any_callable() -> None:
    with ThreadExecutor(2) as executor:
        outcomes = collect(executor, lambda x: x + 1, [1, 2])

    assert outcomes == {0: Done(2), 1: Done(3)}


def test_closing_the_iterator_stops_submitting() -> None:
    started: list[int] = []
    release = threading.Event()

    def slow(x: int) -> int:
        started.append(x)
        release.wait(5)
        return x

    with ThreadExecutor(1) as executor:
        outcomes = executor.map_units(slow, list(range(20)))
        release.set()
        first = next(outcomes)
        outcomes.close()  # type: ignore[attr-defined]

    assert first[0] == 0
    assert len(started) < 20


# -- crashes and retries -------------------------------------------------------------


def test_a_killed_worker_costs_a_retry_not_a_result(tmp_path: Path) -> None:
    with ProcessExecutor(2, retries=1) as executor:
        outcomes = collect(executor, units.die_once, [(str(tmp_path), x) for x in range(6)])

    assert (tmp_path / "died-2").exists()  # the worker really died
    assert outcomes == {i: Done(i) for i in range(6)}


def test_a_unit_that_always_kills_its_worker_is_lost_and_innocents_finish() -> None:
    with ProcessExecutor(2, retries=2) as executor:
        outcomes = collect(executor, units.die_always, list(range(5)))

    lost = outcomes.pop(2)
    assert isinstance(lost, Lost)
    assert lost.crashes == 3  # the first run plus two retries
    assert "exited with code" in lost.reason  # the death of the very worker that ran it
    assert outcomes == {i: Done(i) for i in (0, 1, 3, 4)}


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_a_process_pool_starts_every_worker_at_its_first_submit(start_method: str) -> None:
    # A submit() that starts a worker races, on Python 3.11, with the manager
    # thread of a pool that a killed worker just broke ("dictionary changed size
    # during iteration" in that thread). With every worker started at once, no
    # later submit() starts one, so there is nothing to race with.
    before = {p.pid for p in multiprocessing.active_children()}
    pool = process_pool(3, start_method)
    try:
        first = pool.submit(units.pid, None)
        started = {p.pid for p in multiprocessing.active_children()} - before
        assert len(started) == 3, f"the first submit started {len(started)} of 3 workers"
        pids = {first.result(timeout=60)} | {
            f.result(timeout=60) for f in [pool.submit(units.pid, None) for _ in range(12)]
        }
        assert pids <= started  # no worker was started after the first submit
    finally:
        pool.shutdown(wait=True)


def test_with_no_retries_a_crash_is_lost_at_once() -> None:
    with ProcessExecutor(1, retries=0) as executor:
        outcomes = collect(executor, units.die_always, [2])

    assert isinstance(outcomes[0], Lost)
    assert outcomes[0].crashes == 1


# -- callables as data ---------------------------------------------------------------


def nested_factory() -> Any:
    def inner(x: int) -> int:
        return x

    return inner


class CallableObject:
    def __call__(self, x: int) -> int:
        return x

    def method(self, x: int) -> int:
        return x


@pytest.mark.parametrize(
    ("fn", "why"),
    [
        (lambda x: x, "a lambda has no importable name"),
        (nested_factory(), "a function defined inside another function"),
        (CallableObject().method, "a bound method carries a live object"),
        (functools.partial(units.square), "it has no module and qualname"),
        (CallableObject(), "it has no module and qualname"),
        (42, "it is not callable"),
    ],
)
def test_callables_that_cannot_cross_a_process_are_refused(fn: object, why: str) -> None:
    with pytest.raises(ConfigError) as info:
        callable_ref(fn, "model_fn")

    message = str(info.value)
    assert message.startswith(
        "model_fn must be a module-level function importable as module:qualname, got "
    )
    assert why in message


def test_a_function_of_main_is_refused() -> None:
    def model(x: int) -> int:
        return x

    model.__module__ = "__main__"
    model.__qualname__ = "model"

    with pytest.raises(ConfigError, match="it is defined in __main__, which a worker"):
        callable_ref(model, "model_fn")


def test_a_function_whose_name_leads_elsewhere_is_refused() -> None:
    def square(x: int) -> int:
        return x

    square.__module__ = units.__name__
    square.__qualname__ = "square"

    with pytest.raises(ConfigError, match="names a different object"):
        callable_ref(square)


def test_importable_functions_and_classmethods_are_named() -> None:
    assert callable_ref(units.square) == "_executor_units:square"
    assert resolve_callable("_executor_units:square") is units.square
    assert callable_ref(units.Factory.make) == "_executor_units:Factory.make"
    assert callable_ref(units.Factory) == "_executor_units:Factory"


def test_file_references_load_the_file(tmp_path: Path) -> None:
    (tmp_path / "helper.py").write_text("FACTOR = 3\n", encoding="utf-8")
    (tmp_path / "model.py").write_text(
        "from helper import FACTOR\n\ndef triple(x):\n    return FACTOR * x\n", encoding="utf-8"
    )
    ref = callable_ref(f"{tmp_path}/model.py:triple")

    assert ref == f"{tmp_path.resolve()}/model.py:triple"
    assert resolve_callable(ref)(2) == 6
    assert resolve_callable(ref) is resolve_callable(ref)  # loaded once per process
    assert str(tmp_path) not in sys.path  # its directory was on sys.path only while loading


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("no_such_module_xyz:f", "no module named 'no_such_module_xyz'"),
        ("_executor_units:nope", "'_executor_units' has no attribute 'nope'"),
        ("_executor_units:Path.cwd.__doc__", "is not callable"),
        ("missing/file.py:f", "file not found"),
        ("square", "must look like 'module:qualname'"),
        ("_executor_units:1x", "must look like 'module:qualname'"),
    ],
)
def test_bad_references_say_what_is_wrong(ref: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_callable(ref)


# -- Dask: every failure the cluster reports is a lost worker ------------------------


@pytest.fixture(scope="module")
def dask_executor() -> Iterator[Any]:
    """A DaskExecutor on one LocalCluster (2 worker processes on loopback) for the module."""
    pytest.importorskip("distributed")
    from simulacra.executors import DaskExecutor

    with DaskExecutor(2, retries=2) as executor:
        yield executor


@pytest.mark.slow
def test_dask_retries_a_failure_that_is_not_killed_worker(
    dask_executor: Any, tmp_path: Path
) -> None:
    # A lost worker reaches the client in shapes other than KilledWorker (a study
    # once failed with "TypeError: cannot unpack non-iterable Done object" from
    # distributed itself). A unit's own errors travel inside its result, so any
    # exception on the future is the cluster's: it is retried, never charged.
    outcomes = collect(
        dask_executor, units.stop_worker_once, [(str(tmp_path), x) for x in range(4)]
    )

    assert (tmp_path / "stopped-1").exists()  # the failure did happen
    assert outcomes == {i: Done(i) for i in range(4)}


@pytest.mark.slow
def test_dask_reports_a_result_that_cannot_travel_back_as_the_units_error(
    dask_executor: Any, tmp_path: Path
) -> None:
    log = tmp_path / "calls"
    outcomes = collect(dask_executor, units.lock_result, [(str(log), x) for x in range(3)])

    assert outcomes[0] == Done(0)
    assert outcomes[2] == Done(2)
    assert isinstance(outcomes[1], Raised)
    assert "cannot be pickled to travel back from the Dask worker" in str(outcomes[1].error)
    assert "_thread.lock" in str(outcomes[1].error)
    assert sorted(log.read_text(encoding="utf-8").split()) == ["0", "1", "2"]  # not retried


@pytest.mark.slow
def test_dask_reports_a_unit_that_cannot_be_sent_as_an_error(dask_executor: Any) -> None:
    outcomes = collect(dask_executor, units.identity, [1, threading.Lock(), 3])

    assert outcomes[0] == Done(1)
    assert outcomes[2] == Done(3)
    assert isinstance(outcomes[1], Raised)


@pytest.mark.slow
def test_dask_passes_the_units_own_exception_through(dask_executor: Any) -> None:
    outcomes = collect(dask_executor, units.fail_on_three, [2, 3])

    assert outcomes[0] == Done(2)
    assert isinstance(outcomes[1], Raised)
    assert isinstance(outcomes[1].error, ValueError)
    assert "three is not allowed (got 3)" in str(outcomes[1].error)


@pytest.mark.parametrize("options", [{"max_workers": 0}, {"max_workers": True}, {"retries": -1}])
def test_sequential_refuses_the_values_every_other_backend_refuses(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"max_workers must be an int >= 1|retries must be"):
        get_executor("sequential", **options)


def test_a_directory_given_as_a_model_file_names_the_file_inside(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text("def run(seed=0):\n    return {}\n", encoding="utf-8")

    with pytest.raises(ConfigError, match=r"is a directory, not a Python file: name the file, "
                                          r"e\.g\. '.*model\.py'"):
        resolve_callable(f"{tmp_path}:run", "model_fn")


def test_a_model_file_knows_its_own_path(tmp_path: Path) -> None:
    model = tmp_path / "where.py"
    model.write_text("from pathlib import Path\nHERE = Path(__file__).parent\n"
                     "def run(seed=0):\n    return {'here': str(HERE)}\n", encoding="utf-8")

    assert resolve_callable(f"{model}:run", "model_fn")() == {"here": str(tmp_path.resolve())}
