"""The compiled kernel (``simulacra.core._ckernel``) against the pure-Python one.

The compiled kernel is not a second set of classes: it puts C versions of a
few hot methods (the run loop, ``_resume``, ``delay``, ``spawn``, ``succeed``,
the release at the end of ``with res.request()``, ``Resource.request``, the
Store's put and get) into the pure kernel's own classes, each falling back to
the Python method off its fast path. These tests check the selection
(``SIMULACRA_KERNEL``), and run the same random models (the SimPy differential
suite's, with resources, reneging, stores, interrupts and conditions, in both
orderings, traced and not) under both kernels in subprocesses: the logs,
values, errors, traces and digests must be identical.

Without the built extension these tests skip, except when ``CI`` is set: then
they fail, so that CI never passes by skipping them (build it with
``python -m pip install -e .``).
"""

from __future__ import annotations

import gc
import importlib.util
import os
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import simulacra.core
from simulacra import Resource, Sim, Store
from simulacra.core import _kernel

pytest.importorskip("simpy")  # _models imports it lazily, but its suite needs it anyway

if __package__:
    from ._models import models
else:  # pragma: no cover
    if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib
        sys.path.insert(0, str(Path(__file__).parent))
    from _models import models

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"
DRIVER = HERE / "_kernel_driver.py"
BUILT = importlib.util.find_spec("simulacra.core._ckernel") is not None


@pytest.fixture
def compiled_built() -> None:
    """Skip without the built extension; fail instead when CI is set."""
    if not BUILT:
        why = "the compiled kernel is not built (python -m pip install -e .)"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and {why}")
        pytest.skip(why)


def _python(code: str, kernel: str | None, **env_extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SIMULACRA_KERNEL"}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if kernel is not None:
        env["SIMULACRA_KERNEL"] = kernel
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


# --------------------------------------------------------------------------- selection


def test_kernel_says_which_runs() -> None:
    wanted = os.environ.get("SIMULACRA_KERNEL", "auto")
    expected = {"python": "python", "compiled": "compiled"}.get(
        wanted, "compiled" if BUILT else "python"
    )
    assert expected == simulacra.core.KERNEL
    # The same classes either way: the kernel is chosen once per process.
    assert simulacra.Sim is _kernel.Sim
    assert simulacra.core.Event is _kernel.Event


def test_the_python_kernel_is_untouched() -> None:
    # "Free when off": SIMULACRA_KERNEL=python leaves every method the Python one.
    done = _python(
        "import types, simulacra.core as c, simulacra.resources._resources as r\n"
        "from simulacra.core import _kernel as k\n"
        "assert c.KERNEL == 'python', c.KERNEL\n"
        "assert k.heappush.__module__ == '_heapq' and k._new_times is list\n"
        "assert k._new_buckets is dict\n"
        "assert isinstance(k._resume, types.FunctionType)\n"
        "for f in (k.Sim._run_fifo, k.Sim.delay, k.Sim.spawn, k.Event.succeed,"
        " k.Event.__exit__, r.Resource.request, r.Store.put, r.Store.get):\n"
        "    assert isinstance(f, types.FunctionType), f\n"
        "assert k.Sim.timeout is k.Sim.delay\n"
        "print('ok')",
        "python",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_a_bad_kernel_name_is_refused() -> None:
    done = _python("import simulacra", "fast")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        "simulacra.errors.ConfigError: SIMULACRA_KERNEL='fast': expected 'auto', "
        "'compiled' or 'python'"
    )


# Hide the extension as if it had not been built.
_WITHOUT_EXTENSION = "import sys\nsys.modules['simulacra.core._ckernel'] = None\n"


def test_compiled_without_the_extension_says_how_to_build_it() -> None:
    done = _python(_WITHOUT_EXTENSION + "import simulacra", "compiled")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "simulacra.errors.ConfigError: SIMULACRA_KERNEL=compiled, but the compiled kernel "
        "(simulacra.core._ckernel) is not built for this Python"
    ), last
    assert "python -m pip install ." in last
    assert "SIMULACRA_KERNEL=auto" in last


