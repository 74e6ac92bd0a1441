"""DaskBackend on a real LocalCluster: partitions on workers, failures, settings, lifecycle.

Same-seed-same-result on 1, 2, 3 and 4 workers is in the conformance suite
(``tests/backends/_conf_dask.py``); this module checks what is particular to
Dask. Most tests share one two-worker ``LocalCluster`` (start-ups are slow);
one test starts the backend's own cluster, then kills one of its workers.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

distributed = pytest.importorskip("distributed")

from simulacra import (  # noqa: E402
    AgentActionError,
    BackendUnavailable,
    ConfigError,
    DaskBackend,
    LocalBackend,
    Model,
    Phase,
    RemoteError,
    UnknownRecipient,
    WorkerLost,
)
from simulacra._util import install_hint  # noqa: E402
from simulacra.backends import get_backend  # noqa: E402
from simulacra.distributed import _dask_worker  # noqa: E402

BACKEND_TESTS = Path(__file__).resolve().parents[1] / "backends"
if str(BACKEND_TESTS) not in sys.path:  # workers inherit sys.path and import the models by name
    sys.path.insert(0, str(BACKEND_TESTS))

import _engine_models as models  # noqa: E402

STEPS = 4


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """One two-worker LocalCluster for the module."""
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
        dashboard_address=None, scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
    ) as local:
        yield local


@pytest.fixture(scope="module")
def address(cluster: Any) -> str:
    return str(cluster.scheduler_address)


@pytest.fixture(scope="module")
def observer(address: str) -> Iterator[Any]:
    """A client of our own, to look at the workers from outside the backend."""
    with distributed.Client(address, set_as_default=False) as client:
        yield client


@pytest.fixture
def backend(address: str) -> Iterator[DaskBackend]:
    instance = DaskBackend(address, n_workers=2)
    yield instance
    instance.close()


def _held(observer: Any) -> dict[str, int]:
    """How many partitions each worker of the cluster holds."""
    counts: dict[str, int] = observer.run(_dask_worker.held_count)
    return counts


def _faulty(backend: Any, *, bad_id: int = 6, bad_step: int = 2) -> Model:
    model = Model(seed=0, backend=backend)
    model.add_many(models.Faulty, range(10), bad_id=bad_id, bad_step=bad_step)
    return model


# --------------------------------------------------------------------------- placement


@pytest.mark.timeout(120)
def test_partitions_live_on_the_workers_and_are_dropped_on_close(address: str,
                                                                 observer: Any) -> None:
    model = models.conformance_model()
    backend = DaskBackend(address, n_workers=2)
    try:
        backend.start(model.specs, model.seed, {"fee": 0.0, "auditors": [23, 24]})

        workers = backend.worker_addresses
        assert len(set(workers)) == 2
        assert _held(observer) == dict.fromkeys(workers, 1)  # one partition on each worker
        snapshot = backend.snapshot()
        assert list(snapshot) == list(range(25))  # merged from both, in id order
    finally:
        backend.close()
    assert backend.worker_addresses == ()
    assert sum(_held(observer).values()) == 0
    with pytest.raises(ConfigError, match="not started"):
        backend.snapshot()


@pytest.mark.timeout(120)
@pytest.mark.determinism
def test_a_model_runs_on_dask_by_settings_with_the_reference_result(address: str,
                                                                    observer: Any) -> None:
    """The model builds the backend from settings for the run and closes it after."""
    settings = {"orchestration": {
        "mode": "dask", "scheduler_address": address, "n_workers": 2, "partition": "hash"}}
    reference_model = Model(seed=7)
    reference_model.add_many(models.Ring, range(9), size=9)
    reference = reference_model.run(models.Ring.act, steps=STEPS)
    model = Model(seed=7, settings=settings)
    model.add_many(models.Ring, range(9), size=9)

    result = model.run(models.Ring.act, steps=STEPS)

    assert result.backend == "dask"
    assert result.state_digests == reference.state_digests
    assert result.message_digests == reference.message_digests
    assert result.digest == reference.digest
    assert sum(_held(observer).values()) == 0  # closed after the run: partitions dropped


@pytest.mark.timeout(120)
def test_fewer_agents_than_workers_use_fewer_workers(backend: DaskBackend) -> None:
    model = Model(seed=0, backend=backend)
    model.add(models.Ring, 0, size=1)
    reference = Model(seed=0)
    reference.add(models.Ring, 0, size=1)

    result = model.run(models.Ring.act, steps=3)

    assert len(backend.worker_addresses) == 1  # the backend is ours: still started
    assert result.digest == reference.run(models.Ring.act, steps=3).digest


# --------------------------------------------------------------------------- failures


@pytest.mark.timeout(120)
def test_an_action_error_names_agent_phase_and_step(backend: DaskBackend) -> None:
    """Agents 6-9 all fail at step 2 on two workers; agent 6 is reported, as locally."""
    with pytest.raises(AgentActionError) as info:
        _faulty(backend).run(models.Faulty.act, steps=5)

    error = info.value
    assert (error.agent, error.phase, error.step) == (6, "Faulty.act", 2)
    assert str(error).startswith("agent 6 (Faulty) raised ValueError in phase 'Faulty.act' "
                                 "at step 2: agent 6 fails on purpose")
    assert isinstance(error.__cause__, ValueError)
    assert str(error.__cause__) == "agent 6 fails on purpose"
    assert error.remote_traceback is not None
    assert 'raise ValueError(f"agent {self.id} fails on purpose")' in error.remote_traceback
    with pytest.raises(AgentActionError) as local:
        _faulty(LocalBackend()).run(models.Faulty.act, steps=5)
    assert str(local.value) == str(error)


@pytest.mark.timeout(120)
def test_the_lowest_failing_agent_wins_across_workers(backend: DaskBackend) -> None:
    """Agent 7 (odd: worker 1) and 8 (even: worker 0) fail; 7 is the reference's error."""
    with pytest.raises(AgentActionError) as info:
        _faulty(backend, bad_id=7, bad_step=0).run(models.Faulty.act, steps=2)

    assert (info.value.agent, info.value.step) == (7, 0)


