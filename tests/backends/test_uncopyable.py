"""State and payloads that cannot be copied or pickled fail with an error that names them.

A lock in agent state, a lock in a payload, or (across worker processes) an
instance of a local class: every backend raises ``UncopyableState``, a
``TypeError``, naming the agent and its class, the attribute or the message,
the phase and the step, and what would work. Initial state is copied when it
is added, so later changes to what was passed change no run.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from simulacra import (
    AsyncBackend,
    ExecutionBackend,
    LocalBackend,
    Model,
    PregelBackend,
    ProcessPoolBackend,
    ThreadPoolBackend,
)
from simulacra.agents import private_copy
from simulacra.errors import AgentError, UncopyableState

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # workers inherit sys.path and import the models by this name
    sys.path.insert(0, str(HERE))

import _copy_models as cm  # noqa: E402

#: Every backend that holds agents in this process or in worker processes.
BACKENDS: dict[str, Callable[[], ExecutionBackend]] = {
    "local": LocalBackend,
    "threaded": lambda: ThreadPoolBackend(3),
    "processes": lambda: ProcessPoolBackend(2),
    "async": AsyncBackend,
    "pregel": PregelBackend,
}


@pytest.fixture(scope="module", params=list(BACKENDS))
def backend(request: pytest.FixtureRequest) -> Iterator[ExecutionBackend]:
    instance = BACKENDS[request.param]()
    yield instance
    instance.close()


@pytest.fixture(scope="module")
def processes() -> Iterator[ProcessPoolBackend]:
    with ProcessPoolBackend(2) as pool:
        yield pool


def _raised(model: Model, action: Any, steps: int, **options: Any) -> UncopyableState:
    with pytest.raises(UncopyableState) as info:
        model.run(action, steps=steps, **options)
    error = info.value
    assert isinstance(error, TypeError)
    assert isinstance(error, AgentError)
    assert error.__cause__ is not None  # chained: the copy's or the worker's traceback
    return error


# --------------------------------------------------------------------------- agent state


def test_a_lock_taken_into_state_names_agent_attribute_phase_and_step(
        backend: ExecutionBackend) -> None:
    """Agents 3-5 take a lock at step 1; every backend reports agent 3, as the reference does."""
    model = Model(seed=0, backend=backend)
    model.add_many(cm.Locker, range(3))
    model.add_many(cm.Locker, range(3, 6), lock_at=1)

    error = _raised(model, cm.Locker.act, 4)

    assert (error.agent, error.attribute, error.phase, error.step) == (3, "lock", "Locker.act", 1)
    message = str(error)
    assert message.startswith("agent 3 (Locker): attribute 'lock' holds a _thread.lock, which "
                              "cannot be copied (TypeError: cannot pickle '_thread.lock' object)")
    assert "for a snapshot after phase 'Locker.act' at step 1" in message
    assert "keep locks, open files, sockets and clients out of it" in message


@pytest.mark.parametrize(("steps", "where"), [
    (3, "after phase 'Locker.act' at step 2"),
    (0, "before any phase ran"),
])
def test_a_lock_from_init_fails_at_the_final_snapshot_without_digests(
        backend: ExecutionBackend, steps: int, where: str) -> None:
    """The issue's model: ``self.lock = threading.Lock()`` in ``__init__``."""
    model = Model(seed=0, backend=backend)
    model.add_many(cm.Locker, range(4), lock_at=-1)

    error = _raised(model, cm.Locker.act, steps, digests=False)

    assert (error.agent, error.attribute) == (0, "lock")
    assert error.step == (steps - 1 if steps else None)
    assert "agent 0 (Locker): attribute 'lock' holds a _thread.lock" in str(error)
    assert where in str(error)


def test_a_backend_runs_again_after_the_failure(backend: ExecutionBackend) -> None:
    bad = Model(seed=0, backend=backend)
    bad.add_many(cm.Locker, range(4), lock_at=0)
    _raised(bad, cm.Locker.act, 2)

    good = Model(seed=0, backend=backend)
    good.add_many(cm.Locker, range(4))
    reference = Model(seed=0)
    reference.add_many(cm.Locker, range(4))

    assert good.run(cm.Locker.act, steps=2).digest == reference.run(cm.Locker.act, steps=2).digest


def test_state_that_copies_but_does_not_pickle_fails_leaving_a_worker(
        processes: ProcessPoolBackend) -> None:
    model = Model(seed=0, backend=processes)
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


def test_the_same_state_runs_in_this_process() -> None:
    model = Model(seed=0, backend="local")
    model.add_many(cm.Holder, range(6), at=2)

    assert model.run(cm.Holder.act, steps=4).state(5)["notes"] == [cm.Note(5)]


# --------------------------------------------------------------------------- payloads


@pytest.mark.parametrize(("kind", "recipient", "topic"), [("lock", 3, "guard"),
                                                          ("broadcast", 0, "guards")])
def test_a_payload_that_does_not_copy_names_sender_recipient_phase_and_step(
        backend: ExecutionBackend, kind: str, recipient: int, topic: str) -> None:
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
    assert "send plain data" in message