def test_auto_without_the_extension_runs_the_python_kernel() -> None:
    done = _python(_WITHOUT_EXTENSION + "import simulacra.core as c\nprint(c.KERNEL)", None)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "python"


@pytest.mark.usefixtures("compiled_built")
def test_auto_runs_the_compiled_kernel_when_it_is_built() -> None:
    done = _python("import simulacra.core as c\nprint(c.KERNEL)", None)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "compiled"


@pytest.mark.usefixtures("compiled_built")
def test_the_compiled_methods_keep_their_names_docs_and_signatures() -> None:
    done = _python(
        "import inspect, simulacra\n"
        "from simulacra import Sim, Event, Resource\n"
        "assert Sim.timeout is Sim.delay and Sim.process is Sim.spawn\n"
        "for f in (Sim.delay, Sim.spawn, Event.succeed, Resource.request):\n"
        "    assert f.__doc__ and f.__doc__.strip(), f\n"
        "    inspect.signature(f)\n"
        "print(inspect.signature(Sim.delay), inspect.signature(Sim.spawn))",
        "compiled",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "(self, /, delay, value=None) (self, fn, /, *args, name=None, **kwargs)"
    )


# --------------------------------------------------------------------------- differential


def _run_driver(batch: list[Any], kernel: str, tmp: Path) -> dict[str, Any]:
    src = tmp / "models.pickle"
    out = tmp / f"out-{kernel}.pickle"
    src.write_bytes(pickle.dumps(batch))
    env = {**os.environ, "SIMULACRA_KERNEL": kernel,
           "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(DRIVER), str(src), str(out)],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = pickle.loads(out.read_bytes())  # noqa: S301 - ours
    assert result["kernel"] == kernel
    return result


@pytest.mark.usefixtures("compiled_built")
@pytest.mark.slow
# No shrinking: each example is two interpreters over 25 models, and the
# message names the model that differs.
@settings(max_examples=8, deadline=None, derandomize=True,
          phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(models(), min_size=25, max_size=25))
def test_both_kernels_run_random_models_identically(batch: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        pure = _run_driver(batch, "python", Path(tmp))
        compiled = _run_driver(batch, "compiled", Path(tmp))
    for model, want, got in zip(batch, pure["models"], compiled["models"], strict=True):
        for variant in want:
            assert got[variant] == want[variant], (variant, model)


# --------------------------------------------------------------------------- in process
#
# These run under whichever kernel this process has (CI runs this file under both).


def _mmc(sim: Sim, customers: int, *, stepped: bool) -> list[float]:
    rng = sim.rng("mmc")
    tellers = Resource(sim, capacity=3)
    waits: list[float] = []

    def customer(sim: Sim) -> Generator[Any, Any, None]:
        arrived = sim.now
        with tellers.request() as req:
            yield req
            waits.append(sim.now - arrived)
            yield sim.delay(rng.expovariate(1.0))

    def source(sim: Sim) -> Generator[Any, Any, None]:
        for _ in range(customers):
            yield sim.delay(rng.expovariate(2.7))
            sim.spawn(customer(sim))

    sim.spawn(source(sim))
    if stepped:
        while sim.peek() != float("inf"):
            sim.step()
    else:
        sim.run()
    return waits


# Keys the time map must treat as a dict does: equal across types (1 == 1.0 == True),
# -0.0 equal to 0.0, NaN equal to nothing but itself, and float subclasses.
class _Time(float):
    pass


_NAN = float("nan")
_PLAIN = st.one_of(  # plain floats: the map's own table
    st.integers(0, 80).map(lambda i: i * 0.37),  # the keys filled in first, and others
    st.integers(0, 80).map(lambda i: i * 0.37),  # (twice: most operations find their key)
    st.floats(allow_nan=False, allow_infinity=True, width=64),
    st.sampled_from([0.0, -0.0, 1.0, 2.5, 1e300, -1e-300, 3.0]),
)
_KEYS = st.one_of(_PLAIN, st.integers(-3, 3), st.just(_NAN),
                  st.builds(_Time, st.sampled_from([1.0, 2.5, 0.0])))
_OP = st.sampled_from(["set", "setdefault", "get", "pop", "pop?", "del", "in", "getitem"])
# Most runs stay on plain floats; the rest end with keys that turn the map into a dict.
_OPS = st.one_of(
    st.lists(st.tuples(_OP, _PLAIN, st.integers(0, 9)), max_size=300),
    st.tuples(st.lists(st.tuples(_OP, _PLAIN, st.integers(0, 9)), max_size=200),
              st.lists(st.tuples(_OP, _KEYS, st.integers(0, 9)), max_size=100)).map(
        lambda two: two[0] + two[1]),
)


@pytest.mark.usefixtures("compiled_built")
@settings(max_examples=300, deadline=None)
@given(_OPS, st.integers(0, 80))
def test_the_time_map_behaves_as_a_dict(ops: list[tuple[str, Any, int]], fill: int) -> None:
    if simulacra.core.KERNEL != "compiled":
        pytest.skip("the time map is the compiled kernel's")
    tmap, oracle = _kernel._new_buckets(), {}
    assert type(tmap) is not dict
    for i in range(fill):  # enough keys to grow the table and wrap its probes
        key = i * 0.37
        tmap[key] = oracle[key] = i

    def outcome(target: Any, op: str, key: Any, value: int) -> Any:
        try:
            if op == "set":
                target[key] = value
                return None
            if op == "setdefault":
                return target.setdefault(key, value)
            if op == "get":
                return target.get(key, -1)
            if op == "pop":
                return target.pop(key)
            if op == "pop?":
                return target.pop(key, -1)
            if op == "del":
                del target[key]
                return None
            if op == "in":
                return key in target
            return target[key]
        except KeyError as exc:
            return ("KeyError", exc.args)

    for op, key, value in ops:
        assert outcome(tmap, op, key, value) == outcome(oracle, op, key, value), (op, key)
        assert len(tmap) == len(oracle)
    # The same pairs (the map's own order is no order), and the keys are the same objects.
    assert sorted(map(repr, tmap.items())) == sorted(map(repr, oracle.items()))
    assert {id(k) for k in tmap} == {id(k) for k in oracle}
    assert sorted(map(repr, tmap.values())) == sorted(map(repr, oracle.values()))
    assert len(list(iter(tmap))) == len(oracle)


@pytest.mark.usefixtures("compiled_built")
@pytest.mark.parametrize("seed", range(4))
def test_the_time_map_finds_every_key_through_growth_and_deletions(seed: int) -> None:
    # Clusters of colliding slots: every deletion shifts the rest of its cluster back,
    # and a key left behind its home is no longer found. Check every key after each step.
    if simulacra.core.KERNEL != "compiled":
        pytest.skip("the time map is the compiled kernel's")
    import random

    rng = random.Random(seed)
    tmap, oracle = _kernel._new_buckets(), {}
    for step in range(3000):
        if oracle and rng.random() < 0.45:
            key = rng.choice(list(oracle))
            assert tmap.pop(key) == oracle.pop(key)
        else:
            key = rng.randrange(2000) * 0.25
            tmap[key] = oracle[key] = step
        if step % 7 == 0:
            assert all(tmap.get(k) == v for k, v in oracle.items()), step
            assert len(tmap) == len(oracle)
    assert sorted(tmap.items()) == sorted(oracle.items())


@pytest.mark.usefixtures("compiled_built")
def test_the_time_map_refuses_what_a_dict_refuses() -> None:
    if simulacra.core.KERNEL != "compiled":
        pytest.skip("the time map is the compiled kernel's")
    tmap = _kernel._new_buckets()
    with pytest.raises(TypeError, match="unhashable"):
        tmap[[1.0]] = 1
    with pytest.raises(TypeError, match="get expected at least 1 argument, got 0"):
        tmap.get()
    with pytest.raises(TypeError, match="pop expected at most 2 arguments, got 3"):
        tmap.pop(1.0, 2, 3)
    with pytest.raises(TypeError):
        hash(tmap)


_MIXED_TIMES = """
import numpy as np
import simulacra as sm
seen = []
def proc(sim, delays):
    for d in delays:
        yield sim.delay(d)
        seen.append((sim.now, type(sim.now).__name__))
# An int clock with int and float delays (2 and 2.0 are one time), and a float
# clock with numpy delays (a float subclass: float + np.float64 is an np.float64).
for start, delays in ((0, ((2, 1.5), (2.0,), (1, 1), (3.5,), (0.5, 1.5))),
                      (0.0, ((1.5, 2.0), (np.float64(1.5), 0.5), (np.float64(3.5),), (2,)))):
    sim = sm.Sim(seed=0, start=start)
    for ds in delays:
        sim.spawn(proc(sim, ds))
    sim.run()
    print(seen, repr(sim.now))
"""


@pytest.mark.usefixtures("compiled_built")
def test_int_and_numpy_times_run_the_same_on_both_kernels() -> None:
    # A time that is not a plain float turns the compiled kernel's time map into a
    # dict for good; the run is the pure kernel's either way.
    outputs = {}
    for kernel in ("python", "compiled"):
        done = _python(_MIXED_TIMES, kernel)
        assert done.returncode == 0, done.stderr
        outputs[kernel] = done.stdout
    assert outputs["python"] == outputs["compiled"]
    assert "(2, 'int')" in outputs["python"]
    assert "'float64')" in outputs["python"]


def test_an_int_clock_stays_int() -> None:
    # The fast paths are for float clocks; an int clock takes the Python paths.
    sim = Sim(seed=0, start=0)
    seen: list[Any] = []

    def proc(sim: Sim) -> Generator[Any, Any, None]:
        yield sim.delay(2)
        seen.append(sim.now)
        yield sim.delay(1.5)
        seen.append(sim.now)

    sim.spawn(proc(sim))
    sim.run()
    assert seen == [2, 3.5]
    assert type(seen[0]) is int


def test_store_ping_pong_and_statistics() -> None:
    sim = Sim(seed=0)
    a: Store[int] = Store(sim)
    b: Store[int] = Store(sim, capacity=1)
    got: list[int] = []

    def ping(sim: Sim) -> Generator[Any, Any, None]:
        for i in range(50):
            yield a.put(i)
            got.append((yield b.get()))

    def pong(sim: Sim) -> Generator[Any, Any, None]:
        for _ in range(50):
            item = yield a.get()
            yield sim.delay(0.5)
            yield b.put(item + 1)

    sim.spawn(ping(sim))
    sim.spawn(pong(sim))
    sim.run()
    assert got == list(range(1, 51))
    stats = b.statistics()
    assert (stats.puts, stats.gets, stats.max_level) == (50, 50, 1)
    assert sim.now == 25.0
    sim._check_invariants()


def test_mmc_is_the_same_under_step_and_run() -> None:
    # run() takes the compiled loop, step() the Python one.
    assert _mmc(Sim(seed=3), 500, stepped=False) == _mmc(Sim(seed=3), 500, stepped=True)


def test_elided_processes_hold_no_event_and_free_cleanly() -> None:
    sim = Sim(seed=0)

    def idle(sim: Sim) -> Generator[Any, Any, None]:
        yield sim.delay(5.0)

    procs = [sim.spawn(idle(sim)) for _ in range(100)]
    sim.run(until=1.0)
    if _kernel._ELIDE_REFS > 0:
        assert all(type(p._target) is float for p in procs)
    assert procs[7].target is procs[7].target  # unelided once, then the same event
    sim.run()
    assert all(not p.is_alive for p in procs)
    del procs, sim
    gc.collect()


# --------------------------------------------------------------- found by a stranger

_PICKLE_A_SIM = """
import copy, pickle, sys
import simulacra as sm
sim = sm.Sim(seed=1)
DELAYS = (5, 7, 3, 11, 1, 3, 0)
events = [sim.delay(d, value=d * 10) for d in DELAYS]
for _ in range(3):  # (not run(until=...): its stop event does not pickle, on either kernel)
    sim.step()
if sys.argv[1:] == ["dump"]:
    sys.stdout.buffer.write(pickle.dumps((sim, events)))
    raise SystemExit
twin, copies = copy.deepcopy((sim, events))
twin.run(until=6)
sim.run(until=4)
# a copy keeps what had happened (the kernel's markers are copied as themselves)
assert [e.processed for e in copies] == [d <= 6 for d in DELAYS], copies
assert [e.processed for e in events] == [d <= 3 for d in DELAYS], events
print(type(sim._times).__name__, twin.now, sim.now, sim.peek(), twin.peek(),
      [(e.processed, e.value) for e in copies], [e.processed for e in events])
"""


@pytest.mark.usefixtures("compiled_built")
def test_a_sim_deep_copies_and_pickles_under_both_kernels(tmp_path: Path) -> None:
    # The compiled kernel's heap of times is a C type: it pickled as nothing at all.
    outputs = {}
    for kernel in ("python", "compiled"):
        done = _python(_PICKLE_A_SIM, kernel)
        assert done.returncode == 0, done.stderr
        outputs[kernel] = done.stdout.split(" ", 1)[1]
    assert outputs["python"] == outputs["compiled"]
    # A pickle made under one kernel loads and runs under the other.
    for made, loaded in (("compiled", "python"), ("python", "compiled")):
        script = tmp_path / "pickle_a_sim.py"
        script.write_text(_PICKLE_A_SIM, encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if k != "SIMULACRA_KERNEL"}
        env["PYTHONPATH"] = str(SRC)
        dump = subprocess.run([sys.executable, str(script), "dump"], capture_output=True,
                              env={**env, "SIMULACRA_KERNEL": made}, timeout=120, check=True)
        done = subprocess.run(
            [sys.executable, "-c", "import pickle, sys\nsim, events = pickle.loads(sys.stdin"
             ".buffer.read())\nsim.run()\nprint(type(sim._times).__name__, sim.now, "
             "[e.value for e in events if e.processed] == [50, 70, 30, 110, 10, 30, 0])"],
            input=dump.stdout, capture_output=True, env={**env, "SIMULACRA_KERNEL": loaded},
            timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        # (a pure kernel's list stays a list: the compiled loop takes either)
        assert done.stdout.decode().split() == ["list", "11.0", "True"]


_CTRL_C = """
import os, signal, threading
import simulacra as sm
sim = sm.Sim()
def press_ctrl_c(_):  # once the run is under way, from another thread (it needs the GIL)
    threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGINT)).start()
sim.delay(0.5).callbacks.append(press_ctrl_c)
for i in range(3_000_000):
    sim.delay(1 + i * 1e-3)   # events nobody waits for: no Python code runs for them
try:
    sim.run()
except KeyboardInterrupt:
    print("interrupted", sim.peek() < float("inf"))
else:
    print("ran to the end")
"""


@pytest.mark.usefixtures("compiled_built")
@pytest.mark.parametrize("kernel", ["python", "compiled"])
def test_ctrl_c_stops_a_run_of_events_that_run_no_python_code(kernel: str) -> None:
    # The C loop looked for signals only when Python code ran: this run went on to its end.
    done = _python(_CTRL_C, kernel)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["interrupted", "True"]
