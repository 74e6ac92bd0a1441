"""Same seed, same result: every backend and worker count against the LocalBackend reference.

To check a new backend, add a factory to ``BACKENDS`` -- or, for a backend
that lives in its own module, a ``tests/backends/_conf_<name>.py`` file with a
``BACKENDS`` list of its own: every test here then runs the conformance model
on it and compares per-step state digests, message digests, message counts and
final agent states with the reference, bit for bit.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from simulacra import (
    AgentSpec,
    ExecutionBackend,
    LocalBackend,
    Message,
    Phase,
    ProcessPoolBackend,
    RunResult,
    SeedTree,
    ThreadPoolBackend,
)
from simulacra.backends import AgentSnapshot, BackendBase

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # workers inherit sys.path and import the models by this name
    sys.path.insert(0, str(HERE))

import _engine_models as models  # noqa: E402

STEPS = 6

#: (id, factory). Factories are called once per module; process pools are reused
#: by every test of the module and closed at its end.
BACKENDS: list[tuple[str, Callable[[], ExecutionBackend]]] = [
    ("local", LocalBackend),
    ("threaded-1", lambda: ThreadPoolBackend(1)),
    ("threaded-2", lambda: ThreadPoolBackend(2)),
    ("threaded-4", lambda: ThreadPoolBackend(4)),
    ("processes-1", lambda: ProcessPoolBackend(1)),
    ("processes-2", lambda: ProcessPoolBackend(2)),
    ("processes-4", lambda: ProcessPoolBackend(4)),
    ("processes-3-hash-forkserver",
     lambda: ProcessPoolBackend(3, partition="hash", start_method="forkserver")),
]
for _extra in sorted(HERE.glob("_conf_*.py")):
    BACKENDS += importlib.import_module(_extra.stem).BACKENDS


@pytest.fixture(scope="module", params=[factory for _, factory in BACKENDS],
                ids=[name for name, _ in BACKENDS])
def backend(request: pytest.FixtureRequest) -> Iterator[ExecutionBackend]:
    instance = request.param()
    yield instance
    instance.close()


@pytest.fixture(scope="module")
def reference() -> RunResult:
    return models.conformance_model().run(models.CONFORMANCE_SEQUENCE, steps=STEPS)


@pytest.fixture(scope="module")
def reference_str_ids() -> RunResult:
    model = models.conformance_model(string_ids=True, traders=17, auditors=3, seed="str-seed")
    return model.run(models.CONFORMANCE_SEQUENCE, steps=STEPS)


def _assert_same(result: RunResult, reference: RunResult) -> None:
    assert result.message_counts == reference.message_counts
    assert result.message_digests == reference.message_digests
    assert result.state_digests == reference.state_digests
    assert dict(result.agents) == dict(reference.agents)
    assert result.digest == reference.digest


def test_the_reference_model_exercises_every_feature(reference: RunResult) -> None:
    """Guards against a vacuous pass: the model sends, draws, restricts and mutates."""
    assert len(reference.state_digests) == STEPS
    assert len(set(reference.state_digests)) == STEPS  # the state changes every step
    assert all(count > 0 for count in reference.message_counts)
    trader = reference.state(0)
    assert trader["seen"]  # settle (receivers_only) ran
    assert any(reference.state(n)["ticks"] > 0 for n in range(23))  # tick ran
    assert len(reference.state(23)["totals"]) == STEPS  # auditors audited every step
    vip, plain = reference.state(5), reference.state(6)
    assert vip["cash"] != int(vip["cash"])  # the vip bonus (a random float) was added
    assert plain["cash"] != 100.0 + 6


def test_same_seed_same_result(backend: ExecutionBackend, reference: RunResult) -> None:
    result = models.conformance_model(backend).run(models.CONFORMANCE_SEQUENCE, steps=STEPS)

    assert result.backend == backend.name
    _assert_same(result, reference)


def test_same_seed_same_result_with_str_ids(backend: ExecutionBackend,
                                            reference_str_ids: RunResult) -> None:
    """String ids sort as strings, and nothing hashes them (workers have other hash seeds)."""
    model = models.conformance_model(backend, string_ids=True, traders=17, auditors=3,
                                     seed="str-seed")
    result = model.run(models.CONFORMANCE_SEQUENCE, steps=STEPS)

    _assert_same(result, reference_str_ids)


def test_backend_is_reusable_across_runs(backend: ExecutionBackend,
                                         reference: RunResult) -> None:
    """A second run on the same backend starts from the added agents again."""
    model = models.conformance_model(backend)
    first = model.run(models.CONFORMANCE_SEQUENCE, steps=2)
    again = model.run(models.CONFORMANCE_SEQUENCE, steps=STEPS)

    assert first.state_digests == reference.state_digests[:2]
    _assert_same(again, reference)


def test_a_different_seed_gives_a_different_result(reference: RunResult) -> None:
    """The digests can tell runs apart (so the equalities above mean something)."""
    other = models.conformance_model(seed=2025).run(models.CONFORMANCE_SEQUENCE, steps=STEPS)

    assert other.state_digests[0] != reference.state_digests[0]
    assert other.digest != reference.digest


def test_get_agents_for_is_the_same_on_every_backend(backend: ExecutionBackend) -> None:
    model = models.conformance_model()
    specs = model.specs
    local = LocalBackend()
    for candidate in (local, backend):
        candidate.start(specs, model.seed, {"fee": 0.0, "auditors": [23, 24]})
    try:
        for phase in models.CONFORMANCE_SEQUENCE:
            assert backend.get_agents_for(phase) == local.get_agents_for(phase)
        vip = models.CONFORMANCE_SEQUENCE[2]
        assert backend.get_agents_for(vip) == [0, 5, 10, 15, 20]
        settle = models.CONFORMANCE_SEQUENCE[1]
        assert backend.get_agents_for(settle) == []  # receivers_only: nobody has mail yet
    finally:
        local.close()


class _ReversedDelivery(BackendBase):
    """A broken backend: it delivers each batch of messages in reverse order."""

    name = "reversed"

    def __init__(self) -> None:
        self._inner = LocalBackend()

    def start(self, specs: Iterable[AgentSpec], seed: SeedTree,
              world: Mapping[str, Any] | None) -> None:
        self._inner.start(specs, seed, world)

    def execute_action(self, phase: Phase, step: int, phase_index: int) -> list[Message]:
        return self._inner.execute_action(phase, step, phase_index)

    def deliver_messages(self, messages: list[Message]) -> None:
        self._inner.deliver_messages(messages[::-1])

    def get_agents_for(self, phase: Phase) -> list[Any]:
        return self._inner.get_agents_for(phase)

    def snapshot(self) -> AgentSnapshot:
        return self._inner.snapshot()


def test_the_suite_catches_a_backend_that_breaks_inbox_order(reference: RunResult) -> None:
    """The comparisons above can fail: one wrong inbox order changes the state digests."""
    result = models.conformance_model(_ReversedDelivery()).run(models.CONFORMANCE_SEQUENCE,
                                                               steps=STEPS)

    assert result.message_counts == reference.message_counts  # the same traffic...
    assert result.state_digests[0] != reference.state_digests[0]  # ...received out of order
    assert result.digest != reference.digest
