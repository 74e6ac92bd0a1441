"""Elided delays: a process that yields a fresh ``sim.delay(d)`` waits without the event.

The run loop lets the process take the delay's place in the schedule when
nothing else holds the event (a reference count), which saves the event's
88 bytes per waiting process. Nothing a model can observe may change: these
tests compare elided runs with the same runs where elision is switched off,
and with the held-event form of the same model. The SimPy differential suite
(``test_differential_simpy.py``, its ``sleep`` and ``peek`` ops) covers the
same ground on random models.
"""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys
import tracemalloc
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulacra.core._kernel as kernel
from simulacra import Interrupt, Sim

ROOT = Path(__file__).resolve().parents[2]

Log = list[tuple[Any, ...]]


def _elision_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernel, "_ELIDE_REFS", -1)


def _idle(sim: Sim, delay: float) -> Generator[Any, Any, None]:
    yield sim.delay(delay)


def _idle_held(sim: Sim, delay: float) -> Generator[Any, Any, None]:
    event = sim.delay(delay)
    yield event


def _bytes_per_process(body: Callable[[Sim, float], Generator[Any, Any, None]], n: int,
                       spread: bool) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        sim = Sim(seed=0)
        sim.run(until=0.5)
        before = tracemalloc.get_traced_memory()[0]
        for i in range(n):
            sim.spawn(body, 1e6 + i if spread else 1e6)
        sim.run(until=1.0)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return (after - before) / n


@pytest.mark.skipif(kernel._ELIDE_REFS < 0, reason="this interpreter never elides")
@pytest.mark.parametrize("spread", [False, True], ids=["same-time", "distinct-times"])
def test_an_elided_wait_holds_no_event(spread: bool) -> None:
    # The held form keeps one Event (88 bytes on CPython) per waiting process;
    # the elided form keeps none. Memory is deterministic, unlike time, but
    # tracemalloc counts every thread's allocations: an idle thread left by an
    # earlier test in this process once moved the figure by 14 bytes. So the
    # measure runs in a fresh interpreter that has no other thread.
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_elided_delays import _bytes_per_process, _idle, _idle_held\n"
        f"print(_bytes_per_process(_idle, 5000, {spread}),"
        f" _bytes_per_process(_idle_held, 5000, {spread}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout.split()
    elided, held = float(out[0]), float(out[1])
    event_size = sys.getsizeof(Sim(seed=0).event())  # with its GC header
    assert held - elided >= event_size, (held, elided, event_size)


def _model(sim: Sim, log: Log, held: bool) -> None:
    """Processes sleeping for equal and distinct times, interrupted, peeked at."""

    def sleep(d: float) -> Any:
        if held:
            event = sim.delay(d)
            return event
        return sim.delay(d)

    def sleeper(sim: Sim, k: int) -> Generator[Any, Any, None]:
        for step in range(4):
            try:
                value = yield sleep(1.0 + (k % 3) * 0.5)
                log.append((sim.now, "woke", k, step, value))
            except Interrupt as stop:
                log.append((sim.now, "interrupted", k, step, stop.cause))

    def meddler(sim: Sim, procs: list[Any]) -> Generator[Any, Any, None]:
        yield sim.delay(1.0)  # the same time as the k % 3 == 0 sleepers, scheduled later
        procs[1].interrupt("poke")
        target = procs[2].target
        log.append((sim.now, "peek", target.triggered, target.processed))
        target.callbacks.append(lambda ev: log.append((sim.now, "peeked fired", ev.processed)))
        yield sim.delay(0.25)
        procs[4].interrupt("late")
        yield target
        log.append((sim.now, "after target", target.processed))

    procs = [sim.spawn(sleeper, k) for k in range(6)]
    sim.spawn(meddler, procs)


def _run(held: bool, driver: str = "run") -> Log:
    sim = Sim(seed=1)
    log: Log = []
    _model(sim, log, held)
    if driver == "run":
        sim.run()
    elif driver == "until":
        for t in (0.5, 1.0, 1.25, 2.0, 2.5, 3.7):
            sim.run(until=t)
            sim._check_invariants()
            log.append((sim.now, "paused"))
        sim.run()
    else:
        while sim.peek() != float("inf"):
            sim.step()
    sim._check_invariants()
    return [entry for entry in log if entry[1] != "paused"]


@pytest.mark.parametrize("driver", ["run", "until", "step"])
def test_elided_and_held_delays_give_the_same_log(driver: str) -> None:
    reference = _run(held=True)
    assert any(entry[1] == "interrupted" for entry in reference)
    assert any(entry[1] == "peeked fired" for entry in reference)
    assert _run(held=False, driver=driver) == reference


def test_switching_elision_off_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    elided = _run(held=False)
    _elision_off(monkeypatch)
    assert _run(held=False) == elided


def test_target_of_an_elided_wait_is_a_real_event() -> None:
    sim = Sim(seed=0)
    proc = sim.spawn(_idle, 5.0)
    sim.run(until=1.0)
    target = proc.target
    assert target is not None
    assert target is proc.target  # the same event on every access
    assert (target.triggered, target.processed, target.value) == (True, False, None)
    seen: list[float] = []
    target.callbacks.append(lambda _: seen.append(sim.now))
    sim.run()
    assert target.processed
    assert seen == [5.0]
    assert not proc.is_alive


