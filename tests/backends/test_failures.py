"""Failures surface clearly: an agent's exception, an unknown recipient, a dead worker."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from simulacra import (
    AgentActionError,
    ConfigError,
    LocalBackend,
    Model,
    Phase,
    ProcessPoolBackend,
    RemoteError,
    ThreadPoolBackend,
    UnknownRecipient,
    WorkerLost,
)

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import _engine_models as models  # noqa: E402

BACKENDS = {
    "local": LocalBackend,
    "threaded": lambda: ThreadPoolBackend(3),
    "processes": lambda: ProcessPoolBackend(2),
}


@pytest.fixture(params=list(BACKENDS))
def backend(request: pytest.FixtureRequest) -> Any:
    instance = BACKENDS[request.param]()
    yield instance
    instance.close()


def _faulty(backend: Any, *, bad_id: int = 6, bad_step: int = 2) -> Model:
    model = Model(seed=0, backend=backend)
    model.add_many(models.Faulty, range(10), bad_id=bad_id, bad_step=bad_step)
    return model


def test_an_action_error_names_agent_phase_and_step(backend: Any) -> None:
    """Agents 6-9 all fail at step 2; every backend reports agent 6, as the reference does."""
    with pytest.raises(AgentActionError) as info:
        _faulty(backend).run(models.Faulty.act, steps=5)

    error = info.value
    assert (error.agent, error.phase, error.step) == (6, "Faulty.act", 2)
    message = str(error)
    assert "agent 6" in message
    assert "'Faulty.act'" in message
    assert "step 2" in message
    assert "fails on purpose" in message
    assert isinstance(error.__cause__, ValueError)
    assert str(error.__cause__) == "agent 6 fails on purpose"


def test_a_worker_error_carries_the_worker_traceback() -> None:
    with ProcessPoolBackend(2) as backend, pytest.raises(AgentActionError) as info:
        _faulty(backend).run(models.Faulty.act, steps=5)

    error = info.value
    assert error.remote_traceback is not None
    assert 'raise ValueError(f"agent {self.id} fails on purpose")' in error.remote_traceback
    assert "_engine_models.py" in error.remote_traceback
    # The original exception is the cause; its cause holds the worker's traceback text.
    assert isinstance(error.__cause__, ValueError)
    assert "fails on purpose" in str(error.__cause__.__cause__)


def test_an_exception_that_cannot_travel_back_arrives_as_remote_error() -> None:
    model = Model(seed=0, backend="processes")
    model.add_many(models.Unpicklable, range(3))

    with pytest.raises(AgentActionError) as info:
        model.run(models.Unpicklable.act, steps=1)

    assert info.value.agent == 0
    assert isinstance(info.value.__cause__, RemoteError)
    assert "UnpicklableError" in str(info.value.__cause__)
    assert "cannot be pickled" in str(info.value.__cause__)


def test_an_unknown_recipient_names_sender_recipient_step_and_phase(backend: Any) -> None:
    model = Model(seed=0, backend=backend)
    model.add_many(models.Misaddressed, range(6))

    with pytest.raises(UnknownRecipient) as info:
        model.run(models.Misaddressed.act, steps=3)

    error = info.value
    assert (error.sender, error.recipient) == (4, 99)
    assert (error.step, error.phase) == (1, "Misaddressed.act")
    assert str(error) == (
        "agent 4 sent a message to 99, which is not an agent of this model, "
        "in phase 'Misaddressed.act' at step 1"
    )


def test_an_agent_constructor_error_names_the_agent() -> None:
    model = Model(seed=0, backend="processes")
    model.add(models.Faulty, 1, bad_id=0, bad_step=0)
    model.add(models.BadInit, 2)

    with pytest.raises(AgentActionError) as info:
        model.run(models.Faulty.act, steps=1)

    assert (info.value.agent, info.value.phase) == (2, "__init__")
    assert isinstance(info.value.__cause__, ZeroDivisionError)


@pytest.mark.timeout(60)
def test_a_worker_killed_by_its_agent_surfaces_as_worker_lost() -> None:
    model = Model(seed=0, backend="processes")  # owned: closed after the failed run
    model.add_many(models.SelfKilling, range(4), parent_pid=os.getpid())

    with pytest.raises(WorkerLost) as info:
        model.run(models.SelfKilling.act, steps=3)

    message = str(info.value)
    assert "was killed by SIGKILL" in message
    assert "running phase 'SelfKilling.act' at step 1" in message


@pytest.mark.timeout(60)
def test_a_worker_killed_from_outside_surfaces_as_worker_lost_and_the_backend_recovers() -> None:
    backend = ProcessPoolBackend(2)
    model = Model(seed=0, backend=backend)
    model.add_many(models.Ring, range(6), size=6)
    try:
        reference = model.run(models.Ring.act, steps=3)
        backend.start(model.specs, model.seed, None)
        victim = backend.worker_pids[1]
        os.kill(victim, signal.SIGKILL)

        with pytest.raises(WorkerLost) as info:
            backend.execute_action(Phase(models.Ring.act), 0, 0)

        assert f"pid {victim}" in str(info.value)
        assert info.value.unit == 1
        assert backend.worker_pids == ()  # the broken pool was shut down
        # A new run starts fresh workers and gives the same result as before.
        assert model.run(models.Ring.act, steps=3).digest == reference.digest
    finally:
        backend.close()


def test_a_backend_must_be_started_first() -> None:
    for backend in (LocalBackend(), ThreadPoolBackend(2), ProcessPoolBackend(2)):
        with pytest.raises(ConfigError, match="not started"):
            backend.snapshot()
