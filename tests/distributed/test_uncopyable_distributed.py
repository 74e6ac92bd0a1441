"""State and payloads that copy but do not pickle, on the distributed backends.

An instance of a class defined inside a function deep-copies, so it runs on
the backends in this process, but it cannot be pickled: whatever crosses to or
from a Dask worker, an MCP worker or an emulated MCP worker (whose calls are
pickled too) fails there. Each backend raises the ``UncopyableState`` that
:class:`~simulacra.ProcessPoolBackend` raises -- naming the agent and its
class, the attribute, argument or message, the phase and the step, and what
would work -- never a raw pickling error, and runs the next model as before.

The models are those of ``tests/backends/test_uncopyable.py``
(``tests/backends/_copy_models.py``), imported by name by every worker.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from simulacra import ExecutionBackend, Model, ProcessPoolBackend
from simulacra.distributed import DaskBackend, EmulatorBackend, MCPBackend
from simulacra.errors import AgentError, UncopyableState

BACKEND_TESTS = Path(__file__).resolve().parents[1] / "backends"
if str(BACKEND_TESTS) not in sys.path:  # workers inherit (or get) sys.path and import the models
    sys.path.insert(0, str(BACKEND_TESTS))

import _copy_models as cm  # noqa: E402

pytestmark = pytest.mark.timeout(180)


def _dask() -> Iterator[ExecutionBackend]:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
        dashboard_address=None, scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
    ) as cluster:
        backend = DaskBackend(cluster.scheduler_address, n_workers=2)
        try:
            yield backend
        finally:
            backend.close()


def _mcp() -> Iterator[ExecutionBackend]:
    pytest.importorskip("mcp")
    backend = MCPBackend({"workers": 2})
    try:
        yield backend
    finally:
        backend.close()


def _emulator() -> Iterator[ExecutionBackend]:
    pytest.importorskip("mcp")
    backend = EmulatorBackend({"workers": 2})
    try:
        yield backend
    finally:
        backend.close()


BACKENDS: dict[str, Callable[[], Iterator[ExecutionBackend]]] = {
    "dask": _dask, "mcp": _mcp, "emulator": _emulator,
}


@pytest.fixture(scope="module", params=list(BACKENDS))
def backend(request: pytest.FixtureRequest) -> Iterator[ExecutionBackend]:
    yield from BACKENDS[request.param]()


def _raised(model: Model, action: Any, steps: int) -> UncopyableState:
    with pytest.raises(UncopyableState) as info:
        model.run(action, steps=steps)
    error = info.value
    assert isinstance(error, TypeError)
    assert isinstance(error, AgentError)
    assert error.__cause__ is not None  # the worker's traceback
    return error


def _runs_again(backend: ExecutionBackend) -> None:
    """The same backend runs a model that pickles, with the reference's result."""
    good = Model(seed=0, backend=backend)
    good.add_many(cm.Sender, range(6))
    reference = Model(seed=0)
    reference.add_many(cm.Sender, range(6))
    assert good.run(cm.Sender.act, steps=3).digest == reference.run(cm.Sender.act, steps=3).digest


def test_state_that_copies_but_does_not_pickle_names_agent_attribute_phase_and_step(
        backend: ExecutionBackend) -> None:
    """Every agent takes a local class's instance at step 2; agent 0 is reported."""
    model = Model(seed=0, backend=backend)
    model.add_many(cm.Holder, range(6), at=2)

    error = _raised(model, cm.Holder.act, 4)

    assert (error.agent, error.attribute, error.phase, error.step) == (0, "notes", "Holder.act", 2)
    message = str(error)
    assert message.startswith(
        "agent 0 (Holder): attribute 'notes' holds a list, and notes[0] in it is a "
        "_copy_models._make_local_class.<locals>.Note, which cannot be pickled (")
    assert "Can't pickle local object" in message
    assert "when its state left its worker process for a snapshot after phase 'Holder.act' " \
           "at step 2" in message
    assert "not inside a function (a local class)" in message
    assert "or run on a backend in this process ('local', 'threaded' or 'async')" in message

    _runs_again(backend)


def test_a_payload_that_copies_but_does_not_pickle_names_the_message(
        backend: ExecutionBackend) -> None:
    """Agents 3-5 send a local class's instance at step 2; agent 3's message is reported."""
    model = Model(seed=0, backend=backend)
    model.add_many(cm.Sender, range(3))
    model.add_many(cm.Sender, range(3, 6), sends_at=2)

    error = _raised(model, cm.Sender.act, 4)

    assert (error.agent, error.recipient, error.topic) == (3, 4, "note")
    assert (error.phase, error.step, error.attribute) == ("Sender.act", 2, None)
    message = str(error)
    assert message.startswith(
        "agent 3 (Sender) sent a message to 4 with topic 'note' in phase 'Sender.act' at step 2 "
        "whose payload, a _copy_models._make_local_class.<locals>.Note, cannot be pickled to "
        "leave its worker process (")
    assert "Can't pickle local object" in message
    assert "define its classes and functions at the top level of an importable module" in message

    _runs_again(backend)