@pytest.mark.timeout(120)
def test_an_exception_that_cannot_travel_back_arrives_as_remote_error(
        backend: DaskBackend) -> None:
    model = Model(seed=0, backend=backend)
    model.add_many(models.Unpicklable, range(3))

    with pytest.raises(AgentActionError) as info:
        model.run(models.Unpicklable.act, steps=1)

    assert info.value.agent == 0
    assert isinstance(info.value.__cause__, RemoteError)
    assert "UnpicklableError: this exception cannot be pickled" in str(info.value.__cause__)


@pytest.mark.timeout(120)
def test_an_unknown_recipient_names_sender_recipient_step_and_phase(
        backend: DaskBackend) -> None:
    model = Model(seed=0, backend=backend)
    model.add_many(models.Misaddressed, range(6))

    with pytest.raises(UnknownRecipient) as info:
        model.run(models.Misaddressed.act, steps=3)

    error = info.value
    assert (error.sender, error.recipient, error.step, error.phase) == (
        4, 99, 1, "Misaddressed.act")
    assert str(error) == (
        "agent 4 sent a message to 99, which is not an agent of this model, "
        "in phase 'Misaddressed.act' at step 1"
    )


@pytest.mark.timeout(120)
def test_an_agent_constructor_error_names_the_agent(backend: DaskBackend) -> None:
    model = Model(seed=0, backend=backend)
    model.add(models.Faulty, 1, bad_id=0, bad_step=0)
    model.add(models.BadInit, 2)

    with pytest.raises(AgentActionError) as info:
        model.run(models.Faulty.act, steps=1)

    assert (info.value.agent, info.value.phase) == (2, "__init__")
    assert isinstance(info.value.__cause__, ZeroDivisionError)


@pytest.mark.timeout(120)
def test_the_backend_runs_again_after_an_agent_error(backend: DaskBackend) -> None:
    with pytest.raises(AgentActionError):
        _faulty(backend).run(models.Faulty.act, steps=5)
    model = Model(seed=0, backend=backend)
    model.add_many(models.Ring, range(6), size=6)
    reference = Model(seed=0)
    reference.add_many(models.Ring, range(6), size=6)

    assert model.run(models.Ring.act, steps=3).digest == reference.run(
        models.Ring.act, steps=3).digest


@pytest.mark.timeout(120)
def test_a_worker_killed_by_its_agent_surfaces_as_worker_lost(backend: DaskBackend,
                                                              cluster: Any) -> None:
    """The worker's nanny restarts it; the next run waits for it and works."""
    model = Model(seed=0, backend=backend)
    model.add_many(models.SelfKilling, range(4), parent_pid=os.getpid())

    with pytest.raises(WorkerLost) as info:
        model.run(models.SelfKilling.act, steps=3)

    message = str(info.value)
    assert "worker 0 of DaskBackend" in message
    assert "running phase 'SelfKilling.act' at step 1" in message
    assert "the 2 agents it held are lost" in message
    assert info.value.unit == 0  # agent 2 is on worker 0 (round robin: 0, 2 | 1, 3)
    assert backend.worker_addresses == ()
    with pytest.raises(ConfigError, match="not started"):
        backend.snapshot()


# --------------------------------------------------------------------------- its own cluster