def test_a_held_delay_is_never_elided() -> None:
    sim = Sim(seed=0)
    kept: list[Any] = []

    def keeper(sim: Sim) -> Generator[Any, Any, None]:
        kept.append(sim.delay(3.0))
        yield kept[-1]
        kept.append(sim.delay(3.0))
        yield kept[-1]

    proc = sim.spawn(keeper)
    sim.run(until=1.0)
    assert proc.target is kept[0]
    sim.run()
    assert [event.processed for event in kept] == [True, True]


def test_a_delay_whose_time_came_is_not_elided_twice() -> None:
    # An event taken out of a container at its own time sits in the queue of
    # the current time: the process must wait on it as it is.
    sim = Sim(seed=0)
    box: list[Any] = []
    log: list[tuple[float, str]] = []

    def maker(sim: Sim) -> Generator[Any, Any, None]:
        box.append(sim.delay(2.0))
        yield sim.delay(2.0)  # made after the boxed one: resumes after it at t=2
        log.append((sim.now, "maker"))

    def taker(sim: Sim) -> Generator[Any, Any, None]:
        yield sim.delay(2.0)  # made before the boxed one
        yield box.pop()  # at t=2 its own time has come: queued, not yet processed
        log.append((sim.now, "taker"))

    sim.spawn(taker)
    sim.spawn(maker)
    sim.run()
    sim._check_invariants()
    assert log == [(2.0, "taker"), (2.0, "maker")]


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(
    delays=st.lists(st.lists(st.sampled_from([0, 0.5, 1, 1, 2, 3]), min_size=1, max_size=5),
                    min_size=1, max_size=8),
    kicks=st.lists(st.tuples(st.sampled_from([0.25, 0.5, 1, 1.5, 2]), st.integers(0, 7),
                             st.booleans()), max_size=6),
)
def test_random_sleepers_match_the_unelided_kernel(delays: list[list[float]],
                                                   kicks: list[tuple[float, int, bool]]) -> None:
    def run(elide: bool) -> Log:
        saved = kernel._ELIDE_REFS
        kernel._ELIDE_REFS = saved if elide else -1
        try:
            sim = Sim(seed=0)
            log: Log = []

            def sleeper(sim: Sim, k: int, plan: list[float]) -> Generator[Any, Any, str]:
                for d in plan:
                    try:
                        yield sim.delay(d)
                        log.append((sim.now, k, "woke"))
                    except Interrupt as stop:
                        log.append((sim.now, k, "int", stop.cause))
                return f"done{k}"

            procs = [sim.spawn(sleeper, k, plan) for k, plan in enumerate(delays)]

            def kicker(sim: Sim) -> Generator[Any, Any, None]:
                for at, who, peek in kicks:
                    yield sim.delay(at)
                    proc = procs[who % len(procs)]
                    if not proc.is_alive:
                        continue
                    if peek:
                        target = proc.target
                        log.append((sim.now, "peek", target.triggered, target.processed))
                    else:
                        proc.interrupt(at)

            sim.spawn(kicker)
            for proc in procs:
                proc.callbacks.append(lambda p: log.append((sim.now, "exit", p.value)))
            sim.run()
            sim._check_invariants()
            return log
        finally:
            kernel._ELIDE_REFS = saved

    assert run(elide=True) == run(elide=False)


OTHER_PYTHON_SCRIPT = r"""
import sys
sys.path.insert(0, sys.argv[1])
import simulacra.core._kernel as kernel
from simulacra import Sim, Interrupt

def model(held):
    sim = Sim(seed=0)
    log = []
    def sleeper(sim, k):
        for step in range(3):
            try:
                if held:
                    e = sim.delay(1 + k % 2)
                    yield e
                else:
                    yield sim.delay(1 + k % 2)
                log.append((sim.now, k, step))
            except Interrupt as stop:
                log.append((sim.now, k, "int", stop.cause))
    procs = [sim.spawn(sleeper, k) for k in range(5)]
    def kicker(sim):
        yield sim.delay(1.5)
        procs[1].interrupt("x")
        log.append(("peek", procs[3].target.triggered, procs[3].target.processed))
    sim.spawn(kicker)
    sim.run(until=1.2)
    elided = sum(1 for p in procs if p.is_alive and not isinstance(p._target, kernel.Event))
    sim.run()
    sim._check_invariants()
    return log, elided

log_held, elided_held = model(True)
log_free, elided_free = model(False)
assert elided_held == 0, elided_held
assert kernel._ELIDE_REFS < 0 or elided_free == 5, elided_free
assert log_free == log_held, (log_free, log_held)
print("ok", sys.version_info[:2], elided_free)
"""


def _other_pythons() -> list[str]:
    home = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    found = []
    for minor in (12, 13, 14):
        for candidate in sorted(Path(home, "versions").glob(f"3.{minor}.*/bin/python")):
            found.append(str(candidate))
            break
        else:
            path = shutil.which(f"python3.{minor}")
            if path and "shims" not in Path(path).parts:
                found.append(path)
    return found


@pytest.mark.parametrize("python", _other_pythons() or [None])
@pytest.mark.timeout(120)
def test_elision_on_other_interpreters(python: str | None) -> None:
    """The reference count the run loop relies on, on every installed CPython."""
    if python is None:
        pytest.skip("no other Python installed")
    # The pure kernel's loop: the compiled one counts in C (test_compiled_kernel.py).
    env = {**os.environ, "SIMULACRA_KERNEL": "python"}
    done = subprocess.run([python, "-c", OTHER_PYTHON_SCRIPT, str(ROOT / "src")],
                          capture_output=True, text=True, timeout=100, check=False, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("ok"), done.stdout