def test_initial_state_that_does_not_pickle_names_agent_and_argument(
        backend: ExecutionBackend) -> None:
    model = Model(seed=0, backend=backend)
    model.add(cm.Keeper, 0, items=[1])
    model.add(cm.Keeper, 1, items=[2, {"note": cm.Note(1)}])
    model.add(cm.Keeper, 2, items=[3])

    error = _raised(model, cm.Keeper.act, 1)

    assert (error.agent, error.attribute, error.phase, error.step) == (1, "items", None, None)
    message = str(error)
    assert message.startswith(
        "agent 1 (Keeper): argument 'items' holds a list, and items[1]['note'] in it is a "
        "_copy_models._make_local_class.<locals>.Note, which cannot be pickled (")
    assert "Can't pickle local object" in message
    assert "sent to their worker processes at the start of the run, before step 0" in message

    good = Model(seed=0, backend=backend)  # the workers are still usable
    good.add_many(cm.Keeper, range(3), items=[1])
    assert good.run(cm.Keeper.act, steps=1).state(2)["items"][0] == 1
    _runs_again(backend)


@pytest.mark.parametrize(("kind", "recipient", "topic"), [("lock", 3, "guard"),
                                                          ("broadcast", 0, "guards")])
def test_a_payload_that_does_not_copy_names_sender_recipient_phase_and_step(
        backend: ExecutionBackend, kind: str, recipient: int, topic: str) -> None:
    """A lock in a payload fails where it is sent, on the worker, as on every backend."""
    model = Model(seed=0, backend=backend)
    model.add_many(cm.Sender, range(2))
    model.add_many(cm.Sender, range(2, 6), sends_at=1, kind=kind)

    error = _raised(model, cm.Sender.act, 3)

    assert (error.agent, error.recipient, error.topic) == (2, recipient, topic)
    assert (error.phase, error.step, error.attribute) == ("Sender.act", 1, None)
    message = str(error)
    assert message.startswith(
        f"agent 2 sent a message to {recipient} with topic {topic!r} in phase 'Sender.act' at "
        f"step 1 whose payload, ")
    assert "cannot be copied (TypeError: cannot pickle '_thread.lock' object)" in message

    _runs_again(backend)


def test_a_lock_taken_into_state_names_agent_attribute_phase_and_step(
        backend: ExecutionBackend) -> None:
    model = Model(seed=0, backend=backend)
    model.add_many(cm.Locker, range(3))
    model.add_many(cm.Locker, range(3, 6), lock_at=1)

    error = _raised(model, cm.Locker.act, 4)

    assert (error.agent, error.attribute, error.phase, error.step) == (3, "lock", "Locker.act", 1)
    assert str(error).startswith(
        "agent 3 (Locker): attribute 'lock' holds a _thread.lock, which cannot be copied "
        "(TypeError: cannot pickle '_thread.lock' object)")
    assert "for a snapshot after phase 'Locker.act' at step 1" in str(error)

    _runs_again(backend)


def _holder(backend: ExecutionBackend) -> UncopyableState:
    model = Model(seed=0, backend=backend)
    model.add_many(cm.Holder, range(6), at=2)
    return _raised(model, cm.Holder.act, 4)


def _sender(backend: ExecutionBackend) -> UncopyableState:
    model = Model(seed=0, backend=backend)
    model.add_many(cm.Sender, range(3))
    model.add_many(cm.Sender, range(3, 6), sends_at=2)
    return _raised(model, cm.Sender.act, 4)


def _keeper(backend: ExecutionBackend) -> UncopyableState:
    model = Model(seed=0, backend=backend)
    model.add(cm.Keeper, 0, items=[1])
    model.add(cm.Keeper, 1, items=[2, {"note": cm.Note(1)}])
    return _raised(model, cm.Keeper.act, 1)


@pytest.fixture(scope="module")
def processes() -> Iterator[ProcessPoolBackend]:
    with ProcessPoolBackend(2) as pool:
        yield pool


@pytest.mark.parametrize("case", [_holder, _sender, _keeper], ids=["state", "payload", "initial"])
def test_the_message_is_the_one_of_the_processes_backend(
        backend: ExecutionBackend, processes: ProcessPoolBackend,
        case: Callable[[ExecutionBackend], UncopyableState]) -> None:
    error, expected = case(backend), case(processes)

    assert str(error) == str(expected)
    fields = ("agent", "attribute", "recipient", "topic", "phase", "step")
    assert [getattr(error, name) for name in fields] == [getattr(expected, name) for name in fields]