@pytest.mark.timeout(180)
@pytest.mark.determinism
def test_its_own_local_cluster_and_a_worker_killed_from_outside() -> None:
    """No address: the backend starts a LocalCluster; a SIGKILLed worker is a WorkerLost."""
    reference_model = Model(seed=0)
    reference_model.add_many(models.Ring, range(6), size=6)
    reference = reference_model.run(models.Ring.act, steps=3)
    backend = DaskBackend(n_workers=2)
    model = Model(seed=0, backend=backend)
    model.add_many(models.Ring, range(6), size=6)
    try:
        assert model.run(models.Ring.act, steps=3).digest == reference.digest
        client = backend.client
        assert client.scheduler.address.startswith("tcp://127.0.0.1:")
        backend.start(model.specs, model.seed, None)
        victim = backend.worker_addresses[1]
        pids: dict[str, int] = client.run(os.getpid)
        os.kill(pids[victim], signal.SIGKILL)

        with pytest.raises(WorkerLost) as info:
            backend.execute_action(Phase(models.Ring.act), 0, 0)

        assert f"worker 1 of DaskBackend ({victim})" in str(info.value)
        assert info.value.unit == 1
        # The nanny restarts the worker; a new run waits for it and gives the same result.
        assert model.run(models.Ring.act, steps=3).digest == reference.digest
        assert victim not in backend.worker_addresses
    finally:
        backend.close()
    assert backend.worker_addresses == ()
    assert client.status == "closed"


# --------------------------------------------------------------------------- options


@pytest.mark.parametrize(("options", "expected"), [
    ({"scheduler_address": ""}, "scheduler_address must be a Dask scheduler address"),
    ({"scheduler_address": 8786}, "got int 8786"),
    ({"n_workers": 0}, "n_workers must be an int >= 1 or None, got int 0"),
    ({"n_workers": True}, "n_workers must be an int >= 1 or None, got bool True"),
    ({"partition": "random"}, "partition must be one of 'round_robin', 'hash', got 'random'"),
    ({"connect_timeout": 0}, "connect_timeout must be a number of seconds > 0, got int 0"),
])
def test_bad_options_name_the_field(options: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        DaskBackend(**options)
    if "connect_timeout" not in options:  # a Python-only option
        with pytest.raises(ConfigError, match=expected):
            get_backend("dask", **options)


def test_the_registry_builds_it_without_starting_a_cluster() -> None:
    backend = get_backend("dask", n_workers=3, partition="hash")

    assert isinstance(backend, DaskBackend)
    assert (backend.n_workers, backend.partition, backend.scheduler_address) == (3, "hash", None)
    assert repr(backend) == "DaskBackend(LocalCluster, n_workers=3, partition='hash')"
    backend.close()  # nothing started: nothing to do
    with pytest.raises(ConfigError, match="backend 'dask' has no option 'max_workers'"):
        get_backend("dask", max_workers=2)


def test_seed_001s_partition_strategy_is_another_name_for_partition() -> None:
    from simulacra.backends import parse_settings

    for backend in (
        DaskBackend(n_workers=2, partition_strategy="hash"),
        get_backend("dask", n_workers=2, partition_strategy="hash"),
        parse_settings({"orchestration": {"mode": "dask", "n_workers": 2,
                                          "partition_strategy": "hash"}}).backend(),
    ):
        assert backend.partition == "hash"  # type: ignore[attr-defined]
        backend.close()
    with pytest.raises(ConfigError, match="partition_strategy is another name for partition"):
        DaskBackend(partition="hash", partition_strategy="round_robin")
    with pytest.raises(ConfigError, match=r"orchestration\.partition is given twice"):
        parse_settings({"orchestration": {"mode": "dask", "partition": "hash",
                                          "partition_strategy": "hash"}})
    with pytest.raises(ConfigError, match="partition must be one of"):
        get_backend("dask", partition_strategy="zigzag")


@pytest.mark.timeout(60)
def test_an_unreachable_scheduler_is_backend_unavailable() -> None:
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    backend = DaskBackend(f"tcp://127.0.0.1:{port}", connect_timeout=2)
    try:
        with pytest.raises(BackendUnavailable, match=f"scheduler_address='tcp://127.0.0.1:{port}'"):
            backend.start(models.conformance_model().specs, models.conformance_model().seed, None)
    finally:
        backend.close()


_WITHOUT_DASK = """
import sys

class Block:  # as if the dask extra were not installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("dask", "distributed"):
            raise ImportError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, Block())
import simulacra.distributed
from simulacra import BackendUnavailable, get_backend

try:
    get_backend("dask", n_workers=2)
except BackendUnavailable as exc:
    print(exc)
"""


@pytest.mark.timeout(120)
def test_without_dask_the_package_imports_and_the_error_says_how_to_install() -> None:
    import subprocess

    src = Path(__file__).resolve().parents[2] / "src"
    path = os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run([sys.executable, "-c", _WITHOUT_DASK], capture_output=True, text=True,
                          env=env, timeout=100, check=False)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "backend 'dask' (a Dask cluster) needs the package 'distributed', which is not "
        f"installed: {install_hint('dask')}"
    )