def test_a_payload_that_copies_but_does_not_pickle_names_the_message(
        processes: ProcessPoolBackend) -> None:
    """A local class's instance: fine in this process, refused on the way out of a worker."""
    model = Model(seed=0, backend=processes)
    model.add_many(cm.Sender, range(3))
    model.add_many(cm.Sender, range(3, 6), sends_at=2)

    error = _raised(model, cm.Sender.act, 4)

    assert (error.agent, error.recipient, error.topic) == (3, 4, "note")
    assert (error.phase, error.step) == ("Sender.act", 2)
    message = str(error)
    assert message.startswith(
        "agent 3 (Sender) sent a message to 4 with topic 'note' in phase 'Sender.act' at step 2 "
        "whose payload, a _copy_models._make_local_class.<locals>.Note, cannot be pickled to "
        "leave its worker process (")
    assert "Can't pickle local object" in message
    assert "define its classes and functions at the top level of an importable module" in message

    local = Model(seed=0)
    local.add_many(cm.Sender, range(3))
    local.add_many(cm.Sender, range(3, 6), sends_at=2)
    assert local.run(cm.Sender.act, steps=4).state(4)["got"] == 4


# --------------------------------------------------------------------------- initial state


def test_initial_state_that_does_not_pickle_names_agent_and_argument(
        processes: ProcessPoolBackend) -> None:
    model = Model(seed=0, backend=processes)
    model.add(cm.Keeper, 0, items=[1])
    model.add(cm.Keeper, 1, items=[2, {"note": cm.Note(1)}])

    error = _raised(model, cm.Keeper.act, 1)

    assert (error.agent, error.attribute, error.phase, error.step) == (1, "items", None, None)
    assert str(error).startswith(
        "agent 1 (Keeper): argument 'items' holds a list, and items[1]['note'] in it is a "
        "_copy_models._make_local_class.<locals>.Note, which cannot be pickled (")
    assert "sent to their worker processes at the start of the run" in str(error)

    good = Model(seed=0, backend=processes)  # the pool is still usable
    good.add(cm.Keeper, 0, items=[1])
    assert good.run(cm.Keeper.act, steps=1).state(0)["items"][0] == 1


@pytest.mark.parametrize("many", [False, True])
def test_add_refuses_initial_state_that_does_not_copy(many: bool) -> None:
    model = Model(seed=0)
    model.add(cm.Keeper, 0, items=[])

    lock = [1, threading.Lock()]
    add = (lambda: model.add_many(cm.Keeper, [7, 8], items=lock)) if many else (
        lambda: model.add(cm.Keeper, 7, items=lock))

    with pytest.raises(UncopyableState) as info:
        add()

    error = info.value
    assert isinstance(error, TypeError)
    assert isinstance(error.__cause__, TypeError)
    assert (error.agent, error.attribute, error.phase, error.step) == (7, "items", None, None)
    call = "add_many" if many else "add"
    assert str(error).startswith(
        "agent 7 (Keeper): argument 'items' holds a list, and items[1] in it is a _thread.lock, "
        "which cannot be copied (TypeError: cannot pickle '_thread.lock' object), when "
        f"Model.{call} copied it, before any phase or step; initial state is copied when it is "
        "added")
    assert model.agent_ids == (0,)  # unchanged: id 7 is still free
    model.add(cm.Keeper, 7, items=[])


@pytest.mark.determinism
@pytest.mark.parametrize("name", ["local", "processes"])
def test_initial_state_is_copied_at_add(name: str) -> None:
    """Mutating a list after passing it to add() changes no run; runs repeat exactly."""
    items = [1, [2, 3]]
    shared = [4]
    model = Model(seed=3, backend=name)
    model.add(cm.Keeper, 0, items=items)
    model.add_many(cm.Keeper, [1, 2], items=shared)
    first = model.run(cm.Keeper.act, steps=3)

    items.append(99)
    items[1].append(99)  # type: ignore[union-attr]
    shared.clear()
    second = model.run(cm.Keeper.act, steps=3)

    fresh = Model(seed=3)
    fresh.add(cm.Keeper, 0, items=[1, [2, 3]])
    fresh.add_many(cm.Keeper, [1, 2], items=[4])
    expected = fresh.run(cm.Keeper.act, steps=3)
    assert first.digest == second.digest == expected.digest
    assert second.state(0)["items"][:2] == [1, [2, 3]]
    assert second.state(2)["items"][0] == 4
    assert model.specs[0].state["items"] == [1, [2, 3]]


def test_flat_containers_of_scalars_are_copied_without_deepcopy_but_privately() -> None:
    for value in ([1, "a", None], {"a": 1, 2: 2.5}, {1, 2}):
        copied = private_copy(value)
        assert copied == value
        assert copied is not value
        assert type(copied) is type(value)
    nested = [[1], {"a": [2]}]
    copied = private_copy(nested)
    assert copied == nested
    assert copied[0] is not nested[0]
    assert copied[1]["a"] is not nested[1]["a"]
    keyed = {(1, 2): [3]}  # a tuple key, a list value: deep-copied
    assert private_copy(keyed)[(1, 2)] is not keyed[(1, 2)]
